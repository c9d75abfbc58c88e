"""Victim selection for job-level preemption and reclaim, as scenario tables."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from app.core.actions import preempt, reclaim
from app.core.actions.victims import running_units
from app.core.cycle.planner import gangs_of
from app.core.model.queues import parse_queue_config
from app.core.policies.minruntime import MinRuntime
from app.core.state.cache import ClusterCache
from app.core.state.queueusage import QueueUsage, queue_name
from tests.factories import EPOCH, node, pod

NOW = EPOCH.timestamp() + 10_000
QUEUES = parse_queue_config(
    """
queues:
  - {name: default}
  - {name: a, guaranteed: {nvidia.com/gpu: 8}}
  - {name: b, guaranteed: {nvidia.com/gpu: 8}}
"""
)


def running_gang(
    name: str,
    size: int,
    gpu: int,
    where: list[str],
    priority: int = 0,
    queue: str = "default",
    age: float = 1000,
    minimum: int | None = None,
) -> list:
    labels = {
        "muster.io/pod-group": name,
        "muster.io/min-member": str(minimum or size),
        "muster.io/queue": queue,
    }
    return [
        replace(
            pod(
                f"{name}-{i}", gpu=gpu, labels=labels, node=where[i % len(where)], priority=priority
            ),
            started=NOW - age,
        )
        for i in range(size)
    ]


def setup(*gangs: list, nodes: int = 2, gpus: int = 8):
    cache = ClusterCache()
    cache.upsert_nodes(node(f"n{i}", gpus=gpus) for i in range(nodes))
    for g in gangs:
        cache.upsert_pods(g)
    snapshot = cache.snapshot()
    units = running_units(
        snapshot,
        gangs_of(snapshot),
        lambda p: queue_name(p, QUEUES),
        now=NOW,
        protection=MinRuntime(lambda: QUEUES, 60),
    )
    return cache, snapshot, units


def chosen(result) -> list[str]:  # noqa: ANN001
    return sorted({u.key for u in result[0]}) if result else []


def preemptor(size: int, gpu: int, priority: int = 100) -> list:
    labels = {"muster.io/pod-group": "hi", "muster.io/min-member": str(size)}
    return [pod(f"hi-{i}", gpu=gpu, labels=labels, priority=priority) for i in range(size)]


def test_takes_the_lowest_priority_whole_gang_that_makes_room() -> None:
    _, snap, units = setup(
        running_gang("low", 2, 4, ["n0"], priority=1),
        running_gang("mid", 2, 4, ["n1"], priority=5),
    )
    result = preempt.victims_for(snap, preemptor(2, 4), 100, units, now=NOW)
    assert chosen(result) == ["default/low"]
    assert {p.name for u in result[0] for p in u.pods} == {"low-0", "low-1"}  # every member


def test_elastic_members_give_way_before_whole_gangs() -> None:
    elastic = running_gang("el", 4, 2, ["n0"], minimum=2)  # 2 extra members beyond min
    _, snap, units = setup(elastic, running_gang("other", 2, 4, ["n1"]))
    result = preempt.victims_for(snap, preemptor(1, 4), 100, units, now=NOW)
    assert result is not None
    assert all(u.elastic for u in result[0]) and len(result[0]) == 2


def test_young_gangs_are_protected_and_nothing_is_evicted_in_vain() -> None:
    _, snap, units = setup(running_gang("young", 2, 8, ["n0", "n1"], age=10))
    assert units == []
    assert preempt.victims_for(snap, preemptor(2, 8), 100, units, now=NOW) is None


def test_equal_or_higher_priority_is_never_a_victim() -> None:
    _, snap, units = setup(running_gang("peer", 2, 8, ["n0", "n1"], priority=100))
    assert preempt.victims_for(snap, preemptor(2, 8), 100, units, now=NOW) is None


def test_no_eviction_when_even_all_victims_would_not_make_room() -> None:
    _, snap, units = setup(running_gang("low", 1, 8, ["n0"]))
    assert preempt.victims_for(snap, preemptor(3, 8), 100, units, now=NOW) is None


def test_unnecessary_victims_are_dropped() -> None:
    # cheapest first reaches "b" only after "a"; on n0 "a" alone frees too little (x stays)
    a = running_gang("a", 1, 2, ["n0"], priority=1)
    x = running_gang("x", 1, 6, ["n0"], priority=50)
    b = running_gang("b", 1, 8, ["n1"], priority=2)
    _, snap, units = setup(a, b, x)
    result = preempt.victims_for(snap, preemptor(1, 8), 100, units, now=NOW)
    assert chosen(result) == ["default/b"]


def usage_for(cache: ClusterCache) -> QueueUsage:
    from app.core.state.queueusage import measure

    view = cache.view()
    return measure(cache.queue_usage(), view.allocatable.sum(axis=0), QUEUES)


def test_reclaim_takes_newest_borrowed_work_and_keeps_lenders_at_their_guarantee() -> None:
    old = running_gang("old", 1, 8, ["n0"], queue="a", age=5000)
    new = running_gang("new", 1, 4, ["n1"], queue="a", age=100)
    newer = running_gang("newer", 1, 4, ["n1"], queue="a", age=70)
    cache, snap, units = setup(old, new, newer)  # a holds 16 of its guaranteed 8
    usage = usage_for(cache)
    claim = [
        pod(
            "c-0",
            gpu=4,
            labels={
                "muster.io/pod-group": "c",
                "muster.io/min-member": "1",
                "muster.io/queue": "b",
            },
        )
    ]
    result = reclaim.victims_for(snap, claim, usage, "b", units)
    assert chosen(result) == ["default/newer"]
    big_claim = [replace(claim[0], requests=claim[0].requests._replace(gpu=16000))]
    assert reclaim.victims_for(snap, big_claim, usage, "b", units) is None  # a keeps its 8


@pytest.mark.parametrize("seed", range(6))
def test_random_preemption_is_whole_lower_priority_and_sufficient(seed: int) -> None:
    rng = random.Random(seed)
    gangs = []
    for g in range(rng.randint(2, 6)):
        size = rng.randint(1, 3)
        where = [f"n{rng.randint(0, 3)}"]
        minimum = max(size - rng.randint(0, 1), 1)
        gpu = rng.choice([1, 2, 4])
        gangs.append(running_gang(f"g{g}", size, gpu, where, rng.randint(0, 9), minimum=minimum))
    cache, snap, units = setup(*gangs, nodes=4, gpus=8)
    members = preemptor(rng.randint(1, 3), rng.choice([2, 4, 8]), priority=rng.randint(0, 10))
    result = preempt.victims_for(snap, members, members[0].priority, units, now=NOW)
    if result is None:
        return
    victims, allocation = result
    assert allocation.complete
    for unit in victims:
        assert unit.priority < members[0].priority
        if not unit.elastic:  # whole gang: every bound member
            gang = next(
                g for g in gangs if f"default/{g[0].labels['muster.io/pod-group']}" == unit.key
            )
            assert {p.uid for p in unit.pods} == {p.uid for p in gang}


def test_running_units_with_a_lone_memo_match_a_fresh_search() -> None:
    """The memo of pods on their own gives the same units and protection as a fresh pass,
    also after a pod changed (a new object: found anew) or started later."""
    labels = {"muster.io/queue": "a"}
    lone_pods = [
        replace(pod(f"solo-{i}", gpu=1, labels=labels, node=f"n{i % 2}"), started=NOW - 30 * i)
        for i in range(4)
    ]
    cache = ClusterCache()
    cache.upsert_nodes(node(f"n{i}", gpus=8) for i in range(2))
    cache.upsert_pods([*running_gang("g", 2, 1, ["n0"]), *lone_pods])
    protection = MinRuntime(lambda: QUEUES, 60)
    memo: dict = {}

    def units(snapshot, lone):  # noqa: ANN001, ANN202
        young: list[float] = []
        found = running_units(snapshot, gangs_of(snapshot), lambda p: queue_name(p, QUEUES),
                              now=NOW, protection=protection, protected_until=young,
                              lone=lone)  # fmt: skip
        return sorted((u.key, u.queue, u.started) for u in found), sorted(young)

    first = cache.snapshot()
    assert units(first, memo) == units(first, None)
    assert len(memo) == 4
    cache.upsert_pods([replace(lone_pods[0], started=NOW - 5, labels={"muster.io/queue": "b"})])
    second = cache.snapshot()
    assert units(second, memo) == units(second, None)
    assert ("pod:default/solo-0", "b", NOW - 5) in units(second, memo)[0]  # found anew
