"""Crash-safe decisions: plans and the hold are written where the next leader finds them, and
a new leader carries on from them (``app.core.cycle.records``, ``Planner.restore``).

A "crash" here drops every in-memory object and builds a new graph over a new cache that
holds only what the API server would: the pods, with the annotations written so far.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from app.core.cycle.plans import Plan
from app.core.cycle.records import (
    decode_hold,
    decode_plan,
    encode_hold,
    encode_plan,
    plans_from,
)
from app.core.model.labels import GPU_IDS, HOLD_RECORD, PLAN_RECORD
from app.core.model.values import Pod, Resources
from app.core.state.gateway import InMemoryGateway
from app.settings import Settings
from app.wiring import Graph, build_cache, build_graph
from tests.factories import node, pod

SETTINGS = Settings(strategy="binpack", min_runtime_seconds=0.0)


def members(name: str, size: int, gpu: int = 1, priority: int = 0, **kwargs: str) -> list[Pod]:
    labels = {"muster.io/pod-group": name, "muster.io/min-member": str(size)}
    return [
        pod(f"{name}-{i}", gpu=gpu, labels=labels, priority=priority, **kwargs) for i in range(size)
    ]


def leader(nodes: list, pods: list[Pod]) -> tuple[Graph, InMemoryGateway]:
    """A fresh replica that leads, its cache filled as the watch would fill it."""
    cache = build_cache(SETTINGS)
    cache.upsert_nodes(nodes)
    cache.upsert_pods(pods)
    cache.mark_synced()
    gateway = InMemoryGateway(cache)
    return build_graph(SETTINGS, cache, gateway, lease_held=lambda: True), gateway


def planned(nodes: list, pods: list[Pod], gang: str) -> tuple[Graph, Plan]:
    """A leader that planned and recorded ``gang`` (one loop run), and its plan."""
    graph, _ = leader(nodes, pods)
    graph.leadership.take_over({})
    graph.loop.run_once(force=True)
    plan = graph.planner.plan(gang)
    assert plan is not None
    return graph, plan


def crash(graph: Graph) -> list[Pod]:
    """What survives a SIGKILL: the pods as the API server holds them."""
    return list(graph.cache.snapshot().pods.values())


def test_a_plan_record_reads_back_as_written() -> None:
    graph, _ = leader([node("n0", gpus=8)], members("g", 2, gpu=2))
    graph.leadership.take_over({})
    graph.loop.run_once(force=True)
    plan = graph.planner.plan("default/g")
    assert plan is not None and plan.id
    text = encode_plan(plan, 1234.5)
    record = decode_plan(text)
    assert record is not None
    assert (record.id, record.gang, record.min_member, record.expires) == (
        plan.id,
        "default/g",
        2,
        1234.5,
    )
    assert dict(record.members) == plan.members and record.core == plan.core
    assert dict(record.devices) == plan.devices and all(len(d) == 2 for d in plan.devices.values())
    assert decode_plan("{not json") is None and decode_plan('{"v": 99}') is None
    hold = decode_hold(encode_hold("default/big", {"n0": Resources(gpu=4000)}, 99.0))
    assert hold is not None and hold.owner == "default/big" and hold.holds["n0"].gpu == 4000
    assert decode_hold(encode_hold("", {}, 0.0)) is None


#: Which members of a 4-member gang kube-scheduler tried before Muster planned it (by index:
#: ``"failed"`` = its PodScheduled is False, ``"asked"`` = it came to filter), and which
#: members the loop writes the plan on (the write also nudges them out of kube-scheduler's
#: unschedulable queue; a member never tried waits in its active queue and needs no write).
RECORD_ROWS = [
    ("no member tried yet: one record, on the first member", {}, [0]),
    ("two failed: written on those two", {1: "failed", 3: "failed"}, [1, 3]),
    ("one came to filter, one failed", {2: "asked", 0: "failed"}, [0, 2]),
    ("every member failed: written on all", {i: "failed" for i in range(4)}, [0, 1, 2, 3]),
]


@pytest.mark.parametrize(
    ("tried", "written"), [r[1:] for r in RECORD_ROWS], ids=[r[0] for r in RECORD_ROWS]
)
def test_the_loop_writes_each_plan_where_it_must_once(
    tried: dict[int, str], written: list[int]
) -> None:
    gang = [
        dataclasses.replace(p, unschedulable=tried.get(i) == "failed")
        for i, p in enumerate(members("g", 4))
    ]
    graph, _ = leader([node("n0", gpus=8)], gang)
    graph.leadership.take_over({})
    for i, how in tried.items():
        if how == "asked":
            graph.planner.verdict(gang[i])
    graph.loop.run_once(force=True)
    pods = {p.uid: p for p in crash(graph)}
    carriers = [i for i, p in enumerate(gang) if PLAN_RECORD in pods[p.uid].annotations]
    assert carriers == written
    assert len({pods[gang[i].uid].annotations[PLAN_RECORD] for i in written}) == 1
    assert graph.loop.records == len(written)
    graph.loop.run_once(force=True)
    assert graph.loop.records == len(written)  # written once; the write also nudged them
    assert graph.loop.nudges == 0
    assert set(plans_from(pods.values())) == {"default/g"}


def test_a_follower_decides_nothing_and_a_new_leader_carries_the_plan_on() -> None:
    nodes = [node("n0", gpus=8), node("n1", gpus=8)]
    old, first = planned(nodes, members("g", 4, gpu=2), "default/g")
    new, _ = leader(nodes, crash(old))
    follower, _ = leader(nodes, crash(old))
    # Before taking over, a replica holding the Lease is "taking-over"; one without, a
    # follower: neither decides.
    assert new.leadership.role == "taking-over" and not new.leadership.leading
    notes = new.leadership.take_over({})
    assert notes == [f"default/g: plan {first.id} carried on (4 members)"]
    plan = new.planner.plan("default/g")
    assert plan is not None and plan.id == first.id
    assert plan.members == first.members and plan.devices == first.devices
    assert set(new.cache.snapshot().reserved) == set(plan.members)
    new.loop.run_once(force=True)
    assert new.loop.records == 0  # the records on the pods are already this plan's
    # A replica that never won the Lease plans nothing.
    idle = build_graph(SETTINGS, follower.cache, follower.gateway, lease_held=lambda: False)
    assert idle.leadership.role == "follower" and not idle.leadership.leading


def test_a_gang_killed_half_way_through_its_binds_is_completed_on_its_recorded_devices() -> None:
    nodes = [node("n0", gpus=8), node("n1", gpus=8)]
    gang = members("g", 4, gpu=3)
    old, _ = leader(nodes, gang)
    old.leadership.take_over({})
    old.planner.cycle(force=True)  # planned, not even recorded by the loop yet
    planned = old.planner.plan("default/g")
    assert planned is not None
    for p in gang[:2]:  # two Bindings went through, then SIGKILL
        assert not old.binder.bind(p.namespace, p.name, p.uid, planned.members[p.uid]).error
    pods = crash(old)
    assert all(PLAN_RECORD in p.annotations for p in pods if p.node_name)
    new, gateway = leader(nodes, pods)
    new.leadership.take_over({})
    plan = new.planner.plan("default/g")
    assert plan is not None and plan.released and plan.id == planned.id
    # Another gang arrives: it must not get the devices the half-bound gang still needs.
    rival = members("r", 2, gpu=3)
    new.cache.upsert_pods(rival)
    new.loop.run_once(force=True)
    rival_plan = new.planner.plan("default/r")
    if rival_plan is not None:
        for uid, node_name in rival_plan.members.items():
            mine = {planned.devices[u] for u, n in planned.members.items() if n == node_name}
            assert not set(rival_plan.devices[uid]) & {d for ds in mine for d in ds}

    async def bind_rest() -> list[str]:
        outcomes = await asyncio.gather(
            *(
                new.gang_binder.bind(p.namespace, p.name, p.uid, planned.members[p.uid])
                for p in gang[2:]
            )
        )
        return [o.error for o in outcomes]

    assert asyncio.run(bind_rest()) == ["", ""]
    done = new.cache.snapshot().pods
    for p in gang:
        assert done[p.uid].node_name == planned.members[p.uid]
        assert done[p.uid].annotations[GPU_IDS] == ",".join(map(str, planned.devices[p.uid]))
    assert sorted(b for b, _ in gateway.bindings) == ["default/g-2", "default/g-3"]


def test_victims_left_running_by_a_killed_leader_are_evicted_by_the_next() -> None:
    nodes = [node("n0", gpus=8)]
    low = members("low", 2, gpu=4, priority=1, node="n0", phase="Running")
    old, _ = leader(nodes, low)
    old.leadership.take_over({})
    high = members("high", 2, gpu=4, priority=100)
    old.cache.upsert_pods(high)
    old.planner.cycle(force=True)
    old.loop.record()  # the plan is written; SIGKILL before any eviction
    assert old.planner.plan("default/high") is not None
    new, gateway = leader(nodes, crash(old))
    notes = new.leadership.take_over({})
    assert notes == [
        f"default/high: plan {old.planner.plan('default/high').id} carried on "  # type: ignore[union-attr]
        "(2 members, 1 victim units to evict)"
    ]
    new.loop.run_once(force=True)
    assert sorted(gateway.evictions) == ["default/low-0", "default/low-1"]
    plan = new.planner.plan("default/high")
    assert plan is not None and set(new.cache.snapshot().reserved) == set(plan.members)


def test_a_plan_whose_room_was_taken_is_dropped_and_the_gang_planned_anew() -> None:
    nodes = [node("n0", gpus=8), node("n1", gpus=8)]
    old, first = planned(nodes, members("g", 2, gpu=8), "default/g")
    pods = crash(old)
    # Meanwhile another scheduler put a pod on one of the planned nodes.
    taken = next(iter(first.members.values()))
    intruder = pod("intruder", gpu=8, node=taken, phase="Running")
    new, _ = leader(nodes, [*pods, intruder])
    notes = new.leadership.take_over({})
    assert len(notes) == 1 and "recorded room is gone" in notes[0]
    assert new.planner.plan("default/g") is None


def test_the_hold_on_the_lease_is_put_back_before_any_decision() -> None:
    nodes = [node("n0", gpus=8), node("n1", gpus=8)]
    running = [pod(f"run-{i}", gpu=8, node=f"n{i}", phase="Running") for i in range(2)]
    big = members("big", 2, gpu=8)
    old, _ = leader(nodes, [*running, *big])
    old.leadership.take_over({})
    old.loop.run_once(force=True)
    owner, holds, until = old.cache.holds
    assert owner == "default/big" and holds
    lease = {HOLD_RECORD: old.planner.hold_record()}
    new, _ = leader(nodes, crash(old))
    notes = new.leadership.take_over(lease)
    assert notes[-1].startswith("default/big: head-of-line hold on ")
    assert new.cache.holds[0] == owner and new.cache.holds[1] == holds


def test_a_single_replica_restarted_carries_on_by_itself_once_synced() -> None:
    nodes = [node("n0", gpus=8), node("n1", gpus=8)]
    old, first = planned(nodes, members("g", 4, gpu=2), "default/g")
    cache = build_cache(SETTINGS)
    cache.upsert_nodes(nodes)
    cache.upsert_pods(crash(old))
    restarted = build_graph(SETTINGS, cache, InMemoryGateway(cache))  # no election
    assert not restarted.leadership.leading  # the watch has not listed everything yet
    cache.mark_synced()
    assert restarted.leadership.leading and restarted.leadership.role == "leader"
    assert restarted.leadership.carried == [f"default/g: plan {first.id} carried on (4 members)"]
    plan = restarted.planner.plan("default/g")
    assert plan is not None and plan.members == first.members and plan.devices == first.devices
