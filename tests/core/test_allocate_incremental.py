"""``allocate`` judges alike members once and then only the rows that changed: it must place
exactly as judging every row for every member would."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import pytest

from app.core.actions.allocate import _LOCALITY, Allocation, allocate
from app.core.gpu.ask import GpuAsk, fits_mask, take
from app.core.gpu.ledger import default_choice, device_count
from app.core.model.values import Pod
from app.core.policies.registry import eligible, scorer
from app.core.state.cache import ClusterCache
from app.core.state.view import NodeView
from tests.factories import node, pod


def reference(
    view: NodeView,
    members: Sequence[Pod],
    strategy: str,
    allowed: Mapping[str, np.ndarray] | None = None,
) -> Allocation:
    """The plain rule: every member judged on every row."""
    result = Allocation()
    policy = scorer(strategy)
    used = view.used.copy()
    working = replace(view, used=used)
    chosen = np.zeros(len(view.nodes), dtype=bool)
    gpu_free = view.gpu_free.copy()
    for member in sorted(
        members, key=lambda p: (-p.requests.gpu, -p.requests.cpu, -p.requests.memory)
    ):
        need = np.asarray(member.requests, dtype=np.int64)
        ok = eligible(view, member) & ((view.allocatable - used) >= need).all(axis=1)
        ask = GpuAsk.of(member)
        if ask.count:
            ok &= fits_mask(gpu_free, ask)
        if allowed is not None and member.uid in allowed:
            ok &= allowed[member.uid]
        if not ok.any():
            result.unplaced.append(member)
            continue
        rows = np.flatnonzero(ok)
        scores = policy.score(working, rows, member.requests) + _LOCALITY * chosen[rows]
        row = int(rows[int(np.argmax(scores))])
        used[row] += need
        if ask.count:
            free = gpu_free[row, : device_count(view.nodes[row])]
            devices = default_choice(view.nodes[row], free.tolist(), ask)
            assert devices is not None
            take(free, ask, devices)
            result.devices[member.uid] = devices
        chosen[row] = True
        result.placed[member.uid] = view.nodes[row].name
    return result


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("strategy", ["binpack", "spread"])
def test_same_placements_as_judging_every_row(seed: int, strategy: str) -> None:
    rng = random.Random(seed)
    cache = ClusterCache()
    cache.upsert_nodes(
        node(f"n{i}", gpus=rng.choice([0, 4, 8]), labels={"pool": rng.choice("ab")},
             cpu=str(rng.choice([16, 64])))
        for i in range(rng.randint(3, 30))
    )  # fmt: skip
    running = [
        pod(gpu=rng.randint(1, 4), node=f"n{rng.randrange(len(cache.view().nodes))}")
        for _ in range(rng.randint(0, 20))
    ]
    cache.upsert_pods(running)
    view = cache.view()
    kinds = [
        {"gpu": rng.choice([0, 1, 2, 4]), "cpu": rng.choice(["1", "4", "8"])}
        for _ in range(rng.randint(1, 3))
    ]
    members = []
    for i in range(rng.randint(1, 24)):
        kind = rng.choice(kinds)
        selector = {"pool": "a"} if rng.random() < 0.2 else None
        members.append(pod(f"m{i}", node_selector=selector, **kind))  # type: ignore[arg-type]
    allowed = None
    if rng.random() < 0.5:
        mask = np.array([rng.random() < 0.7 for _ in view.nodes])
        allowed = {m.uid: mask for m in members if rng.random() < 0.8}
    got = allocate(view, members, strategy=strategy, allowed=allowed)
    want = reference(view, members, strategy, allowed)
    assert got.placed == want.placed
    assert got.devices == want.devices
    assert [p.uid for p in got.unplaced] == [p.uid for p in want.unplaced]


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize("narrowed", [False, True])
def test_alike_members_fill_rows_as_one_by_one(seed: int, narrowed: bool) -> None:
    """Members all alike under a packing scorer fill the best rows at once (``_fill_alike``):
    the same nodes and devices as judging every row for every member, also inside one domain
    (one ``allowed`` mask for all), on partly used nodes, and short of room."""
    rng = random.Random(1000 + seed)
    cache = ClusterCache()
    cache.upsert_nodes(
        node(f"n{i}", gpus=rng.choice([0, 4, 8, 8]), cpu=str(rng.choice([8, 16, 64])),
             labels={"pool": rng.choice("ab")})
        for i in range(rng.randint(2, 40))
    )  # fmt: skip
    names = [n.name for n in cache.view().nodes]
    cache.upsert_pods(
        pod(gpu=rng.randint(0, 3), cpu=rng.choice(["1", "4"]), node=rng.choice(names))
        for _ in range(rng.randint(0, 40))
    )
    view = cache.view()
    kind = {"gpu": rng.choice([0, 1, 1, 2, 4]), "cpu": rng.choice(["1", "4", "8"])}
    selector = {"pool": "a"} if rng.random() < 0.2 else None
    members = [
        pod(f"m{i}", node_selector=selector, **kind)  # type: ignore[arg-type]
        for i in range(rng.randint(1, 30))
    ]
    allowed = None
    if narrowed:
        mask = np.array([rng.random() < 0.5 for _ in view.nodes])
        allowed = dict.fromkeys((m.uid for m in members), mask)
    got = allocate(view, members, strategy="binpack", allowed=allowed)
    want = reference(view, members, "binpack", allowed)
    assert got.placed == want.placed
    assert got.devices == want.devices
    assert [p.uid for p in got.unplaced] == [p.uid for p in want.unplaced]
