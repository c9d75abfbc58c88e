"""A gang declared by a group object through the whole graph: the planner holds it until the
object's minimum exists, then plans it whole; a disagreement with Muster's own keys is told as
``GangSourceConflict`` Warnings on the members and the object, shown in ``/debug/gangs``' rows
and ``/explain``, and the keys win."""

from __future__ import annotations

from dataclasses import replace

from app.core.cycle.loop import CONFLICT_REASON
from app.core.insight.explain import explain_pod
from app.core.model.groupobjects import coscheduling_podgroup
from app.core.model.values import VOLCANO, GroupObject
from app.core.state.gateway import InMemoryGateway
from app.settings import Settings
from app.wiring import Graph, build_cache, build_graph
from tests.factories import node, pod

VC = GroupObject(
    VOLCANO, "default", "train", "PodGroup", "scheduling.volcano.sh/v1beta1", "train",
    uid="pg-uid", min_member=3, queue="", priority=0,
)  # fmt: skip
VC_KEY = {"scheduling.k8s.io/group-name": "train"}


def graph() -> tuple[Graph, InMemoryGateway]:
    settings = Settings(strategy="binpack")
    cache = build_cache(settings)
    cache.upsert_nodes([node("n", gpus=8)])
    gateway = InMemoryGateway(cache)
    return build_graph(settings, cache, gateway), gateway


def test_the_object_minimum_holds_the_gang_until_it_exists() -> None:
    g, _ = graph()
    g.cache.upsert_groups([VC])
    members = [pod(f"train-{i}", gpu=1, annotations=VC_KEY) for i in range(3)]
    g.cache.upsert_pods(members[:2])
    g.loop.run_once(force=True)
    verdict = g.extender.filter(members[0], ["n"])
    assert verdict.feasible == []
    assert "2 of 3 members exist" in verdict.unresolvable["n"]
    (row,) = g.planner.describe()
    assert row["minMember"] == 3
    assert row["source"] == "PodGroup.scheduling.volcano.sh default/train"
    assert row["conflicts"] == []
    g.cache.upsert_pod(members[2])
    g.loop.run_once(force=True)
    assert g.planner.plan("default/train") is not None
    assert all(g.extender.filter(p, ["n"]).feasible == ["n"] for p in members)


def test_a_lowered_object_minimum_reaches_the_gang() -> None:
    g, _ = graph()
    g.cache.upsert_groups([VC])
    members = [pod(f"train-{i}", gpu=1, annotations=VC_KEY) for i in range(2)]
    g.cache.upsert_pods(members)
    g.loop.run_once(force=True)
    assert g.planner.plan("default/train") is None
    g.cache.upsert_groups([replace(VC, min_member=2)])
    g.loop.run_once(force=True)
    assert g.planner.plan("default/train") is not None


def test_a_disagreement_is_reported_once_and_muster_wins() -> None:
    g, gateway = graph()
    g.cache.upsert_groups([VC])
    own = {"muster.io/pod-group": "train", "muster.io/min-member": "2"}
    members = [pod(f"train-{i}", gpu=1, labels=own, annotations=VC_KEY) for i in range(2)]
    g.cache.upsert_pods(members)
    g.loop.run_once(force=True)
    # Muster's min-member (2) wins over the PodGroup's 3: the gang is planned with 2
    assert g.planner.plan("default/train") is not None
    text = (
        "gang default/train: muster.io/min-member=2 disagrees with PodGroup.scheduling.volcano.sh "
        "default/train minMember 3; muster.io/min-member wins"
    )
    told = sorted((e.about, e.name, e.reason, e.message, e.kind) for e in gateway.events)
    assert told == [
        ("Pod", "train-0", CONFLICT_REASON, text, "Warning"),
        ("Pod", "train-1", CONFLICT_REASON, text, "Warning"),
        ("PodGroup", "train", CONFLICT_REASON, text, "Warning"),
    ]
    (row,) = g.planner.describe()
    assert row["conflicts"] == [text.removeprefix("gang default/train: ")]
    # told once, not on every cycle; a new member is told too
    g.loop.run_once(force=True)
    assert len(gateway.events) == 3
    late = pod("train-2", gpu=1, labels=own, annotations=VC_KEY)
    g.cache.upsert_pod(late)
    g.loop.run_once(force=True)
    assert [(e.name, e.reason) for e in gateway.events[3:]] == [("train-2", CONFLICT_REASON)]


def test_explain_shows_source_and_conflicts() -> None:
    g, _ = graph()
    (co,) = coscheduling_podgroup(
        {"metadata": {"name": "co", "namespace": "default"}, "spec": {"minMember": 4}},
        "scheduling.x-k8s.io/v1alpha1",
    )
    g.cache.upsert_groups([co])
    labels = {"scheduling.x-k8s.io/pod-group": "co", "muster.io/min-member": "3"}
    g.cache.upsert_pods([pod(f"co-{i}", gpu=1, labels=labels) for i in range(2)])
    g.loop.run_once(force=True)
    answer = explain_pod(g.planner.look(), "default", "co-0").as_dict()
    assert answer["gang"]["needed"] == 3
    assert answer["gang"]["source"] == "PodGroup.scheduling.x-k8s.io default/co"
    assert answer["gang"]["conflicts"] == [
        "muster.io/min-member=3 disagrees with PodGroup.scheduling.x-k8s.io default/co "
        "minMember 4; muster.io/min-member wins"
    ]
