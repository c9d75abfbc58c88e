"""A waiting gang member's story reaches ``kubectl describe`` as a ``GangWaiting`` Event that
starts with the category and summary, once per change (not once per kube-scheduler retry)."""

from __future__ import annotations

from app.core.cycle.loop import TELL_AFTER, WAITING_REASON
from app.core.state.cache import ClusterCache
from app.core.state.gateway import InMemoryGateway
from app.settings import Settings
from app.wiring import Graph, build_cache, build_graph
from tests.factories import node, pod


def one_node() -> tuple[ClusterCache, InMemoryGateway, Graph, list[float]]:
    """A graph over one 8-GPU node whose clock is ``now[0]``."""
    settings = Settings(strategy="binpack")
    cache = build_cache(settings)
    cache.upsert_nodes([node("n", gpus=8)])
    gateway = InMemoryGateway(cache)
    now = [0.0]
    return cache, gateway, build_graph(settings, cache, gateway, clock=lambda: now[0]), now


def test_a_changed_story_is_told_once_per_member() -> None:
    cache, gateway, graph, now = one_node()
    labels = {"muster.io/pod-group": "g", "muster.io/min-member": "3"}
    members = [pod(f"g-{i}", gpu=1, labels=labels) for i in range(2)]
    cache.upsert_pods(members)
    reasons = [graph.extender.filter(p, ["n"]).unresolvable["n"] for p in members]
    graph.loop.run_once()
    assert gateway.events == []  # held TELL_AFTER seconds first
    now[0] += TELL_AFTER
    graph.loop.run_once()
    told = [(e.name, e.reason, e.message) for e in gateway.events]
    assert told == [(p.name, WAITING_REASON, r) for p, r in zip(members, reasons, strict=True)]
    assert reasons[0].startswith("gang-incomplete: 2 of 3 members exist")
    # kube-scheduler retries: the same story is not told again.
    for p in members:
        graph.extender.filter(p, ["n"])
    graph.loop.run_once()
    assert len(gateway.events) == 2
    # The third member arrives: the gang is planned, nothing more to tell about waiting.
    third = pod("g-2", gpu=1, labels=labels)
    cache.upsert_pod(third)
    graph.loop.run_once(force=True)
    assert graph.extender.filter(third, ["n"]).feasible == ["n"]
    graph.loop.run_once()
    assert len(gateway.events) == 2


def test_a_member_arriving_between_cycles_is_told_how_many_exist_now() -> None:
    """Filter runs no cycle for a gang short of members, so the story of a member that came
    after the last look is found on a fresh look, not the one the last cycle's look gave."""
    settings = Settings(strategy="binpack")
    cache = build_cache(settings)
    cache.upsert_nodes([node("n", gpus=8)])
    graph = build_graph(settings, cache, InMemoryGateway(cache))
    graph.loop.run_once(force=True)
    labels = {"muster.io/pod-group": "g", "muster.io/min-member": "3"}
    first, second = (pod(f"g-{i}", gpu=1, labels=labels) for i in range(2))
    cache.upsert_pod(first)
    told_first = graph.extender.filter(first, ["n"]).unresolvable["n"]
    assert told_first.startswith("gang-incomplete: 1 of 3 members exist")
    cache.upsert_pod(second)
    told_second = graph.extender.filter(second, ["n"]).unresolvable["n"]
    assert told_second.startswith("gang-incomplete: 2 of 3 members exist"), told_second


def test_a_member_planned_while_its_story_is_held_is_never_told() -> None:
    """A story is held ``TELL_AFTER`` seconds: a member whose gang is planned meanwhile gets
    no Event (kube-scheduler's own FailedScheduling already told it), and a member that still
    waits is told its latest story once."""
    cache, gateway, graph, now = one_node()
    soon = {"muster.io/pod-group": "soon", "muster.io/min-member": "2"}
    late = {"muster.io/pod-group": "late", "muster.io/min-member": "3"}
    first = pod("soon-0", gpu=1, labels=soon)
    waits = pod("late-0", gpu=1, labels=late)
    cache.upsert_pods([first, waits])
    for p in (first, waits):
        assert "gang-incomplete" in graph.extender.filter(p, ["n"]).unresolvable["n"]
    graph.loop.run_once()
    now[0] += TELL_AFTER / 2
    cache.upsert_pod(pod("soon-1", gpu=1, labels=soon))
    graph.loop.run_once(force=True)
    assert graph.planner.plan("default/soon") is not None
    assert graph.planner.plan("default/late") is None
    now[0] += TELL_AFTER / 2
    graph.loop.run_once()
    assert [(e.name, e.reason) for e in gateway.events] == [("late-0", WAITING_REASON)]
    assert gateway.events[0].message.startswith("gang-incomplete: 1 of 3 members exist")
