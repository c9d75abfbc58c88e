"""The decision journal and its metrics on a real kube-scheduler 1.20: gangs planned and
started through real binds, then a preemption through the Eviction API, as /debug/events and
/metrics tell them."""

from __future__ import annotations

from typing import Any

from controlplane import create_gpu_node, wait_for
from harness import (
    BindingWatch,
    FakeKubelet,
    create_priority_classes,
    gpu_pod,
    make_namespace,
    muster_cluster,
    priority_gang,
    wait_for_failure,
    wait_nodes,
)
from prometheus_client.parser import text_string_to_metric_families

from app.core.cycle.loop import TELL_AFTER, WAITING_REASON
from app.settings import Settings


def job(name: str, size: int, gpus: int, ns: str, priority_class: str) -> list[dict[str, Any]]:
    return priority_gang(name, size, gpus, ns, "events", priority_class)


def test_plans_starts_and_a_preemption_are_journaled() -> None:
    settings = Settings(mode="cluster", min_runtime_seconds=0)
    with muster_cluster(settings) as (cp, core, muster):
        create_priority_classes(core, {"low": 10, "high": 1000})
        ns = make_namespace(core, "events")
        nodes = ["ev-0", "ev-1"]
        for name in nodes:
            create_gpu_node(core, name, gpus=8, labels={"e2e": "events"})
        wait_nodes(muster, nodes)
        with (
            BindingWatch(core, ns),
            FakeKubelet(core, ns, {"low": 2, "high": 2}, runtime=600.0) as kubelet,
        ):
            for body in job("low", 2, 8, ns, "low"):  # the whole cluster
                core.create_namespaced_pod(ns, body)
            wait_for(lambda: "low" in kubelet.started, 60, "the low-priority gang to run")
            for body in job("high", 2, 8, ns, "high"):
                core.create_namespaced_pod(ns, body)
            wait_for(lambda: "high" in kubelet.started or kubelet.error, 90, "the preemptor to run")
            assert kubelet.error is None, kubelet.error

            def started_high() -> list[dict[str, Any]] | None:
                events = muster.get("/debug/events", params={"since": 0}).json()["events"]
                done = {(e["kind"], e["gang"]) for e in events}
                return events if ("gang-started", "events/high") in done else None

            events = wait_for(started_high, 30, "the journal to tell the preemptor started")
        story = [(e["kind"], e["gang"]) for e in events if e["kind"] != "plan-released"]
        assert story == [
            ("plan", "events/low"),
            ("gang-started", "events/low"),
            ("plan", "events/high"),
            ("preemption", "events/high"),
            ("gang-started", "events/high"),
        ], events
        preemption = next(e for e in events if e["kind"] == "preemption")
        assert preemption["message"] == "preempted by gang events/high (priority 1000)"
        (victim,) = preemption["victims"]
        assert (victim["unit"], victim["pods"], victim["gpus"]) == ("events/low", 2, 16.0)
        assert victim["gpuSecondsLost"] > 0  # it ran (its pods' startTime) before eviction
        assert preemption["gpuSecondsLost"] == victim["gpuSecondsLost"]
        started = [e for e in events if e["kind"] == "gang-started"]
        assert all(sorted(e["nodes"]) == nodes for e in started)
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(muster.get("/metrics").text)
            for s in f.samples
        }
        assert samples[("muster_preemption_victims_total", (("kind", "preemption"),))] == 1
        assert samples[("muster_decisions_total", (("kind", "gang-started"),))] == 2
        lost = samples[("muster_preemption_gpu_seconds_lost_total", (("kind", "preemption"),))]
        assert lost == victim["gpuSecondsLost"]


def test_a_waiting_member_gets_a_gang_waiting_event_once_its_story_has_held() -> None:
    """A story becomes a ``GangWaiting`` Event only after it has held ``TELL_AFTER`` seconds
    and the member still waits; a member whose gang is planned meanwhile never gets one."""
    settings = Settings(mode="cluster")
    with muster_cluster(settings) as (_, core, muster):
        ns = make_namespace(core, "told")
        create_gpu_node(core, "told-0", gpus=8, labels={"e2e": "told"})
        wait_nodes(muster, ["told-0"])
        with BindingWatch(core, ns) as bound:
            soon = gang("soon", 2, ns)
            core.create_namespaced_pod(ns, soon[0])
            wait_for_failure(core, ns, "gang-incomplete: 1 of 2", "soon-0 to be told it waits")
            core.create_namespaced_pod(ns, soon[1])
            wait_for(lambda: {"soon-0", "soon-1"} <= set(bound.placements), 60, "soon to bind")
            # Held after soon-0's story, so told after soon-0's was dropped.
            core.create_namespaced_pod(ns, gang("waits", 3, ns)[0])
            told = wait_for(lambda: gang_waiting(core, ns) or None, TELL_AFTER + 30, "an event")
        assert [(name, text.split(";")[0]) for name, text in told] == [
            ("waits-0", "gang-incomplete: 1 of 3 members exist")
        ]


def gang(name: str, size: int, ns: str) -> list[dict[str, Any]]:
    labels = {"muster.io/pod-group": name, "muster.io/min-member": str(size)}
    return [gpu_pod(f"{name}-{i}", 1, ns, "told", labels) for i in range(size)]


def gang_waiting(core: Any, ns: str) -> list[tuple[str, str]]:
    events = core.list_namespaced_event(ns).items
    return [(e.involved_object.name, e.message) for e in events if e.reason == WAITING_REASON]
