"""``ending`` with an ``EndingMemo`` kept across calls gives exactly what it gives without
one, after random sequences of cache events (pods binding, ending, changing runtimes,
assumed, planned and released; pending pods coming and going; holds set and lifted)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from app.core.actions.backfill import Ending, EndingMemo, ending
from app.core.state.cache import ClusterCache, Snapshot
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
            compared += len(fresh.ends)
    assert compared > 1000 and memo.entries
