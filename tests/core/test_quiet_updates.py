"""Which pod updates make a planner cycle due (``ClusterCache.plan_generation``).

kube-scheduler 1.20 writes ``PodScheduled=False`` on every pod it rejects; in a burst of
gangs that is one write per pod, and none of it changes what a plan may depend on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import fields, replace

import pytest

from app.core.cycle import verdicts as verdicts_module
from app.core.model.values import Pod
from app.core.state import cache as module
from app.core.state.cache import ClusterCache
from app.core.state.gateway import InMemoryGateway
from app.settings import Settings
from app.wiring import build_cache, build_graph
from tests.factories import node, pod

LABELS = {"muster.io/pod-group": "g", "muster.io/min-member": "3"}

#: (what the new version of the first member changes, whether a cycle is then due)
ROWS: list[tuple[str, Callable[[Pod], Pod], bool]] = [
    ("only its PodScheduled condition", lambda p: replace(p, unschedulable=True), False),
    ("nothing Muster reads", lambda p: p, False),
    (
        "Muster's own plan record and nudge (their echo)",
        lambda p: replace(
            p, annotations={**p.annotations, "muster.io/plan": "x", "muster.io/planned": "g@1"}
        ),
        False,
    ),
    (
        "its own notes and another annotation",
        lambda p: replace(p, annotations={"muster.io/plan": "x", "team": "a"}),
        True,
    ),
    ("a label", lambda p: replace(p, labels={**p.labels, "team": "a"}), True),
    ("its requests", lambda p: replace(p, requests=p.requests._replace(cpu=2000)), True),
    ("its condition and its priority", lambda p: replace(p, unschedulable=True, priority=5), True),
]


@pytest.mark.parametrize(("change", "due"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_a_waiting_pod_update_makes_a_cycle_due_only_if_planning_can_see_it(
    change: Callable[[Pod], Pod], due: bool
) -> None:
    cache = build_cache(Settings())
    graph = build_graph(Settings(), cache, InMemoryGateway(cache))
    cache.upsert_nodes([node("n0", gpus=8)])
    waiting = [pod(f"g-{i}", gpu=1, labels=LABELS) for i in range(2)]  # 2 of 3: no plan
    cache.upsert_pods(waiting)
    graph.planner.cycle()
    before = graph.planner.cycles
    cache.upsert_pods([change(waiting[0])])
    graph.planner.cycle()
    assert graph.planner.cycles - before == (1 if due else 0)
    assert cache.snapshot().pods[waiting[0].uid] == change(waiting[0])  # kept all the same


#: (members of a gang of min-member 3 there before, whether the next one makes a cycle due)
ARRIVAL_ROWS = [
    ("the second member: still short", 1, False),
    ("the last member: the gang can be planned", 2, True),
]


@pytest.mark.parametrize(
    ("before", "due"), [r[1:] for r in ARRIVAL_ROWS], ids=[r[0] for r in ARRIVAL_ROWS]
)
def test_a_new_member_makes_a_cycle_due_only_once_its_gang_has_them_all(
    before: int, due: bool
) -> None:
    """Shuffled gangs arrive a member at a time: no cycle can plan a gang short of members."""
    cache = build_cache(Settings())
    graph = build_graph(Settings(), cache, InMemoryGateway(cache))
    cache.upsert_nodes([node("n0", gpus=8)])
    members = [pod(f"g-{i}", gpu=1, labels=LABELS) for i in range(3)]
    cache.upsert_pods(members[:before])
    graph.planner.cycle()
    cycles = graph.planner.cycles
    cache.upsert_pods([members[before]])
    graph.planner.cycle()
    assert graph.planner.cycles - cycles == (1 if due else 0)
    assert (graph.planner.plan("default/g") is not None) is due


#: (what the new version of a planned member changes, whether a cycle is then due). A
#: version that only settles the pod where it was placed is quiet: its room is counted the
#: same (kube-scheduler's condition, the bind's echo, the kubelet's status while it runs).
PLACED_ROWS: list[tuple[str, Callable[[Pod], Pod], bool]] = [
    ("only its PodScheduled condition", lambda p: replace(p, unschedulable=True), False),
    ("bound on its planned node (the bind's echo)", lambda p: replace(p, node_name="n0"), False),
    ("running there, with its start time",
     lambda p: replace(p, node_name="n0", phase="Running", started=1000.0), False),
    ("bound on another node", lambda p: replace(p, node_name="n1"), True),
    ("finished", lambda p: replace(p, node_name="n0", phase="Succeeded"), True),
    ("being deleted", lambda p: replace(p, node_name="n0", deleting=True), True),
    ("bound, and a label", lambda p: replace(p, node_name="n0", labels={**p.labels, "x": "y"}),
     True),
    ("bound, and GPU ids written", lambda p: replace(p, node_name="n0", gpu_ids=(0,)), True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("change", "due"), [r[1:] for r in PLACED_ROWS], ids=[r[0] for r in PLACED_ROWS]
)
def test_a_planned_member_update_makes_a_cycle_due_unless_it_only_settles_the_pod(
    change: Callable[[Pod], Pod], due: bool
) -> None:
    cache = build_cache(Settings())
    graph = build_graph(Settings(), cache, InMemoryGateway(cache))
    cache.upsert_nodes([node("n0", gpus=8), node("n1", gpus=8)])
    members = [pod(f"g-{i}", gpu=1, labels=LABELS) for i in range(3)]
    cache.upsert_pods(members)
    graph.planner.cycle()
    plan = graph.planner.plan("default/g")
    assert plan is not None and plan.members[members[0].uid] == "n0"
    before = graph.planner.cycles
    cache.upsert_pods([change(members[0])])  # it holds a reservation
    graph.planner.cycle()
    assert graph.planner.cycles - before == (1 if due else 0)


def test_a_running_pod_status_is_quiet_and_a_forced_cycle_still_reads_it() -> None:
    """The forced cycle (the loop's, once a second) drops the plan the binds fulfilled."""
    cache = build_cache(Settings())
    graph = build_graph(Settings(), cache, InMemoryGateway(cache))
    cache.upsert_nodes([node("n0", gpus=8)])
    members = [pod(f"g-{i}", gpu=1, labels=LABELS) for i in range(3)]
    cache.upsert_pods(members)
    graph.planner.cycle()
    assert graph.planner.plan("default/g") is not None
    cache.upsert_pods([replace(m, node_name="n0", phase="Running") for m in members])
    assert graph.planner.cycle() == [] and graph.planner.plan("default/g") is not None
    graph.planner.cycle(force=True)
    assert graph.planner.plan("default/g") is None
    assert cache.view().used_of("n0").gpu // 1000 == 3


#: (what happens to the running pod on the only node, whether the waiting gang's member is
#: then planned by its own filter call, before the loop's next cycle)
ROOM_ROWS = [
    ("deleted", lambda cache, p: cache.delete_pod(p.uid), True),
    ("finished", lambda cache, p: cache.upsert_pods([replace(p, phase="Succeeded")]), True),
    (
        "relabelled, still running",
        lambda cache, p: cache.upsert_pods([replace(p, labels={"x": "y"})]),
        False,
    ),
]


@pytest.mark.parametrize(
    ("change", "planned"), [r[1:] for r in ROOM_ROWS], ids=[r[0] for r in ROOM_ROWS]
)
def test_a_member_retried_when_room_comes_back_is_planned_by_its_filter_call(
    change: Callable[[ClusterCache, Pod], None], planned: bool
) -> None:
    cache = build_cache(Settings())
    graph = build_graph(Settings(), cache, InMemoryGateway(cache))
    graph.planner.driven = True  # as under the loop: filter plans on demand only when due
    cache.upsert_nodes([node("n0", gpus=8)])
    running = pod("running", gpu=8, node="n0", phase="Running")
    members = [pod(f"g-{i}", gpu=2, labels=LABELS) for i in range(3)]
    cache.upsert_pods([running, *members])
    graph.planner.cycle()
    assert graph.planner.plan("default/g") is None
    change(cache, running)
    verdict = graph.planner.verdict(members[0])
    assert bool(verdict.node) == planned


WAIT_ROWS = [
    ("the running pod went: waits, planned", True, True),
    ("a new node came: answered from the last cycle at once", False, False),
]


@pytest.mark.parametrize(
    ("freed", "planned"), [r[1:] for r in WAIT_ROWS], ids=[r[0] for r in WAIT_ROWS]
)
def test_a_retry_after_room_came_back_waits_for_the_running_cycle(
    monkeypatch: pytest.MonkeyPatch, freed: bool, planned: bool
) -> None:
    """While the loop's cycle runs, filter waits for it only when a node's room came back;
    either way the loop's cycle plans the gang."""
    monkeypatch.setattr(verdicts_module, "FREED_WAIT", 10.0)  # the mechanism, not the timing
    cache = build_cache(Settings())
    graph = build_graph(Settings(), cache, InMemoryGateway(cache))
    planner = graph.planner
    planner.driven = True
    cache.upsert_nodes([node("n0", gpus=8)])
    running = pod("running", gpu=8, node="n0", phase="Running")
    members = [pod(f"g-{i}", gpu=2, labels=LABELS) for i in range(3)]
    cache.upsert_pods([running, *members])
    planner.cycle()  # gives the gang the head-of-line hold: the next cycle is due at once
    planner.cycle()
    if freed:
        cache.delete_pod(running.uid)
    else:
        cache.upsert_nodes([node("n1", gpus=8)])
    inside = threading.Event()

    def loop_cycle() -> None:  # the loop's cycle, slow to start
        with planner.book.lock:
            inside.set()
            time.sleep(0.2)
            planner.cycle()

    thread = threading.Thread(target=loop_cycle)
    thread.start()
    inside.wait(5)
    verdict = planner.verdict(members[0])
    thread.join()
    assert bool(verdict.node) == planned
    assert planner.plan("default/g") is not None


def test_the_quiet_checks_compare_every_field_but_those_they_skip() -> None:
    """``_upsert_pod`` and ``_settles`` compare two versions of a pod field by field, without
    building a pod: a change in any compared field but the ones each skips tells them apart
    (fields added to ``Pod`` later are compared too), and ``version`` is never compared."""
    base = pod("p", uid="u", gpu=1)
    skipped = {
        module._BUT_NOTES: {"unschedulable", "annotations"},
        module._BUT_SETTLING: {"node_name", "phase", "started", "unschedulable", "annotations"},
    }
    for compare, skips in skipped.items():
        for f in fields(Pod):
            changed = replace(base, **{f.name: _other(getattr(base, f.name))})
            same = compare(changed) == compare(base)
            assert same is (f.name in skips or not f.compare), f.name


def _other(value: object) -> object:
    """Some value unequal to ``value``, of its kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, tuple):
        return (*value, 1)
    if isinstance(value, dict):
        return {**value, "x": "y"}
    return object()
