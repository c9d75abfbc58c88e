"""The decision journal: its ring and counters, and the decisions the planner, the gang binder
and the planner loop write into it."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.core.cycle.loop import PlannerLoop
from app.core.model.errors import GatewayError
from app.core.model.values import Pod
from app.core.state.journal import KINDS, Journal, Victim
from app.core.state.timings import Timings
from tests.core.gangsim import Cluster
from tests.factories import node, pod


def member(gang: str, i: int, gpu: int = 1, minimum: int = 2, priority: int = 0) -> Pod:
    labels = {"muster.io/pod-group": gang, "muster.io/min-member": str(minimum)}
    return pod(f"{gang}-{i}", gpu=gpu, labels=labels, priority=priority)


def kinds(cluster: Cluster) -> list[str]:
    return [e.kind for e in cluster.graph.journal.read(0, 1000).entries]


# -- the ring ---------------------------------------------------------------------------------

#: (capacity, entries written, since, limit) -> (seqs returned, missed)
READS = [
    (10, 5, None, 100, [1, 2, 3, 4, 5], 0),
    (10, 5, None, 2, [4, 5], 0),
    (10, 5, 0, 100, [1, 2, 3, 4, 5], 0),
    (10, 5, 3, 100, [4, 5], 0),
    (10, 5, 5, 100, [], 0),
    (10, 5, 9, 100, [], 0),  # beyond latest: nothing, nothing missed
    (10, 5, 0, 2, [1, 2], 0),
    (3, 5, 0, 100, [3, 4, 5], 2),  # the ring dropped 1 and 2
    (3, 5, 1, 100, [3, 4, 5], 1),
    (3, 5, 2, 100, [3, 4, 5], 0),
    (3, 5, None, 100, [3, 4, 5], 0),
    (3, 0, 0, 100, [], 0),
]


@pytest.mark.parametrize(("capacity", "written", "since", "limit", "seqs", "missed"), READS)
def test_read_after_a_sequence_number(
    capacity: int, written: int, since: int | None, limit: int, seqs: list[int], missed: int
) -> None:
    journal = Journal(capacity, wall=lambda: 1000.0)
    for i in range(written):
        journal.record("plan", f"ns/g{i}")
    page = journal.read(since, limit)
    assert [e.seq for e in page.entries] == seqs
    assert page.missed == missed and page.latest == written


def test_counters_are_cumulative_beyond_the_ring() -> None:
    journal = Journal(2, wall=lambda: 5.0)
    victims = [Victim("ns/a", "q", 2, 8.0, 800.0), Victim("pod:ns/b", "q", 1, 1.0, 10.0)]
    journal.record("preemption", "ns/high", queue="q", victims=victims)
    journal.record("reclaim", "ns/mine", victims=victims[:1])
    for _ in range(3):
        journal.record("rollback", "ns/g", message="bind failed")
    totals = journal.totals()
    assert totals.by_kind == dict.fromkeys(KINDS, 0) | {
        "preemption": 1,
        "reclaim": 1,
        "rollback": 3,
    }
    assert totals.victims == {"preemption": 2, "reclaim": 1}
    assert totals.gpu_seconds_lost == {"preemption": 810.0, "reclaim": 800.0}
    assert [e.kind for e in journal.read().entries] == ["rollback", "rollback"]
    assert journal.read().entries[0].time == 5.0


def test_unknown_kinds_and_empty_rings_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown journal kind 'planned'"):
        Journal().record("planned", "ns/g")
    with pytest.raises(ValueError):
        Journal(0)


def test_timings_count_into_cumulative_buckets() -> None:
    timings = Timings((0.01, 0.1, 1.0))
    for seconds in (0.005, 0.01, 0.05, 2.0):
        timings.observe(seconds)
    counts = timings.counts()
    assert counts.buckets == ((0.01, 2), (0.1, 3), (1.0, 3), (float("inf"), 4))
    assert counts.count == 4 and counts.total == pytest.approx(2.065)
    with pytest.raises(ValueError):
        Timings((1.0, 0.1))


# -- what writes it ---------------------------------------------------------------------------


def test_a_gang_planned_and_started_together() -> None:
    async def scenario() -> Cluster:
        cluster = Cluster([node("n", gpus=8)])
        gang = [member("g", i) for i in range(2)]
        cluster.cache.upsert_pods(gang)
        outcomes = await asyncio.gather(*(cluster.attempt(p).bind for p in gang))  # type: ignore[misc]
        assert [o.error for o in outcomes] == ["", ""]
        return cluster

    cluster = asyncio.run(scenario())
    plan, started = cluster.graph.journal.read().entries
    assert (plan.kind, plan.gang, plan.queue, plan.nodes) == (
        "plan",
        "default/g",
        "default",
        ("n",),
    )
    assert plan.message == "2 members on n"
    assert (started.kind, started.gang, started.queue, started.nodes) == (
        "gang-started",
        "default/g",
        "default",
        ("n",),
    )
    assert started.seq == plan.seq + 1 and started.time >= plan.time
    assert cluster.graph.timings.counts().count == cluster.extender.planner.cycles >= 1


def test_a_barrier_timeout() -> None:
    async def scenario() -> Cluster:
        cluster = Cluster([node("n", gpus=8)], barrier_timeout=0.05)
        gang = [member("g", i, minimum=3) for i in range(3)]
        cluster.cache.upsert_pods(gang)
        task = cluster.attempt(gang[0]).bind
        assert task is not None
        assert (await task).reason == "BarrierTimeout"
        return cluster

    cluster = asyncio.run(scenario())
    assert kinds(cluster) == ["plan", "barrier-timeout"]
    entry = cluster.graph.journal.read().entries[-1]
    assert entry.gang == "default/g" and entry.queue == "default"
    assert "1 of 3 members reached bind within 0.05s" in entry.message


def test_a_failed_bind_is_rolled_back() -> None:
    async def scenario() -> Cluster:
        cluster = Cluster([node("n", gpus=8)])
        gang = [member("g", i, minimum=3) for i in range(3)]
        cluster.cache.upsert_pods(gang)
        cluster.gateway.fail[("bind", "default/g-1")] = GatewayError("Conflict", "pod changed")
        await asyncio.gather(*(cluster.attempt(p).bind for p in gang))  # type: ignore[misc]
        return cluster

    cluster = asyncio.run(scenario())
    assert kinds(cluster) == ["plan", "rollback"]
    rollback = cluster.graph.journal.read().entries[-1]
    assert rollback.message.startswith("gang default/g rolled back: default/g-1 failed to bind")
    assert rollback.nodes == ("n",)  # where members had been bound before being deleted


def test_an_expired_plan_and_its_new_plan() -> None:
    now = [100.0]
    cluster = Cluster([node("n", gpus=8)], planner_options={"plan_ttl": 10}, clock=lambda: now[0])
    cluster.cache.upsert_pods([member("g", i) for i in range(2)])
    planner = cluster.extender.planner
    assert planner.cycle() == ["default/g"]
    now[0] += 11
    assert planner.cycle() == ["default/g"]  # released, then planned again in the same cycle
    assert kinds(cluster) == ["plan", "plan-expired", "plan"]
    expired = cluster.graph.journal.read().entries[1]
    assert expired.message == "plan expired: the gang did not start within 10s"


def test_a_deleted_member_releases_the_plan() -> None:
    cluster = Cluster([node("n", gpus=8)])
    gang = [member("g", i) for i in range(2)]
    cluster.cache.upsert_pods(gang)
    planner = cluster.extender.planner
    planner.cycle()
    cluster.cache.delete_pod(gang[1].uid)
    planner.cycle()
    assert kinds(cluster) == ["plan", "plan-released"]
    assert cluster.graph.journal.read().entries[-1].message == "a planned member was deleted"


def test_a_preemption_counts_its_victims_and_the_gpu_seconds_they_lose() -> None:
    ahead = 100.0  # the wall clock runs 100 s ahead of the binds: each victim ran ~100 s

    async def scenario() -> Cluster:
        cluster = Cluster(
            [node("n0", gpus=8), node("n1", gpus=8)],
            planner_options={"min_runtime": 0},
            wall=lambda: time.time() + ahead,
        )
        low = [member("low", i, gpu=4, priority=1) for i in range(2)]
        other = [member("other", i, gpu=4, priority=5) for i in range(2)]
        cluster.cache.upsert_pods(low + other)
        for gang in (low, other):
            await asyncio.gather(*(cluster.attempt(p).bind for p in gang))  # type: ignore[misc]
        high = [member("high", i, gpu=4, priority=100) for i in range(2)]
        cluster.cache.upsert_pods(high)
        cluster.attempt(high[0])
        PlannerLoop(
            cluster.extender.planner,
            cluster.gateway,
            journal=cluster.graph.journal,
            wall=cluster.wall,
        ).run_once(force=True)
        return cluster

    cluster = asyncio.run(scenario())
    seen = kinds(cluster)
    assert sorted(seen[:4]) == ["gang-started", "gang-started", "plan", "plan"]
    assert seen[4:] == ["plan", "preemption"]
    entry = cluster.graph.journal.read().entries[-1]
    assert (entry.gang, entry.queue) == ("default/high", "default")
    assert entry.message == "preempted by gang default/high (priority 100)"
    (victim,) = entry.victims
    assert (victim.key, victim.queue, victim.pods, victim.gpus) == ("default/low", "default", 2, 8)
    assert 8 * ahead <= victim.gpu_seconds < 8 * (ahead + 60)
    totals = cluster.graph.journal.totals()
    assert totals.victims == {"preemption": 1, "reclaim": 0}
    assert totals.gpu_seconds_lost["preemption"] == victim.gpu_seconds
