"""A waiting gang member's story reaches ``kubectl describe`` as a ``GangWaiting`` Event that
starts with the category and summary, once per change (not once per kube-scheduler retry)."""

from __future__ import annotations

from app.core.cycle.loop import WAITING_REASON
from app.core.state.gateway import InMemoryGateway
from app.settings import Settings
from app.wiring import build_cache, build_graph
from tests.factories import node, pod


def test_a_changed_story_is_told_once_per_member() -> None:
    settings = Settings(strategy="binpack")
    cache = build_cache(settings)
    cache.upsert_nodes([node("n", gpus=8)])
    gateway = InMemoryGateway(cache)
    graph = build_graph(settings, cache, gateway)
    labels = {"muster.io/pod-group": "g", "muster.io/min-member": "3"}
    members = [pod(f"g-{i}", gpu=1, labels=labels) for i in range(2)]
    cache.upsert_pods(members)
    reasons = [graph.extender.filter(p, ["n"]).unresolvable["n"] for p in members]
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
