"""``cheapest_set`` rules sets out with the quick fit bound before it allocates (and tells
alike members' fit without allocating, from the rows the candidates are on): on random
clusters (GPU and CPU-bound gangs, node selectors, whole and shared GPUs) it chooses exactly
what the same search choosing by allocations alone chooses."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

import pytest

from app.core.actions import victims
from app.core.actions.allocate import Allocation, allocate
from app.core.actions.victims import Unit, _Freer, cheapest_set, running_units
from app.core.cycle.planner import gangs_of
from app.core.model.queues import parse_queue_config
from app.core.model.values import Pod
from app.core.policies.minruntime import MinRuntime
from app.core.state.cache import ClusterCache
from app.core.state.queueusage import queue_name
from app.core.state.view import Snapshot
from tests.factories import EPOCH, node, pod

NOW = EPOCH.timestamp() + 10_000
QUEUES = parse_queue_config("queues:\n  - {name: default}\n")


def fresh(
    snapshot: Snapshot, members: Sequence[Pod], candidates: Sequence[Unit], strategy: str
) -> tuple[list[Unit], Allocation] | None:
    """``cheapest_set`` as it was: every set tried is allocated."""
    gone = _Freer(snapshot, candidates)

    def attempt(units: Sequence[Unit]) -> Allocation:
        return allocate(gone.freed(units), members, strategy=strategy)

    if not candidates or not attempt(candidates).complete:
        return None
    low, high = 1, len(candidates)
    while low < high:
        mid = (low + high) // 2
        if attempt(candidates[:mid]).complete:
            high = mid
        else:
            low = mid + 1
    chosen = list(candidates[:low])
    for unit in reversed(candidates[:low]):
        trial = [u for u in chosen if u is not unit]
        if trial and attempt(trial).complete:
            chosen = trial
    return chosen, attempt(chosen)


def _gang(rng: random.Random, name: str, nodes: list[str], running: bool) -> list[Pod]:
    size = rng.randint(1, 4)
    gpu: int | str = rng.choice([0, 1, 2, 4, 8, "0.5"])
    cpu = rng.choice(["1", "8", "24"])
    labels = {"muster.io/pod-group": name, "muster.io/min-member": str(size)}
    selector = {"pool": rng.choice(["x", "y"])} if rng.random() < 0.2 else None
    out = []
    for i in range(size):
        p = pod(f"{name}-{i}", gpu=gpu, cpu=cpu, labels=labels, node_selector=selector,
                node=rng.choice(nodes) if running else "", priority=rng.randint(0, 9))  # fmt: skip
        out.append(replace(p, started=NOW - rng.randint(0, 5000)) if running else p)
    return out


@pytest.mark.parametrize("terms", [True, False], ids=["per-pod terms", "rows per set"])
@pytest.mark.parametrize("seed", range(40))
def test_cheapest_set_with_the_bound_matches_allocations_alone(
    seed: int, terms: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not terms:  # as for a planner's many candidates: each set's rows summed apart
        monkeypatch.setattr(victims, "TERMS", 0)
    rng = random.Random(seed)
    cache = ClusterCache()
    names = [f"n{i}" for i in range(rng.randint(2, 6))]
    cache.upsert_nodes(
        node(n, gpus=rng.choice([4, 8]), cpu=rng.choice(["32", "64"]),
             labels={"pool": rng.choice(["x", "y"])})
        for n in names
    )  # fmt: skip
    for g in range(rng.randint(3, 10)):
        # Running pods are put on nodes at random: some nodes end up over-full, as a cache
        # may show for a moment; both searches read the same views.
        cache.upsert_pods(_gang(rng, f"g{g}", names, running=True))
    snapshot = cache.snapshot()
    units = running_units(snapshot, gangs_of(snapshot), lambda p: queue_name(p, QUEUES),
                          now=NOW, protection=MinRuntime(lambda: QUEUES, 0))  # fmt: skip
    for trial in range(6):
        members = _gang(rng, f"hi{trial}", names, running=False)
        candidates = list(units)
        rng.shuffle(candidates)
        for strategy in ("binpack", "spread"):
            kept = cheapest_set(snapshot, members, candidates, strategy=strategy)
            want = fresh(snapshot, members, candidates, strategy)
            if want is None:
                assert kept is None
                continue
            assert kept is not None
            assert [u.key for u in kept[0]] == [u.key for u in want[0]]
            assert kept[1] == want[1]
