"""``SnapshotMemo``: what it keeps per snapshot and across pending-only changes, and for how
long."""

from __future__ import annotations

import dataclasses

from app.core.cycle.memos import MEMO_VALUES, SnapshotMemo, _copy
from app.core.model.gang import Gang
from app.core.state.cache import ClusterCache
from tests.factories import node, pod


def _cache() -> ClusterCache:
    cache = ClusterCache()
    cache.upsert_nodes([node("a", gpus=8)])
    cache.upsert_pods([pod("run", gpu=2, node="a", phase="Running")])
    return cache


def test_steady_values_survive_pending_pods_and_not_placed_changes() -> None:
    cache, memo = _cache(), SnapshotMemo()
    made: list[int] = []
    waiting = pod("wait", gpu=1)

    def value() -> int:
        made.append(1)
        return len(made)

    assert memo.steady(cache.snapshot(), "k", value) == 1
    cache.upsert_pods([waiting])
    cache.delete_pod(waiting.uid)
    assert memo.steady(cache.snapshot(), "k", value) == 1  # kept
    assert memo.get(cache.snapshot(), "k", value) == 2  # per snapshot: made again
    (running,) = cache.snapshot().placement
    cache.delete_pod(running)
    assert memo.steady(cache.snapshot(), "k", value) == 3  # a running pod went: made again


def test_steady_values_read_pending_objects_by_identity() -> None:
    cache, memo = _cache(), SnapshotMemo()
    a, b = pod("a", gpu=1), pod("b", gpu=1)
    assert memo.steady(cache.snapshot(), "k", lambda: "with a", same=[a]) == "with a"
    assert memo.steady(cache.snapshot(), "k", lambda: "other", same=[a]) == "with a"
    assert memo.steady(cache.snapshot(), "k", lambda: "with b", same=[b]) == "with b"


def test_a_full_memo_drops_its_oldest_values_only() -> None:
    cache, memo = _cache(), SnapshotMemo()
    snapshot = cache.snapshot()
    for i in range(MEMO_VALUES + 10):
        memo.steady(snapshot, i, lambda i=i: i)  # type: ignore[misc]
    newest = MEMO_VALUES + 9
    assert memo.steady(snapshot, newest, lambda: -1) == newest
    assert memo.steady(snapshot, 0, lambda: -1) == -1  # the oldest went


def test_a_gang_copy_has_every_field() -> None:
    """``gangs_of`` copies each gang field by field: a field added to ``Gang`` must be
    copied too."""
    values = {
        f.name: (f"v-{f.name}" if f.type in ("str", "str | None") else object())
        for f in dataclasses.fields(Gang)
    }
    gang = Gang(**values)  # type: ignore[arg-type]
    copied = _copy(gang)
    assert copied is not gang
    assert all(getattr(copied, f.name) is getattr(gang, f.name) for f in dataclasses.fields(Gang))
