"""``AlikeFit`` (whether ``allocate`` places every alike member, without placing them), and
``fits_all`` for any members, say exactly what ``allocate(...).complete`` says, on random
clusters with random usage (over-full nodes, part-used GPUs, node selectors, CPU-only
members); its per-row terms add up to its total; ``Releases.freed_rows`` and ``RowTerms``
give ``freed``'s rows; and ``earliest`` for alike members (one allocation, the exact test,
any hints) finds what the search by the quick bound and allocations finds, on random
timelines with gangs ahead of it; and a placement ``placed_alike`` says a changed view
keeps is the one ``allocate`` gives on it."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from app.core.actions.allocate import AlikeFit, allocate, fits_all, placed_alike
from app.core.actions.backfill import ending
from app.core.gpu.ask import GpuAsk
from app.core.insight.forward import FreedViews, Occupant, _earliest_any, earliest
from app.core.model.values import Pod
from app.core.state.cache import ClusterCache
from app.core.state.releases import releases
from app.core.state.view import NodeView
from tests.factories import EPOCH, node, pod

NOW = EPOCH.timestamp() + 10_000


def _cluster(rng: random.Random) -> ClusterCache:
    """Random nodes (some labelled, some tainted) with random running pods, over-full ones
    included (a cache may show that for a moment)."""
    cache = ClusterCache()
    names = [f"n{i}" for i in range(rng.randint(1, 12))]
    cache.upsert_nodes(
        node(n, gpus=rng.choice([0, 4, 8]), cpu=rng.choice(["16", "64"]),
             labels={"pool": rng.choice(["x", "y"])},
             taints=[{"key": "k", "effect": "NoSchedule"}] if rng.random() < 0.1 else None)
        for n in names
    )  # fmt: skip
    running = []
    for i in range(rng.randint(0, 40)):
        gpu: int | str = rng.choice([0, 1, 2, 4, 8, "0.5"])
        data = pod(f"r{i}", gpu=gpu, cpu=rng.choice(["1", "8", "24"]), node=rng.choice(names),
                   phase="Running", annotations={"muster.io/expected-runtime": rng.choice(
                       ["10m", "30m", "1h", "3h"])})  # fmt: skip
        running.append(replace(data, started=NOW - rng.randint(0, 5000)))
    cache.upsert_pods(running)
    return cache


def _members(rng: random.Random, name: str) -> list[Pod]:
    """A gang of alike members (or, now and then, one that is not: ``AlikeFit.of`` says None)."""
    size = rng.randint(1, 8)
    gpu: int | str = rng.choice([0, 1, 2, 4, 8, "0.5"])
    cpu = rng.choice(["1", "8", "24"])
    selector = {"pool": rng.choice(["x", "y"])} if rng.random() < 0.2 else None
    out = [pod(f"{name}-{i}", gpu=gpu, cpu=cpu, node_selector=selector) for i in range(size)]
    if rng.random() < 0.1:
        out.append(pod(f"{name}-odd", gpu=1, cpu="2"))
    return out


def _views(rng: random.Random, view: NodeView, count: int) -> list[NodeView]:
    """``view`` with random amounts taken off or given back per row (GPUs per device)."""
    out = [view]
    for _ in range(count):
        used = view.used + rng.choice([-1, 1]) * np.asarray(
            [[rng.choice([0, 0, 1000, 4000]) for _ in range(view.used.shape[1])]
             for _ in range(len(view.nodes))], np.int64)  # fmt: skip
        change = np.asarray(
            [[rng.choice([0, 0, -500, -1000, 1000]) for _ in range(view.gpu_free.shape[1])]
             for _ in range(len(view.nodes))], np.int64)  # fmt: skip
        devices = view.allocatable[:, :1] // 1000  # absent devices show 0 free
        change[np.arange(view.gpu_free.shape[1])[None, :] >= devices] = 0
        gpu_free = np.clip(view.gpu_free + change, 0, 1000)
        out.append(replace(view, used=used, gpu_free=gpu_free))
    return out


@pytest.mark.parametrize("seed", range(60))
def test_alike_fit_says_what_allocate_says(seed: int) -> None:
    rng = random.Random(seed)
    view = _cluster(rng).snapshot().view
    checked = 0
    for trial in range(8):
        members = _members(rng, f"g{trial}")
        for strategy in ("binpack", "spread"):
            fit = AlikeFit.of(view, members, strategy)
            for other in _views(rng, view, 2):
                want = allocate(other, members, strategy=strategy).complete
                assert fits_all(other, members, strategy) == want
            alike = len({(p.requests, p.node_selector.get("pool")) for p in members}) == 1
            shared = GpuAsk.of(members[0]).shared  # a GPU share: placed member by member
            if strategy == "spread" or not alike or shared:
                assert fit is None
                continue
            assert fit is not None
            for other in _views(rng, view, 3):
                assert fit.fits(other) == allocate(other, members, strategy=strategy).complete
                # The total is the sum of any split of the rows' terms.
                rows = np.arange(len(other.nodes))
                cut = rng.randint(0, len(rows))
                parts = [rows[:cut], rows[cut:]]
                total = sum(fit.room_of(r, other.used[r], other.gpu_free[r]) for r in parts)
                assert total == fit.room(other)
                checked += 1
    assert checked


def test_alike_fit_refuses_a_view_of_another_node_table() -> None:
    one, two = ClusterCache(), ClusterCache()
    one.upsert_nodes([node("a")])
    two.upsert_nodes([node("b")])
    fit = AlikeFit.of(one.snapshot().view, [pod("p", gpu=1)], "binpack")
    assert fit is not None
    with pytest.raises(ValueError, match="another node table"):
        fit.fits(two.snapshot().view)


@pytest.mark.parametrize("seed", range(30))
def test_freed_rows_are_the_rows_freed_changes(seed: int) -> None:
    rng = random.Random(seed)
    snapshot = _cluster(rng).snapshot()
    pods = [p for p in snapshot.pods.values() if rng.random() < rng.choice([0.0, 0.5])]
    found = releases(snapshot, pods)
    whole = found.freed(snapshot.view)
    rows, used, gpu_free = found.freed_rows(snapshot.view)
    assert rows.tolist() == sorted({snapshot.view.index[p.node_name] for p in pods})
    assert (used == whole.used[rows]).all() and (gpu_free == whole.gpu_free[rows]).all()
    others = np.setdiff1d(np.arange(len(snapshot.view.nodes)), rows)
    assert (whole.used[others] == snapshot.view.used[others]).all()
    assert (whole.gpu_free[others] == snapshot.view.gpu_free[others]).all()
    # Per-pod terms give those rows for any subset of the pods.
    terms = found.row_terms(snapshot.view)
    assert terms.rows.tolist() == rows.tolist()
    for _ in range(5):
        keep = np.asarray([rng.random() < 0.5 for _ in range(len(found))], dtype=bool)
        some = found.only(keep).freed(snapshot.view)
        used, gpu_free = terms.freed(keep)
        assert (used == some.used[rows]).all() and (gpu_free == some.gpu_free[rows]).all()


@pytest.mark.parametrize("seed", range(40))
def test_earliest_for_alike_members_finds_what_the_search_by_allocations_finds(
    seed: int,
) -> None:
    rng = random.Random(seed)
    snapshot = _cluster(rng).snapshot()
    view = snapshot.view
    order = ending(snapshot, now=NOW, default_runtime=3600.0)
    freed_views = FreedViews(view, order)
    hints: dict[object, int] = {}
    garbage: dict[object, int] = {}
    occupants: list[Occupant] = []
    for g in range(6):  # gangs ahead in a line, each then occupying its room
        members = _members(rng, f"g{g}")
        want = _earliest_any(members, occupants, NOW, "binpack", FreedViews(view, order))
        for kept in (hints, garbage, None):
            if kept is garbage:
                for key in list(hints):
                    garbage[key] = rng.randint(-3, len(order.ends) + 3)
            got = earliest(view, order, members, occupants, now=NOW, strategy="binpack",
                           freed_views=freed_views, hints=kept)  # fmt: skip
            assert got == want, (g, kept is garbage)
        if want is not None:
            start, allocation = want
            runtime = 60.0 * rng.choice([10, 30, 60])
            occupants.append(Occupant(start, start + runtime, tuple(members), allocation))


def _few_rows_changed(rng: random.Random, view: NodeView) -> NodeView:
    """``view`` with one to three rows' usage and free devices changed."""
    used, gpu_free = view.used.copy(), view.gpu_free.copy()
    for row in rng.sample(range(len(view.nodes)), min(rng.randint(1, 3), len(view.nodes))):
        used[row] += rng.choice([-1, 1]) * np.asarray(
            [rng.choice([0, 1000, 4000]) for _ in range(used.shape[1])], np.int64
        )
        for d in range(int(view.allocatable[row, 0] // 1000)):
            gpu_free[row, d] = rng.choice([0, 500, 1000, gpu_free[row, d]])
    return replace(view, used=used, gpu_free=gpu_free)


def test_a_placement_said_unchanged_is_what_allocate_gives() -> None:
    said = 0
    for seed in range(80):
        rng = random.Random(seed)
        view = _cluster(rng).snapshot().view
        for trial in range(20):
            members = _members(rng, f"g{trial}")
            before = allocate(view, members)
            after = _few_rows_changed(rng, view)
            if placed_alike(view, after, members, before, "binpack"):
                assert allocate(after, members) == before, (seed, trial)
                said += 1
            assert not placed_alike(view, after, members, before, "spread")
    assert said > 100  # many placements are kept (the rest allocate again)
