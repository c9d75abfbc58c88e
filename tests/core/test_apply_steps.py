"""How many plan reservations the cache makes in one step under its lock (``_next_run``):
as many as fit in a slice on the machine it runs on, so a filter call waiting for the lock
never waits behind one long step (issue 12: at most 5 ms)."""

from __future__ import annotations

import gc
import time

import pytest

from app.core.model.values import Pod
from app.core.state import cache as cache_module
from app.core.state.cache import TOGETHER, ClusterCache, _next_run
from app.core.state.statement import Reserve, Statement
from tests.factories import node, pod

SLICE = 0.002

#: (reservations tried together, seconds that step took, how many to try next)
ROWS = [
    ("quick: doubled", 8, SLICE / 8, 16),
    ("quick at the cap: kept", TOGETHER, SLICE / 8, TOGETHER),
    ("within the slice: kept", 8, SLICE / 2, 8),
    ("over the slice: halved", 8, SLICE * 3, 4),
    ("over the slice at two: kept at two", 2, SLICE * 3, 2),
]


def _sixty_four() -> tuple[ClusterCache, list[Pod], list[Reserve]]:
    """A cache of 8 nodes of 8 GPUs and 64 pending 1-GPU pods; a reservation of each on its
    own device (8 per node), in order."""
    cache = ClusterCache()
    cache.upsert_nodes([node(f"n{i}", gpus=8) for i in range(8)])
    pods = [pod(f"p{i}", gpu=1) for i in range(64)]
    cache.upsert_pods(pods)
    ops = [Reserve(f"g{i}", {p.uid: f"n{i // 8}"}, {p.uid: (i % 8,)}) for i, p in enumerate(pods)]
    return cache, pods, ops


@pytest.mark.parametrize(("together", "took", "then"), [r[1:] for r in ROWS],
                         ids=[r[0] for r in ROWS])  # fmt: skip
def test_the_next_step_size_follows_how_long_the_last_took(
    together: int, took: float, then: int
) -> None:
    assert _next_run(together, took, SLICE) == then


def test_a_slow_machine_makes_smaller_steps_with_the_same_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each step of reservations made together costs 1 ms plus 1 ms per reservation (a
    machine far slower than any): steps shrink until one fits a slice, and every
    reservation is made all the same."""
    cache, pods, ops = _sixty_four()
    whole = ClusterCache._reserve_whole_run
    steps: list[int] = []

    def slow(self: ClusterCache, ops: list[Reserve]) -> bool | None:
        steps.append(len(ops))
        time.sleep(0.001 * (1 + len(ops)))
        return whole(self, ops)

    monkeypatch.setattr(ClusterCache, "_reserve_whole_run", slow)
    applied = cache.apply(Statement(base=cache.generation, ops=ops), slice_seconds=SLICE)
    assert not applied.refused
    assert steps[0] == cache_module.TOGETHER_FIRST and steps[-1] <= 2 and sum(steps) == 64
    assert all(cache.snapshot().placement[p.uid] == f"n{i // 8}" for i, p in enumerate(pods))


def test_no_step_begins_that_would_end_past_the_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step of reservations made together takes 60 % of a slice: a second step in the
    same hold would end past it, so the lock is given up after every step (a filter call
    waiting for it waits about one step, not two)."""
    cache, pods, ops = _sixty_four()
    whole = ClusterCache._reserve_whole_run
    cache._together = 8
    lock = cache._lock
    holds: list[int] = []  # steps made in each hold of the lock

    class Counting:
        def __enter__(self) -> None:
            lock.acquire()
            holds.append(0)

        def __exit__(self, *exc: object) -> None:
            lock.release()

    def step(self: ClusterCache, ops: list[Reserve]) -> bool | None:
        holds[-1] += 1
        time.sleep(SLICE * 0.6)
        return whole(self, ops)

    monkeypatch.setattr(ClusterCache, "_reserve_whole_run", step)
    monkeypatch.setattr(cache_module, "_next_run", lambda together, took, slice_: together)
    monkeypatch.setattr(cache, "_lock", Counting())
    applied = cache.apply(Statement(base=cache.generation, ops=ops), slice_seconds=SLICE)
    assert not applied.refused
    assert holds == [1] * 8


@pytest.mark.parametrize("enabled", [True, False], ids=["collector on", "collector off"])
def test_no_garbage_collection_while_a_step_holds_the_lock(
    enabled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step that allocates enough to trigger the collector many times over: no collection
    starts while it holds the cache's lock, and the collector is left as it was found."""
    cache, pods, ops = _sixty_four()
    whole = ClusterCache._reserve_whole_run
    collected_in_step: list[str] = []
    in_step = False

    def noting(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and in_step:
            collected_in_step.append(f"generation {info['generation']}")

    def step(self: ClusterCache, ops: list[Reserve]) -> bool | None:
        nonlocal in_step
        in_step = True
        garbage = [[i] for i in range(50_000)]  # far past the collector's thresholds
        del garbage
        in_step = False
        return whole(self, ops)

    monkeypatch.setattr(ClusterCache, "_reserve_whole_run", step)
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    gc.callbacks.append(noting)
    try:
        applied = cache.apply(Statement(base=cache.generation, ops=ops), slice_seconds=SLICE)
        assert gc.isenabled() is enabled
    finally:
        gc.callbacks.remove(noting)
        (gc.enable if was else gc.disable)()
    assert not applied.refused
    assert collected_in_step == []
