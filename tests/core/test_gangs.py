"""Gang scheduling through the extender verbs: plans, barrier, rollback, no deadlock."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict

import pytest

from app.core.model.errors import GatewayError
from app.core.model.values import Pod
from tests.core.gangsim import Cluster
from tests.factories import node, pod


def member(gang: str, i: int, gpu: int = 1, minimum: int = 4, **kw: object) -> Pod:
    labels = {"muster.io/pod-group": gang, "muster.io/min-member": str(minimum)}
    labels.update(kw.pop("labels", {}))  # type: ignore[arg-type]
    return pod(f"{gang}-{i}", gpu=gpu, labels=labels, **kw)


def run(coro):  # noqa: ANN001, ANN201
    return asyncio.run(coro)


def test_seed_case_two_interleaved_gangs_one_node() -> None:
    """One node with 4 GPUs; two jobs of 4 x 1-GPU pods submitted interleaved."""

    async def scenario() -> None:
        cluster = Cluster([node("n", gpus=4)])
        a = [member("a", i, created=0) for i in range(4)]
        b = [member("b", i, created=1) for i in range(4)]
        interleaved = [p for pair in zip(a, b, strict=True) for p in pair]
        cluster.cache.upsert_pods(interleaved)  # the watch has seen every pod
        attempts = [cluster.attempt(p) for p in interleaved]
        outcomes = await asyncio.gather(*(t.bind for t in attempts if t.bind))
        assert [o.error for o in outcomes] == [""] * 4
        assert [cluster.bound(p) for p in a] == ["n"] * 4
        assert [cluster.bound(p) for p in b] == [""] * 4
        reasons = {t.reason for t in attempts if t.pod in b}
        assert reasons == {
            "priority: the room it needs is planned for gangs ahead of it in line: default/a "
            "(gang default/b)"
        }
        # a finishes: b runs whole
        for p in a:
            cluster.cache.delete_pod(p.uid)
        retry = [cluster.attempt(p) for p in b]
        outcomes = await asyncio.gather(*(t.bind for t in retry if t.bind))
        assert [o.error for o in outcomes] == [""] * 4
        assert [cluster.bound(p) for p in b] == ["n"] * 4

    run(scenario())


def test_filter_offers_only_the_planned_node_and_reasons_elsewhere() -> None:
    async def scenario() -> None:
        cluster = Cluster([node("x", gpus=8), node("y", gpus=8)])
        gang = [member("g", i, gpu=4, minimum=2) for i in range(2)]
        cluster.cache.upsert_pods(gang)
        result = cluster.extender.filter(gang[0], cluster.names)
        plan = cluster.extender.planner.plan("default/g")
        assert plan is not None and result.feasible == [plan.members[gang[0].uid]]
        other = next(n for n in cluster.names if n not in result.feasible)
        assert result.unresolvable[other].startswith("gang default/g: this member is planned on")
        # reserved room is taken for everyone else
        intruder = pod("intruder", gpu=8)
        planned_node = plan.members[gang[0].uid]
        assert planned_node in cluster.extender.filter(intruder, [planned_node]).failed
        scores = dict(cluster.extender.prioritize(gang[0], cluster.names).pairs())
        assert scores[planned_node] == 10 and scores[other] <= 9

    run(scenario())


def test_members_wait_until_min_member_exist() -> None:
    cluster = Cluster([node("n", gpus=8)])
    first = member("g", 0, minimum=3)
    cluster.cache.upsert_pod(first)
    result = cluster.extender.filter(first, cluster.names)
    assert result.unresolvable == {
        "n": "gang-incomplete: 1 of 3 members exist; it starts once 2 more are created "
        "(gang default/g)"
    }


def test_disagreeing_members_are_reported_not_guessed() -> None:
    cluster = Cluster([node("n", gpus=8)])
    pods = [member("g", 0, minimum=2), member("g", 1, minimum=3)]
    cluster.cache.upsert_pods(pods)
    result = cluster.extender.filter(pods[0], cluster.names)
    assert result.unresolvable["n"] == (
        "constraints: members disagree on min-member (2, 3) (gang default/g)"
    )


def test_barrier_binds_all_together() -> None:
    async def scenario() -> None:
        cluster = Cluster([node("n", gpus=8)])
        gang = [member("g", i) for i in range(4)]
        cluster.cache.upsert_pods(gang)
        first = [cluster.attempt(p) for p in gang[:3]]
        await asyncio.sleep(0.05)
        assert cluster.gateway.bindings == []  # three wait at the barrier
        assert cluster.extender.binder.waiting == {"default/g": 3}
        last = cluster.attempt(gang[3])
        outcomes = await asyncio.gather(*(t.bind for t in [*first, last]))
        assert all(o.error == "" for o in outcomes)
        assert len(cluster.gateway.bindings) == 4

    run(scenario())


def test_barrier_timeout_answers_the_waiters_but_keeps_them_parked() -> None:
    async def scenario() -> None:
        cluster = Cluster([node("n", gpus=8)], barrier_timeout=0.2)
        gang = [member("g", i) for i in range(4)]
        cluster.cache.upsert_pods(gang)
        waiting = [cluster.attempt(p) for p in gang[:3]]
        outcomes = await asyncio.gather(*(t.bind for t in waiting))
        assert {o.reason for o in outcomes} == {"BarrierTimeout"}
        assert "3 of 4 members reached bind within 0.2s; they keep their planned nodes" in (
            outcomes[0].error
        )
        assert cluster.gateway.bindings == []  # nothing bound: never a partial gang
        plan = cluster.extender.planner.plan("default/g")
        assert plan is not None and cluster.cache.view().used_of("n").gpu == 4000  # still held
        # The last member arrives much later: the parked three are bound with it.
        last = cluster.attempt(gang[3])
        assert (await last.bind).error == ""
        assert sorted(b[0] for b in cluster.gateway.bindings) == [p.key for p in gang]

    run(scenario())


def test_a_waiter_is_answered_even_if_the_timer_fires_before_the_clock_says_so() -> None:
    """The barrier's clock need not agree with the event loop's timer (here it stands still):
    a call whose wait ran out is answered all the same, never left hanging."""

    async def scenario() -> None:
        cluster = Cluster([node("n", gpus=8)], barrier_timeout=0.05, clock=lambda: 1000.0)
        gang = [member("g", i, minimum=2) for i in range(2)]
        cluster.cache.upsert_pods(gang)
        alone = cluster.attempt(gang[0])
        outcome = await asyncio.wait_for(alone.bind, 5)
        assert outcome.reason == "BarrierTimeout"
        assert cluster.gateway.bindings == []

    run(scenario())


def test_a_waiter_whose_plan_is_released_is_answered() -> None:
    async def scenario() -> None:
        cluster = Cluster([node("n", gpus=8)], barrier_timeout=0.05)
        gang = [member("g", i, minimum=2) for i in range(2)]
        cluster.cache.upsert_pods(gang)
        alone = cluster.attempt(gang[0])
        await asyncio.sleep(0)  # the call reaches the barrier
        cluster.extender.planner.release("default/g", "test: plan dropped")
        outcome = await asyncio.wait_for(alone.bind, 5)
        assert outcome.reason == "PlanReleased", outcome
        assert "plan was released" in outcome.error
        assert cluster.gateway.bindings == []

    run(scenario())


def test_two_halves_arriving_apart_still_bind_together() -> None:
    async def scenario() -> None:
        cluster = Cluster([node("n", gpus=8)], barrier_timeout=0.1)
        gang = [member("g", i) for i in range(4)]
        cluster.cache.upsert_pods(gang)
        first = await asyncio.gather(*(cluster.attempt(p).bind for p in gang[:2]))
        assert {o.reason for o in first} == {"BarrierTimeout"}
        second = await asyncio.gather(*(cluster.attempt(p).bind for p in gang[2:]))
        assert [o.error for o in second] == ["", ""]
        assert all(cluster.bound(p) == "n" for p in gang)

    run(scenario())


def test_failed_bind_rolls_the_gang_back() -> None:
    async def scenario() -> None:
        cluster = Cluster([node("n", gpus=8)])
        gang = [member("g", i) for i in range(4)]
        cluster.cache.upsert_pods(gang)
        cluster.gateway.fail[("bind", "default/g-2")] = GatewayError("Conflict", "pod changed")
        attempts = [cluster.attempt(p) for p in gang]
        outcomes = await asyncio.gather(*(t.bind for t in attempts))
        assert {o.reason for o in outcomes} == {"RolledBack"}
        assert (
            "default/g-2 failed to bind (binding default/g-2 to n failed: Conflict"
            in outcomes[0].error
        )
        assert sorted(cluster.gateway.deletions) == ["default/g-0", "default/g-1", "default/g-3"]
        assert {e.reason for e in cluster.gateway.events} == {"GangRolledBack"}
        assert cluster.cache.view().used_of("n").gpu == 0

    run(scenario())


def test_a_bind_the_api_would_refuse_leaves_every_member_unbound() -> None:
    """Against a real API server (a blocking gateway) every member's bind is tried as a dry
    run first: one refusal rolls the gang back with nobody bound and nobody deleted."""

    async def scenario() -> None:
        cluster = Cluster([node("n", gpus=8)])
        cluster.gateway.blocking = True  # type: ignore[misc]
        asked: list[str] = []

        def check_bind(namespace: str, name: str, uid: str, node: str) -> None:
            asked.append(name)
            if name == "g-2":
                raise GatewayError("Forbidden", 'admission webhook "w" denied the request')

        cluster.gateway.check_bind = check_bind  # type: ignore[method-assign]
        gang = [member("g", i) for i in range(4)]
        cluster.cache.upsert_pods(gang)
        attempts = [cluster.attempt(p) for p in gang]
        outcomes = await asyncio.gather(*(t.bind for t in attempts))
        assert {o.reason for o in outcomes} == {"RolledBack"}
        assert "default/g-2 failed to bind (binding default/g-2 to n would fail: Forbidden" in (
            outcomes[0].error
        )
        assert sorted(asked) == ["g-0", "g-1", "g-2", "g-3"]
        assert cluster.gateway.bindings == [] and cluster.gateway.deletions == []
        assert cluster.cache.view().used_of("n").gpu == 0

    run(scenario())


def test_elastic_members_fill_free_room_after_the_core() -> None:
    async def scenario() -> None:
        cluster = Cluster([node("n", gpus=6)])
        labels = {"muster.io/max-member": "8"}
        gang = [member("e", i, minimum=4, labels=labels) for i in range(8)]
        cluster.cache.upsert_pods(gang)
        attempts = [cluster.attempt(p) for p in gang]
        await asyncio.gather(*(t.bind for t in attempts if t.bind))
        bound = [p for p in gang if cluster.bound(p)]
        assert len(bound) == 6  # 4 core + 2 elastic, the rest waits for room
        plan_rows = {r["gang"]: r for r in cluster.extender.planner.describe()}
        assert plan_rows["default/e"]["bound"] == 6

    run(scenario())


def test_higher_priority_gang_is_planned_first() -> None:
    cluster = Cluster([node("n", gpus=4)])
    low = [member("low", i, created=1) for i in range(4)]
    high = [member("high", i, created=5, priority=100) for i in range(4)]
    cluster.cache.upsert_pods(low + high)
    cluster.extender.planner.cycle(force=True)
    assert cluster.extender.planner.plan("default/high") is not None
    assert cluster.extender.planner.plan("default/low") is None


def test_planned_node_removed_by_kube_scheduler_is_replanned() -> None:
    cluster = Cluster([node("x", gpus=8), node("y", gpus=8)])
    gang = [member("g", i, minimum=2) for i in range(2)]
    cluster.cache.upsert_pods(gang)
    planned = cluster.extender.filter(gang[0], cluster.names).feasible[0]
    other = "y" if planned == "x" else "x"
    result = cluster.extender.filter(gang[0], [other])
    assert result.feasible == [other]
    assert cluster.extender.planner.plan("default/g").members[gang[0].uid] == other


@pytest.mark.parametrize("seed", range(8))
def test_random_gangs_never_partial_never_overcommitted_all_eventually_run(seed: int) -> None:
    """Many gangs of mixed sizes compete; some finish each round and free their nodes."""
    rng = random.Random(seed)

    async def scenario() -> None:
        nodes = [node(f"n{i}", gpus=rng.choice([4, 8])) for i in range(rng.randint(2, 5))]
        cluster = Cluster(nodes)
        biggest = max(n.allocatable.gpu for n in nodes) // 1000
        gangs: dict[str, list[Pod]] = {}
        for g in range(rng.randint(4, 10)):
            size, gpu = rng.randint(1, 6), rng.choice([1, 1, 2, 4])
            gpu = min(gpu, biggest)
            gangs[f"j{g}"] = [
                member(f"j{g}", i, gpu=gpu, minimum=size, created=g) for i in range(size)
            ]
        fits_alone = {
            g
            for g, pods in gangs.items()
            if sum(p.requests.gpu for p in pods) <= sum(n.allocatable.gpu for n in nodes)
        }
        ever_ran: set[str] = set()
        for _ in range(40):
            pending = [p for ps in gangs.values() for p in ps if not cluster.bound(p)]
            if not any(gangs.values()):
                break
            cluster.cache.upsert_pods(pending)
            rng.shuffle(pending)
            attempts = [cluster.attempt(p) for p in pending]
            await asyncio.gather(*(t.bind for t in attempts if t.bind))
            check_invariants(cluster, gangs)
            running = [g for g, ps in gangs.items() if ps and all(cluster.bound(p) for p in ps)]
            ever_ran.update(running)
            for g in running:
                if rng.random() < 0.6:
                    for p in gangs[g]:
                        cluster.cache.delete_pod(p.uid)
                    gangs[g] = []
        assert fits_alone <= ever_ran, f"never ran: {sorted(fits_alone - ever_ran)}"

    run(scenario())


def check_invariants(cluster: Cluster, gangs: dict[str, list[Pod]]) -> None:
    for g, pods in gangs.items():
        bound = sum(1 for p in pods if cluster.bound(p))
        assert bound in (0, len(pods)), f"partial gang {g}: {bound} of {len(pods)} bound"
    used: dict[str, int] = defaultdict(int)
    snapshot = cluster.cache.snapshot()
    for p in snapshot.pods.values():
        if p.node_name:
            used[p.node_name] += p.requests.gpu
    for n in cluster.nodes:
        assert used[n.name] <= n.allocatable.gpu, f"{n.name} over-committed"
