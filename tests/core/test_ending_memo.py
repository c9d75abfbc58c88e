"""``ending`` with an ``EndingMemo`` kept across calls gives exactly what it gives without
one, after random sequences of cache events (pods binding, ending, changing runtimes,
assumed, planned and released; pending pods coming and going; holds set and lifted)."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest

from app.core.actions.backfill import Ending, EndingMemo, ending
from app.core.model.runtime import expected_end
from app.core.state.cache import ClusterCache
from app.core.state.releases import releases
from app.core.state.view import Snapshot
from tests.core.test_cache_placed import NODES, event
from tests.factories import node


def _same(a: Ending, b: Ending) -> bool:
    return (
        a.ends == b.ends
        and a.timeless == b.timeless
        and all(
            np.array_equal(getattr(a.releases, f), getattr(b.releases, f))
            for f in ("rows", "requests", "device_rows", "device_ids", "device_milli",
                      "device_end")
        )
    )  # fmt: skip


def _reference(snapshot: Snapshot, within: np.ndarray | None, planned: bool) -> Ending:
    """``ending`` as first written: every counted pod by expected end, then ``releases``."""
    view, running, timeless = snapshot.view, [], True
    for uid, pod in snapshot.pods.items():
        node_name = snapshot.placement.get(uid)
        counted = snapshot.holds_node(pod) or (planned and uid in snapshot.reserved)
        if not node_name or pod.terminal or not counted or node_name not in view.index:
            continue
        if within is not None and not within[view.index[node_name]]:
            continue
        started = pod.started or snapshot.bound_at.get(uid)
        if started is None:
            started, timeless = 5000.0, False
        running.append((expected_end(pod, started, 1800.0), pod))
    running.sort(key=lambda r: r[0])
    return Ending([e for e, _ in running], releases(snapshot, (p for _, p in running)), timeless)


def _both(snapshot: Snapshot, memo: EndingMemo, **kwargs: object) -> tuple[Ending, Ending]:
    kept = ending(snapshot, now=5000.0, default_runtime=1800.0, memo=memo, **kwargs)  # type: ignore[arg-type]
    fresh = ending(snapshot, now=5000.0, default_runtime=1800.0, **kwargs)  # type: ignore[arg-type]
    return kept, fresh


@pytest.mark.parametrize("seed", range(6))
def test_kept_entries_give_the_same_order_and_releases(seed: int) -> None:
    rng = random.Random(seed)
    cache = ClusterCache()
    cache.upsert_nodes([node(n, gpus=4) for n in NODES])
    memo = EndingMemo()
    compared = 0
    for step in range(300):
        event(cache, rng, step)
        snapshot = cache.snapshot()
        within = np.array([rng.random() < 0.7 for _ in NODES])
        for kwargs in ({}, {"planned_start_now": True}, {"within": within}):
            kept, fresh = _both(snapshot, memo, **kwargs)
            assert _same(kept, fresh), (step, kwargs)
            first = _reference(
                snapshot, kwargs.get("within"), bool(kwargs.get("planned_start_now"))
            )  # type: ignore[arg-type]
            assert _same(fresh, first), (step, kwargs)
            compared += len(fresh.ends)
    assert compared > 1000 and memo.entries


def test_threads_sharing_a_memo_get_what_each_would_alone() -> None:
    """Explains run in parallel (HTTP threads) on one memo while pods change."""
    rng = random.Random(7)
    cache = ClusterCache()
    cache.upsert_nodes([node(n, gpus=4) for n in NODES])
    snapshots = []
    for step in range(200):
        event(cache, rng, step)
        snapshots.append(cache.snapshot())
    memo = EndingMemo()
    failures: list[int] = []

    def read(offset: int) -> None:
        for i in range(offset, len(snapshots), 3):
            kept, fresh = _both(snapshots[i], memo, planned_start_now=True)
            if not _same(kept, fresh):
                failures.append(i)

    threads = [threading.Thread(target=read, args=(k,)) for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
