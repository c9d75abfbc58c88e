"""Job-level preemption and reclaim through the planner and its loop, end to end in process."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from app.core.cycle.loop import PlannerLoop
from app.core.model.errors import GatewayError
from app.core.state.queuefile import QueueFile
from tests.core.gangsim import Cluster
from tests.factories import node, pod


def gang(
    name: str, size: int, gpu: int, priority: int = 0, queue: str = "", extra: int = 0
) -> list:
    labels = {"muster.io/pod-group": name, "muster.io/min-member": str(size)}
    if extra:
        labels["muster.io/max-member"] = str(size + extra)
    if queue:
        labels["muster.io/queue"] = queue
    return [
        pod(f"{name}-{i}", gpu=gpu, labels=labels, priority=priority) for i in range(size + extra)
    ]


async def run(cluster: Cluster, pods: list) -> None:
    """kube-scheduler's part: try every pending pod once; wait for the binds."""
    attempts = [
        cluster.attempt(p) for p in pods if not cluster.bound(p) and cluster.cache.pod(p.uid)
    ]
    await asyncio.gather(*(a.bind for a in attempts if a.bind))


def cluster_with(nodes: int = 2, gpus: int = 8, **options: object) -> tuple[Cluster, PlannerLoop]:
    c = Cluster(
        [node(f"n{i}", gpus=gpus) for i in range(nodes)],
        planner_options={"min_runtime": 0, **options},
    )
    return c, PlannerLoop(c.extender.planner, c.gateway)


def bound(c: Cluster, pods: list) -> int:
    return sum(1 for p in pods if c.bound(p))


def test_high_priority_gang_evicts_whole_low_priority_gangs_and_runs_whole() -> None:
    async def scenario() -> None:
        c, loop = cluster_with()
        low_a, low_b = gang("low-a", 2, 4, priority=1), gang("low-b", 2, 4, priority=2)
        c.cache.upsert_pods(low_a + low_b)
        await run(c, low_a + low_b)
        assert bound(c, low_a + low_b) == 4  # the cluster is full
        high = gang("high", 2, 4, priority=100)
        c.cache.upsert_pods(high)
        first = [c.attempt(p) for p in high]
        assert all("waiting for 2 evicted pods to leave (default/low-a)" in a.reason for a in first)
        loop.run_once(force=True)  # carries out the eviction
        assert sorted(c.gateway.evictions) == ["default/low-a-0", "default/low-a-1"]
        assert {e.reason for e in c.gateway.events} == {"Preempted"}
        assert "preempted by gang default/high (priority 100)" in c.gateway.events[0].message
        await run(c, high)
        assert bound(c, high) == 2 and bound(c, low_b) == 2

    asyncio.run(scenario())


def test_elastic_members_go_before_any_whole_gang() -> None:
    async def scenario() -> None:
        c, loop = cluster_with(nodes=1)
        elastic = gang("el", 2, 2, priority=1, extra=2)  # 2 core + 2 elastic = 8 GPUs
        c.cache.upsert_pods(elastic)
        await run(c, elastic)
        assert bound(c, elastic) == 4
        high = gang("high", 1, 4, priority=100)
        c.cache.upsert_pods(high)
        c.attempt(high[0])
        loop.run_once(force=True)
        assert len(c.gateway.evictions) == 2  # only the two elastic members
        assert bound(c, elastic) == 2
        await run(c, high)
        assert bound(c, high) == 1

    asyncio.run(scenario())


def test_a_pdb_refusal_leaves_that_gang_alone_and_another_is_chosen() -> None:
    async def scenario() -> None:
        c, loop = cluster_with()
        low_a, low_b = gang("low-a", 2, 4, priority=1), gang("low-b", 2, 4, priority=2)
        c.cache.upsert_pods(low_a + low_b)
        await run(c, low_a + low_b)
        c.gateway.fail[("evict", "default/low-a-1")] = GatewayError(
            "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."
        )
        high = gang("high", 2, 4, priority=100)
        c.cache.upsert_pods(high)
        c.attempt(high[0])
        loop.run_once(force=True)  # dry run refused: nothing evicted, low-a blocked
        assert c.gateway.evictions == []
        loop.run_once(force=True)  # next choice: low-b
        assert sorted(c.gateway.evictions) == ["default/low-b-0", "default/low-b-1"]
        await run(c, high)
        assert bound(c, high) == 2 and bound(c, low_a) == 2

    asyncio.run(scenario())


