"""Gang sources as API objects: the parsers (documented object shapes), the pods' references,
gang specs with an object attached (Muster's keys win, disagreements noted), and the cache
attaching objects to pods as either comes and goes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from app.core.model.errors import InvalidInput
from app.core.model.gang import collect_gangs, explicit_queue, gang_spec
from app.core.model.groupobjects import (
    coscheduling_podgroup,
    group_refs,
    kubernetes_podgroup,
    kubernetes_workload,
    volcano_podgroup,
)
from app.core.model.parse import pod_from_dict
from app.core.model.values import (
    COSCHEDULING,
    KUBERNETES,
    VOLCANO,
    WORKLOAD,
    GroupObject,
    GroupRef,
    Pod,
    Resources,
    WorkloadRef,
)
from app.core.state.cache import ClusterCache, queue_key
from tests.factories import pod, pod_json


def meta(name: str, namespace: str = "team-a") -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "uid": f"uid-{name}"}


# -- parsers: (parser, apiVersion, object, expected fields of each GroupObject) ----------------

PARSED = [
    (
        volcano_podgroup,
        "scheduling.volcano.sh/v1beta1",
        {
            "metadata": meta("vc"),
            "spec": {
                "minMember": 4,
                "queue": "research",
                "priorityClassName": "high",
                "minResources": {"nvidia.com/gpu": "8", "cpu": "16", "example.com/foo": "1"},
                "minTaskMember": {"worker": 3},
            },
            "status": {"phase": "Pending"},
        },
        [
            dict(
                source=VOLCANO, name="vc", min_member=4, queue="research",
                priority_class="high", min_resources=Resources(gpu=8000, cpu=16000),
                problem="", gang=True,
            )
        ],
    ),
    (
        coscheduling_podgroup,
        "scheduling.x-k8s.io/v1alpha1",
        {"metadata": meta("co"), "spec": {"minMember": 3, "scheduleTimeoutSeconds": 120}},
        [dict(source=COSCHEDULING, name="co", min_member=3, timeout=120.0, problem="")],
    ),
    (
        coscheduling_podgroup,
        "scheduling.x-k8s.io/v1alpha1",
        {"metadata": meta("zero"), "spec": {"minMember": 0}},
        [dict(min_member=None, problem="spec.minMember=0 must be at least 1")],
    ),
    (
        volcano_podgroup,
        "scheduling.volcano.sh/v1beta1",
        {"metadata": meta("nomin"), "spec": {"queue": "q"}},
        [dict(min_member=None, problem="spec.minMember is not set", queue="q")],
    ),
    (
        kubernetes_podgroup,
        "scheduling.k8s.io/v1alpha2",
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": meta("training-worker-0"),
            "spec": {
                "podGroupTemplateRef": {
                    "workload": {"workloadName": "training", "podGroupTemplateName": "worker"}
                },
                "schedulingPolicy": {"gang": {"minCount": 4}},
                "priorityClassName": "batch",
                "priority": 1000,
            },
        },
        [
            dict(
                source=KUBERNETES, name="training-worker-0", min_member=4, gang=True,
                priority_class="batch", priority=1000, problem="",
            )
        ],
    ),
    (
        kubernetes_podgroup,
        "scheduling.k8s.io/v1alpha2",
        {"metadata": meta("plain"), "spec": {"schedulingPolicy": {"basic": {}}}},
        [dict(gang=False, min_member=None, problem="")],
    ),
    (
        kubernetes_podgroup,
        "scheduling.k8s.io/v1alpha2",
        {"metadata": meta("both"),
         "spec": {"schedulingPolicy": {"basic": {}, "gang": {"minCount": 2}}}},
        [dict(gang=True, problem="spec.schedulingPolicy must set exactly one of basic and gang")],
    ),
    (
        kubernetes_workload,
        "scheduling.k8s.io/v1alpha1",
        {
            "apiVersion": "scheduling.k8s.io/v1alpha1",
            "kind": "Workload",
            "metadata": meta("training-job-workload"),
            "spec": {
                "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": "training-job"},
                "podGroups": [
                    {"name": "workers", "policy": {"gang": {"minCount": 4}}},
                    {"name": "driver", "policy": {"basic": {}}},
                ],
            },
        },
        [
            dict(source=WORKLOAD, name="training-job-workload:workers", min_member=4, gang=True,
                 object_name="training-job-workload"),
            dict(source=WORKLOAD, name="training-job-workload:driver", gang=False),
        ],
    ),
]  # fmt: skip


@pytest.mark.parametrize(("parse", "api_version", "obj", "expected"), PARSED)
def test_parsers_read_the_documented_shapes(
    parse: Any, api_version: str, obj: dict[str, Any], expected: list[dict[str, Any]]
) -> None:
    groups = parse(obj, api_version)
    assert len(groups) == len(expected)
    for group, fields in zip(groups, expected, strict=True):
        assert group.namespace == "team-a"
        assert group.api_version == api_version
        for key, value in fields.items():
            assert getattr(group, key) == value, key


BAD = [
    (volcano_podgroup, {"metadata": {"namespace": "x"}, "spec": {}}, "metadata.name"),
    (volcano_podgroup, {"metadata": meta("a"), "spec": {"minMember": "4"}}, "spec.minMember"),
    (volcano_podgroup, {"metadata": meta("a"), "spec": {"minResources": {"cpu": "lots"}}},
     "spec.minResources.cpu"),
    (coscheduling_podgroup, {"metadata": meta("a"), "spec": []}, "spec"),
    (kubernetes_podgroup,
     {"metadata": meta("a"), "spec": {"schedulingPolicy": {"gang": {"minCount": 1.5}}}},
     "spec.schedulingPolicy.gang.minCount"),
    (kubernetes_workload, {"metadata": meta("a"), "spec": {"podGroups": {"name": "w"}}},
     "spec.podGroups"),
    (kubernetes_workload, {"metadata": meta("a"), "spec": {"podGroups": [{"policy": {}}]}},
     "spec.podGroups[0].name"),
]  # fmt: skip


@pytest.mark.parametrize(("parse", "obj", "field"), BAD)
def test_malformed_objects_name_the_field(parse: Any, obj: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse(obj, "v")
    assert err.value.field == field


def test_display_names_the_object() -> None:
    (vc,) = volcano_podgroup(
        {"metadata": meta("vc"), "spec": {"minMember": 2}}, "scheduling.volcano.sh/v1beta1"
    )
    assert vc.display == "PodGroup.scheduling.volcano.sh team-a/vc"
    workers, _ = kubernetes_workload(PARSED[-1][2], "scheduling.k8s.io/v1alpha1")
    assert workers.display == (
        "Workload.scheduling.k8s.io team-a/training-job-workload, pod group workers"
    )  # fmt: skip


# -- pods' references -------------------------------------------------------------------------


def test_pods_name_their_objects_by_metadata_and_spec() -> None:
    spec_pod = pod_from_dict(
        {
            "metadata": {"name": "w0", "namespace": "ns"},
            "spec": {
                "schedulingGroup": {"podGroupName": "training-worker-0"},
                "workloadRef": {"name": "wl", "podGroup": "workers", "podGroupReplicaKey": "1"},
                "containers": [],
            },
        }
    )
    assert spec_pod.scheduling_group == "training-worker-0"
    assert spec_pod.workload_ref == WorkloadRef("wl", "workers", "1")
    refs = group_refs(
        "ns",
        {"scheduling.x-k8s.io/pod-group": "co"},
        {"scheduling.k8s.io/group-name": "vc"},
        spec_pod.scheduling_group,
        spec_pod.workload_ref,
    )
    assert refs == (
        GroupRef(KUBERNETES, "ns", "training-worker-0"),
        GroupRef(WORKLOAD, "ns", "wl:workers"),
        GroupRef(VOLCANO, "ns", "vc"),
        GroupRef(COSCHEDULING, "ns", "co"),
    )
    with pytest.raises(InvalidInput) as err:
        pod_from_dict({"metadata": {"name": "x"}, "spec": {"workloadRef": {"name": "wl"}}})
    assert err.value.field == "Pod.spec.workloadRef.podGroup"


# -- gang specs with an object attached -------------------------------------------------------

VC = GroupObject(
    VOLCANO, "default", "vc", "PodGroup", "scheduling.volcano.sh/v1beta1", "vc",
    min_member=3, queue="research", priority=500,
)  # fmt: skip
CO = GroupObject(
    COSCHEDULING, "default", "co", "PodGroup", "scheduling.x-k8s.io/v1alpha1", "co",
    min_member=2, timeout=30.0,
)  # fmt: skip
KPG = GroupObject(
    KUBERNETES, "default", "kpg", "PodGroup", "scheduling.k8s.io/v1alpha2", "kpg", min_member=4
)
WL = GroupObject(
    WORKLOAD, "default", "wl:workers", "Workload", "scheduling.k8s.io/v1alpha1", "wl", min_member=2
)
BASIC = replace(KPG, gang=False, min_member=None)
G, M, Q = "muster.io/pod-group", "muster.io/min-member", "muster.io/queue"
VC_KEY = {"scheduling.k8s.io/group-name": "vc"}


def with_group(p: Pod, group: GroupObject | None, **spec: Any) -> Pod:
    return replace(p, group=group, **spec)


SPECS = [
    # (labels, annotations, object, pod spec fields, (name, min, timeout), problem, notes)
    ({}, VC_KEY, VC, {}, ("vc", 3, None), "", []),
    ({G: "vc"}, VC_KEY, VC, {}, ("vc", 3, None), "", []),
    ({G: "vc", M: "3"}, VC_KEY, VC, {}, ("vc", 3, None), "", []),
    # Muster's min-member wins over the PodGroup's; the disagreement is noted
    ({G: "vc", M: "5"}, VC_KEY, VC, {}, ("vc", 5, None), "",
     ["muster.io/min-member=5 disagrees with PodGroup.scheduling.volcano.sh default/vc "
      "minMember 3; muster.io/min-member wins"]),
    # Muster's queue wins over spec.queue; noted
    ({G: "vc", Q: "prod"}, VC_KEY, VC, {}, ("vc", 3, None), "",
     ["muster.io/queue=prod disagrees with PodGroup.scheduling.volcano.sh default/vc queue "
      "research; muster.io/queue wins"]),
    # Muster's group names another gang: it wins, the object is not used
    ({G: "other", M: "2"}, VC_KEY, VC, {}, ("other", 2, None), "",
     ["muster.io/pod-group=other names another gang than PodGroup.scheduling.volcano.sh "
      "default/vc; muster.io/pod-group wins"]),
    # the PodGroup wins over another scheduler's min-member key on the pod; noted
    ({}, {**VC_KEY, "scheduling.volcano.sh/group-min-member": "9"}, VC, {}, ("vc", 3, None), "",
     ["scheduling.volcano.sh/group-min-member=9 disagrees with PodGroup.scheduling.volcano.sh "
      "default/vc; the PodGroup wins"]),
    ({"scheduling.x-k8s.io/pod-group": "co"}, {}, CO, {}, ("co", 2, 30.0), "", []),
    ({"scheduling.x-k8s.io/pod-group": "co", "muster.io/gang-timeout": "90"}, {}, CO, {},
     ("co", 2, 90.0), "", []),
    # Kubernetes' own: spec.schedulingGroup / spec.workloadRef, no labels at all
    ({}, {}, KPG, {"scheduling_group": "kpg"}, ("kpg", 4, None), "", []),
    ({}, {}, None, {"scheduling_group": "kpg"}, ("kpg", None, None),
     "spec.schedulingGroup.podGroupName names 'kpg', which the API does not have (yet)", []),
    ({}, {}, WL, {"workload_ref": WorkloadRef("wl", "workers")}, ("wl:workers", 2, None), "", []),
    ({}, {}, WL, {"workload_ref": WorkloadRef("wl", "workers", "7")}, ("wl:workers:7", 2, None),
     "", []),
    # a PodGroup that cannot be used makes the gang wait with its reason
    ({}, VC_KEY, replace(VC, min_member=None, problem="spec.minMember is not set"), {},
     ("vc", None, None), "PodGroup.scheduling.volcano.sh default/vc: spec.minMember is not set",
     []),
]  # fmt: skip


@pytest.mark.parametrize(
    ("labels", "annotations", "group", "spec", "expected", "problem", "notes"), SPECS
)
def test_gang_spec_reads_the_object_and_muster_keys_win(
    labels: dict[str, str],
    annotations: dict[str, str],
    group: GroupObject | None,
    spec: dict[str, Any],
    expected: tuple[str, int | None, float | None],
    problem: str,
    notes: list[str],
) -> None:
    p = with_group(pod(labels=labels, annotations=annotations), group, **spec)
    s = gang_spec(p)
    assert s is not None
    assert (s.name, s.min_member, s.timeout) == expected
    assert s.problem == problem
    assert list(s.notes) == notes


def test_a_basic_policy_is_no_gang() -> None:
    assert gang_spec(with_group(pod(), BASIC, scheduling_group="kpg")) is None


def test_gang_carries_the_object_priority_and_conflicts() -> None:
    members = [
        with_group(pod(f"m{i}", labels={G: "vc", M: "5"}, annotations=VC_KEY, priority=10), VC)
        for i in range(2)
    ]
    (gang,) = collect_gangs(members, lambda _: False).values()
    assert gang.min_member == 5 and gang.problem == ""
    assert gang.group == VC
    assert gang.priority == 500  # the PodGroup's priority is above the members'
    assert len(gang.conflicts) == 1 and "minMember 3" in gang.conflicts[0]


def test_queue_order_muster_then_object_then_conventions() -> None:
    annotations = {**VC_KEY, "scheduling.volcano.sh/queue-name": "from-annotation"}
    plain = pod(annotations=annotations)
    assert explicit_queue(plain) == ("scheduling.volcano.sh/queue-name", "from-annotation")
    attached = with_group(plain, VC)
    assert explicit_queue(attached) == (
        "PodGroup.scheduling.volcano.sh default/vc spec.queue",
        "research",
    )
    assert explicit_queue(with_group(pod(labels={Q: "mine"}), VC)) == (Q, "mine")
    assert queue_key(attached, True).explicit == "research"


# -- the cache attaches objects to pods -------------------------------------------------------


def test_cache_attaches_objects_whichever_comes_first() -> None:
    cache = ClusterCache()
    first = pod_from_dict(pod_json("a", uid="a", annotations=VC_KEY))
    cache.upsert_pod(first)
    assert cache.gang_members_of("default/vc") and cache.snapshot().pods["a"].group is None
    cache.upsert_groups([VC])
    snap = cache.snapshot()
    assert snap.pods["a"].group == VC
    assert gang_spec(snap.pods["a"]).min_member == 3  # type: ignore[union-attr]
    # a pod arriving after its object gets it at once
    cache.upsert_pod(pod_from_dict(pod_json("b", uid="b", annotations=VC_KEY)))
    assert cache.snapshot().pods["b"].group == VC
    # a changed object reaches every member; the generation moves
    before = cache.snapshot().generation
    cache.upsert_groups([replace(VC, min_member=2)])
    snap = cache.snapshot()
    assert snap.generation > before
    assert {p.group.min_member for p in snap.pods.values() if p.group} == {2}
    # an update of the pod keeps the object
    cache.upsert_pod(replace(first, phase="Pending", labels={"x": "y"}))
    assert cache.snapshot().pods["a"].group is not None
    # a relist without the object drops it from the pods
    cache.replace_groups([VOLCANO], [CO])
    snap = cache.snapshot()
    assert snap.pods["a"].group is None and snap.pods["b"].group is None
    assert cache.groups() == [CO]
    # a deleted pod, or one that names nothing any more, leaves the reference index
    cache.delete_pod("b")
    cache.upsert_pod(replace(first, annotations={}))
    cache.upsert_groups([VC])
    assert "b" not in cache.snapshot().pods
    assert cache.snapshot().pods["a"].group is None
    assert cache.gang_members_of("default/vc") == []


def test_cache_replace_groups_leaves_other_sources_alone() -> None:
    cache = ClusterCache()
    cache.upsert_groups([VC, CO])
    cache.replace_groups([COSCHEDULING], [])
    assert cache.groups() == [VC]


def test_a_pod_learnt_from_an_extender_call_gets_its_object() -> None:
    cache = ClusterCache()
    cache.upsert_groups([VC])
    learnt = cache.learn_pod(pod_from_dict(pod_json("c", uid="c", annotations=VC_KEY)))
    assert learnt.group == VC
    assert gang_spec(learnt).min_member == 3  # type: ignore[union-attr]