def test_no_eviction_when_it_cannot_make_room() -> None:
    async def scenario() -> None:
        c, loop = cluster_with()
        low = gang("low", 2, 4, priority=1)
        c.cache.upsert_pods(low)
        await run(c, low)
        huge = gang("huge", 3, 8, priority=100)  # 24 GPUs on a 16-GPU cluster
        c.cache.upsert_pods(huge)
        c.attempt(huge[0])
        loop.run_once(force=True)
        assert c.gateway.evictions == []

    asyncio.run(scenario())


def test_young_gangs_are_protected() -> None:
    async def scenario() -> None:
        c, loop = cluster_with(min_runtime=3600)
        low = gang("low", 4, 4, priority=1)
        c.cache.upsert_pods(low)
        await run(c, low)
        high = gang("high", 1, 4, priority=100)
        c.cache.upsert_pods(high)
        c.attempt(high[0])
        loop.run_once(force=True)
        assert c.gateway.evictions == []

    asyncio.run(scenario())


def test_queue_below_its_guarantee_reclaims_borrowed_work(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = tmp_path / "q.yaml"
        path.write_text(
            "queues:\n  - {name: default}\n"
            "  - {name: a, guaranteed: {nvidia.com/gpu: 8}}\n"
            "  - {name: b, guaranteed: {nvidia.com/gpu: 8}}\n"
        )
        c, loop = cluster_with(queues=QueueFile(path))
        borrowed = [gang(f"a{i}", 1, 4, queue="a", priority=50) for i in range(4)]  # a holds 16
        for g in borrowed:
            c.cache.upsert_pods(g)
            await run(c, g)
        claim = gang("b0", 2, 4, queue="b", priority=0)  # lower priority, but within b's share
        c.cache.upsert_pods(claim)
        c.attempt(claim[0])
        loop.run_once(force=True)
        assert len(c.gateway.evictions) == 2  # just enough, and a keeps its guaranteed 8
        assert "reclaimed by queue b" in c.gateway.events[0].message
        await run(c, claim)
        assert bound(c, claim) == 2

    asyncio.run(scenario())


@pytest.mark.parametrize("seed", range(6))
def test_random_no_loops_no_partial_victims_no_useless_evictions(seed: int) -> None:
    rng = random.Random(seed)

    async def scenario() -> None:
        c, loop = cluster_with(nodes=3)
        gangs: dict[str, list] = {}
        evicted_by: list[tuple[str, str]] = []
        for step in range(12):
            name = f"g{step}"
            gangs[name] = gang(
                name, rng.randint(1, 3), rng.choice([2, 4, 8]), priority=rng.randint(0, 5)
            )
            c.cache.upsert_pods(gangs[name])
            for _ in range(3):
                live = [p for ps in gangs.values() for p in ps if c.cache.pod(p.uid)]
                before = set(c.gateway.evictions)
                pending_evictions = list(c.extender.planner.book.evictions)
                await run(c, live)
                pending_evictions += c.extender.planner.book.evictions
                loop.run_once(force=True)
                for ev in pending_evictions:
                    for unit in ev.units:
                        evicted_by.append((ev.preemptor, unit.key))
                        victims = {p.uid for p in unit.pods}
                        if not unit.elastic:  # whole gang: every member of the victim gang went
                            key = unit.key.split("/", 1)[1]
                            assert {
                                p.uid for p in gangs[key] if c.cache.pod(p.uid) is None
                            } >= victims
                new = set(c.gateway.evictions) - before
                assert all(p.split("/")[1].rsplit("-", 1)[0] in gangs for p in new)
        pairs = set(evicted_by)
        assert not any((victim, preemptor) in pairs for preemptor, victim in pairs), pairs
        # no partial gang is left holding nodes
        for name, pods in gangs.items():
            held = sum(1 for p in pods if c.cache.pod(p.uid) and c.bound(p))
            assert held in (0, len(pods)), f"{name}: {held} of {len(pods)}"

    asyncio.run(scenario())
