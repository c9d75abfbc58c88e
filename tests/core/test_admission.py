"""The admission decisions as scenario tables: real AdmissionReview pods in, labels out.

Every owner kind (Job, JobSet, TrainJob, PyTorchJob, RayCluster, LeaderWorkerSet) and every
convention of ``app.core.model.labels`` has a row; so do the pods Muster must leave alone and the
pods it can only partly classify. Every row is also admitted a second time, patched, and must
then yield no patch at all (idempotency, which reinvocationPolicy IfNeeded relies on).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from app.core.admission.pods import (
    AdmissionConfig,
    Fetched,
    NamespaceMeta,
    agreed_min_member,
    escape_pointer,
    label_safe,
    mutate,
    validate,
)
from app.core.admission.workloads import (
    JOB,
    JOBSET,
    LEADERWORKERSET,
    PYTORCHJOB,
    RAYCLUSTER,
    WorkloadKind,
    WorkloadRef,
    gang_of,
    workload_of,
)
from app.core.model import labels as keys
from app.core.model.errors import InvalidInput
from app.core.model.values import COSCHEDULING, VOLCANO, GroupObject, Pod, Resources
from tests.reviews import (
    apply_patch,
    job_obj,
    job_pod,
    jobset_obj,
    jobset_pod,
    lws_obj,
    lws_pod,
    pod,
    pytorch_pod,
    pytorchjob_obj,
    ray_pod,
    raycluster_obj,
    review,
)

CONFIG = AdmissionConfig()
MANAGED_NS = NamespaceMeta(
    labels={"muster.io/managed": "true"}, annotations={"muster.io/default-queue": "team-b"}
)
NOT_FOUND = "not found"


@dataclass
class Case:
    name: str
    pod: dict[str, Any]
    #: Muster's labels the admitted pod ends up with (None: the pod must stay untouched).
    want: dict[str, str] | None
    owners: dict[tuple[WorkloadKind, str], dict[str, Any] | str] = field(default_factory=dict)
    ns: NamespaceMeta = field(default_factory=NamespaceMeta)
    warnings: list[str] = field(default_factory=list)
    skipped: str = ""
    agreed: dict[str, int] = field(default_factory=dict)
    config: AdmissionConfig = CONFIG
    #: Group objects (PodGroups) the cache holds.
    groups: tuple[GroupObject, ...] = ()


def muster_labels(obj: Mapping[str, Any]) -> dict[str, str]:
    found = obj["metadata"].get("labels") or {}
    return {k: v for k, v in found.items() if k.startswith(keys.PREFIX)}


PG_CJ = GroupObject(COSCHEDULING, "ml", "cj", "PodGroup", "scheduling.x-k8s.io/v1alpha1", "cj",
                    min_member=4)  # fmt: skip
PG_VC = GroupObject(VOLCANO, "ml", "vcpg", "PodGroup", "scheduling.volcano.sh/v1beta1", "vcpg",
                    min_member=2)  # fmt: skip


def with_spec(obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    obj["spec"].update(spec)
    return obj


def vc_annotations(group: str, min_member: str | None = None) -> dict[str, str]:
    out = {"scheduling.k8s.io/group-name": group}
    if min_member is not None:
        out["scheduling.volcano.sh/group-min-member"] = min_member
    return out


G, M, Q = keys.POD_GROUP, keys.MIN_MEMBER, keys.QUEUE

CASES = [
    # -- owners ---------------------------------------------------------------------------
    Case(
        "batch Job: group = Job, min-member = parallelism",
        job_pod("train"),
        {G: "train", M: "4"},
        owners={(JOB, "train"): job_obj("train", parallelism=4, completions=8)},
    ),
    Case(
        "batch Job: completions below parallelism caps the gang",
        job_pod("train"),
        {G: "train", M: "2"},
        owners={(JOB, "train"): job_obj("train", parallelism=4, completions=2)},
    ),
    Case(
        "batch Job without parallelism runs one pod",
        job_pod("one"),
        {G: "one", M: "1"},
        owners={(JOB, "one"): job_obj("one")},
    ),
    Case(
        "Kueue queue label on the Job (not on its pods) is the pod's queue",
        job_pod("kq"),
        {G: "kq", M: "2", Q: "team-q"},
        owners={(JOB, "kq"): job_obj("kq", 2, labels={"kueue.x-k8s.io/queue-name": "team-q"})},
    ),
    Case(
        "JobSet: sum of replicas x parallelism over replicated jobs",
        jobset_pod("llama", "workers", 1),
        {G: "llama", M: "9"},
        owners={(JOBSET, "llama"): jobset_obj("llama", [("driver", 1, 1), ("workers", 2, 4)])},
    ),
    Case(
        "staged JobSet (dependsOn): each replicated job is its own gang",
        jobset_pod("etl", "train"),
        {G: "etl-train", M: "8"},
        owners={
            (JOBSET, "etl"): jobset_obj("etl", [("prep", 1, 1), ("train", 2, 4)], depends=True)
        },
    ),
    Case(
        "staged JobSet (InOrder startup)",
        jobset_pod("ord", "b"),
        {G: "ord-b", M: "3"},
        owners={(JOBSET, "ord"): jobset_obj("ord", [("a", 1, 2), ("b", 3, 1)], in_order=True)},
    ),
    Case(
        "TrainJob: sized by the JobSet of the same name",
        jobset_pod("ft", "node", trainjob="ft"),
        {G: "ft", M: "4"},
        owners={(JOBSET, "ft"): jobset_obj("ft", [("node", 1, 4)])},
    ),
    Case(
        "TrainJob with initializers: the trainer nodes are a gang of numNodes",
        jobset_pod("ft2", "node", trainjob="ft2"),
        {G: "ft2-node", M: "8"},
        owners={
            (JOBSET, "ft2"): jobset_obj(
                "ft2", [("dataset-initializer", 1, 1), ("node", 1, 8)], depends=True
            )
        },
    ),
    Case(
        "PyTorchJob: sum of replicas",
        pytorch_pod("bert", "master"),
        {G: "bert", M: "4"},
        owners={(PYTORCHJOB, "bert"): pytorchjob_obj("bert", master=1, workers=3)},
    ),
    Case(
        "PyTorchJob: schedulingPolicy minAvailable and queue win",
        pytorch_pod("elastic"),
        {G: "elastic", M: "2", Q: "research"},
        owners={
            (PYTORCHJOB, "elastic"): pytorchjob_obj(
                "elastic", workers=7, min_available=2, queue="research"
            )
        },
    ),
    Case(
        "RayCluster: head + minReplicas (else replicas) x numOfHosts; suspended groups skipped",
        ray_pod("rc"),
        {G: "rc", M: "8"},
        owners={
            (RAYCLUSTER, "rc"): raycluster_obj(
                "rc",
                [
                    {"groupName": "gpu", "replicas": 4, "minReplicas": 2, "numOfHosts": 2},
                    {"groupName": "cpu", "replicas": 3},
                    {"groupName": "idle", "replicas": 5, "suspend": True},
                ],
            )
        },
    ),
    Case(
        "LeaderWorkerSet: one gang per replica group, of the group size",
        lws_pod("vllm", 1, worker_index=2),
        {G: "vllm-1", M: "4"},
        owners={(LEADERWORKERSET, "vllm"): lws_obj("vllm", size=4)},
    ),
    Case(
        "LeaderWorkerSet LeaderReady: workers follow the leader, no gang barrier",
        lws_pod("lr", 0),
        {G: "lr-0", M: "1"},
        owners={(LEADERWORKERSET, "lr"): lws_obj("lr", size=4, startup="LeaderReady")},
    ),
    # -- other schedulers' conventions ------------------------------------------------------
    Case(
        "coscheduling pod-group + min-available label",
        pod(
            gpu=1,
            labels={
                "scheduling.x-k8s.io/pod-group": "pg1",
                "pod-group.scheduling.sigs.k8s.io/min-available": "3",
            },
        ),  # fmt: skip
        {G: "pg1", M: "3"},
    ),
    Case(
        "coscheduling group named after the Job: the Job gives min-member",
        job_pod("cj", labels={"scheduling.x-k8s.io/pod-group": "cj"}),
        {G: "cj", M: "6"},
        owners={(JOB, "cj"): job_obj("cj", 6)},
    ),
    Case(
        "coscheduling group named after the Job, its PodGroup known: the PodGroup sizes it",
        job_pod("cj", labels={"scheduling.x-k8s.io/pod-group": "cj"}),
        {G: "cj"},
        owners={(JOB, "cj"): job_obj("cj", 6)},
        groups=(PG_CJ,),
    ),
    Case(
        "Volcano group without min-member whose PodGroup is known: no warning",
        pod(gpu=1, annotations=vc_annotations("vcpg")),
        {G: "vcpg"},
        groups=(PG_VC,),
    ),
    Case(
        "Volcano group without min-member, no PodGroup known: a warning",
        pod(gpu=1, annotations=vc_annotations("vcpg")),
        {G: "vcpg"},
        warnings=["gang ml/vcpg has no min-member"],
    ),
    Case(
        "Kubernetes' gang API (spec.schedulingGroup): no group label, the cache reads it",
        with_spec(job_pod("kj"), schedulingGroup={"podGroupName": "kj-0"}),
        {},
        owners={(JOB, "kj"): job_obj("kj", 4)},
    ),
    Case(
        "coscheduling group spanning workloads: no min-member, with a warning",
        job_pod("part", labels={"scheduling.x-k8s.io/pod-group": "bigger"}),
        {G: "bigger"},
        owners={(JOB, "part"): job_obj("part", 2)},
        warnings=["gang ml/bigger has no min-member"],
    ),
    Case(
        "Volcano annotations, queue, and schedulerName volcano taken over",
        pod(
            gpu=2,
            scheduler="volcano",
            annotations={
                **vc_annotations("vcjob", "4"),
                "scheduling.volcano.sh/queue-name": "research",
            },
        ),  # fmt: skip
        {G: "vcjob", M: "4", Q: "research"},
    ),
    Case(
        "Kueue pod group (label + total-count annotation) and queue label",
        pod(
            labels={
                "kueue.x-k8s.io/pod-group-name": "kgrp",
                "kueue.x-k8s.io/queue-name": "user-queue",
            },
            annotations={"kueue.x-k8s.io/pod-group-total-count": "8"},
        ),  # fmt: skip
        {G: "kgrp", M: "8", Q: "user-queue"},
    ),
    Case(
        "KAI pod-group-name, batch-min-member and queue, schedulerName kai-scheduler",
        pod(
            gpu=1,
            scheduler="kai-scheduler",
            labels={
                "pod-group-name": "pg-7f3a",
                "kai.scheduler/batch-min-member": "2",
                "kai.scheduler/queue": "team-a",
            },
        ),  # fmt: skip
        {G: "pg-7f3a", M: "2", Q: "team-a"},
    ),
    Case(
        "YuniKorn task group (no min-member key) and queue",
        pod(
            gpu=1,
            scheduler="yunikorn",
            annotations={"yunikorn.apache.org/task-group-name": "tg"},
            labels={"yunikorn.apache.org/queue": "root.sandbox"},
        ),  # fmt: skip
        {G: "tg", Q: "root.sandbox"},
        warnings=["gang ml/tg has no min-member (yunikorn.apache.org/task-group-name names no"],
    ),
    Case(
        "Muster's own keys are kept as they are: only schedulerName changes",
        pod(labels={G: "mine", M: "3", Q: "gold"}),
        {G: "mine", M: "3", Q: "gold"},
    ),
    Case(
        "Muster's keys as annotations count as given",
        pod(gpu=1, annotations={G: "ann", M: "2", Q: "gold"}),
        {},
    ),
    Case(
        "explicit muster group beats other conventions and owners",
        job_pod("j1", labels={G: "explicit", "scheduling.x-k8s.io/pod-group": "other"}),
        {G: "explicit"},
        owners={(JOB, "j1"): job_obj("j1", 5)},
        warnings=["gang ml/explicit has no min-member"],
    ),
    Case(
        "explicit group named after the owner takes the owner's size",
        job_pod("j2", labels={G: "j2"}),
        {G: "j2", M: "5"},
        owners={(JOB, "j2"): job_obj("j2", 5)},
    ),
    Case(
        "convention beats owner for the group name",
        job_pod(
            "j3",
            labels={"kueue.x-k8s.io/pod-group-name": "kg"},
            annotations={"kueue.x-k8s.io/pod-group-total-count": "2"},
        ),  # fmt: skip
        {G: "kg", M: "2"},
        owners={(JOB, "j3"): job_obj("j3", 5)},
    ),
    Case(
        "a group name that is no label value is shortened deterministically",
        pod(gpu=1, annotations=vc_annotations("Team A / " + "x" * 80, "2")),
        {G: label_safe("Team A / " + "x" * 80), M: "2"},
    ),
    Case(
        "GPU fraction annotation alone selects the pod",
        pod(annotations={"muster.io/gpu-fraction": "0.5"}),
        {},
    ),
    Case(
        "KAI gpu-fraction alone selects the pod",
        pod(annotations={"gpu-fraction": "0.25"}),
        {},
    ),
    # -- queues -----------------------------------------------------------------------------
    Case(
        "namespace default-queue annotation",
        pod(gpu=1),
        {Q: "team-b"},
        ns=NamespaceMeta(annotations={"muster.io/default-queue": "team-b"}),
    ),
    Case(
        "pod queue beats the namespace default",
        pod(gpu=1, labels={"kai.scheduler/queue": "fast"}),
        {Q: "fast"},
        ns=NamespaceMeta(annotations={"muster.io/default-queue": "team-b"}),
    ),
    Case(
        "no queue anywhere: nothing written, the queue file decides",
        job_pod("nq"),
        {G: "nq", M: "1"},
        owners={(JOB, "nq"): job_obj("nq", 1)},
    ),
    Case(
        "a queue name that is no label value is not written",
        pod(gpu=1, annotations={"scheduling.volcano.sh/queue-name": "my queue"}),
        {},
        warnings=["queue 'my queue' (from scheduling.volcano.sh/queue-name) is not a valid"],
    ),
    Case(
        "unreadable namespace: no queue, with a warning",
        pod(gpu=1),
        {},
        ns=NamespaceMeta(problem="timed out"),
        warnings=["namespace ml unreadable (timed out); its muster.io/default-queue is unknown"],
    ),
    # -- which pods -------------------------------------------------------------------------
    Case("CPU pod in an unmanaged namespace", pod(), None, skipped="no GPU, gang or queue"),
    Case(
        "every pod of a managed namespace",
        pod(labels={"app": "web"}),
        {Q: "team-b"},
        ns=MANAGED_NS,
    ),
    Case(
        "pod without labels gets them as one map",
        pod(gpu=1, labels=None, annotations={"kai.scheduler/queue": "q"}),
        {Q: "q"},
    ),
    Case(
        "pod without labels and nothing to label gets only its scheduler",
        pod(gpu=1, labels=None),
        {},
    ),
    Case(
        "kube-system is never touched",
        pod(namespace="kube-system", gpu=1),
        None,
        skipped="namespace kube-system",
    ),
    Case(
        "Muster's own namespace is never touched",
        pod(namespace="muster-system", gpu=1, labels={G: "x"}),
        None,
        ns=MANAGED_NS,
        skipped="namespace muster-system",
    ),
    Case(
        "a configured Muster namespace is never touched",
        pod(namespace="sched", gpu=1),
        None,
        config=AdmissionConfig(muster_namespace="sched"),
        skipped="namespace sched",
    ),
    Case(
        "namespace opted out",
        pod(gpu=1, labels={G: "g"}),
        None,
        ns=NamespaceMeta(labels={"muster.io/managed": "false"}),
        skipped="namespace ml is labelled muster.io/managed=false",
    ),
    Case(
        "pod opted out",
        pod(gpu=1, labels={"muster.io/managed": "false"}),
        None,
        ns=MANAGED_NS,
        skipped="muster.io/managed=false",
    ),
    Case(
        "pod asking for another scheduler is left alone, with a warning",
        pod(gpu=1, scheduler="my-scheduler"),
        None,
        warnings=["asks for scheduler 'my-scheduler'; Muster leaves it alone"],
        skipped="scheduler",
    ),
    Case(
        "DaemonSet pods are node-bound",
        pod(gpu=1, owner=("apps/v1", "DaemonSet", "dcgm")),
        None,
        skipped="DaemonSet",
    ),
    Case(
        "bound pods are left alone",
        pod(gpu=1, node_name="node-1"),
        None,
        skipped="bound",
    ),
    Case(
        "a pod scheduled by Muster already changes only what is missing",
        pod(gpu=1, scheduler="muster"),
        {},
    ),
    Case(
        "a Deployment's GPU pod has no gang",
        pod(gpu=1, owner=("apps/v1", "ReplicaSet", "web-5d8f")),
        {},
    ),
    # -- partly classified: admitted, with the reason -----------------------------------------
    Case(
        "owner not found: no group",
        job_pod("gone"),
        {},
        owners={(JOB, "gone"): 'jobs.batch "gone" not found'},
        warnings=['cannot size Job ml/gone (jobs.batch "gone" not found); the pod is scheduled'],
    ),
    Case(
        "CRD not installed: no group",
        ray_pod("norc"),
        {},
        owners={(RAYCLUSTER, "norc"): "the API server does not serve rayclusters.ray.io/v1"},
        warnings=["cannot size RayCluster ml/norc (the API server does not serve"],
    ),
    Case(
        "malformed owner object: the field is named",
        pytorch_pod("bad"),
        {},
        owners={
            (PYTORCHJOB, "bad"): {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": "2"}}}}
        },
        warnings=["spec.pytorchReplicaSpecs.Worker.replicas: expected a non-negative integer"],
    ),
    Case(
        "staged JobSet without the pod's step",
        jobset_pod("st", "ghost"),
        {},
        owners={(JOBSET, "st"): jobset_obj("st", [("a", 1, 1), ("b", 1, 1)], depends=True)},
        warnings=["replicated job 'ghost', not one of ['a', 'b']"],
    ),
    Case(
        "bad convention min-member: group set, min-member not",
        pod(gpu=1, annotations=vc_annotations("vv", "zero")),
        {G: "vv"},
        warnings=["scheduling.volcano.sh/group-min-member='zero' is not a whole number"],
    ),
    Case(
        "bad explicit min-member is kept but flagged",
        pod(gpu=1, labels={G: "g", M: "-2"}),
        {G: "g", M: "-2"},
        warnings=["muster.io/min-member='-2' is not a whole number >= 1"],
    ),
    Case(
        "another Kubeflow kind Muster cannot size",
        pod(
            gpu=1,
            labels={"training.kubeflow.org/job-name": "tf"},
            owner=("kubeflow.org/v1", "TFJob", "tf"),
        ),  # fmt: skip
        {},
        warnings=["Muster cannot size a TFJob"],
    ),
    Case(
        "a rescaled Job keeps the min-member its live members agree on",
        job_pod("grow"),
        {G: "grow", M: "2"},
        owners={(JOB, "grow"): job_obj("grow", 4)},
        agreed={"grow": 2},
        warnings=["Job ml/grow now implies min-member 4", "keeps 2"],
    ),
]


class FakeOwners:
    """``OwnerFetch`` over a table; a string entry is the problem the API reported."""

    def __init__(self, table: Mapping[tuple[WorkloadKind, str], dict[str, Any] | str]) -> None:
        self.table = table
        self.calls: list[tuple[str, str, str]] = []

    def __call__(self, kind: WorkloadKind, namespace: str, name: str) -> Fetched:
        self.calls.append((kind.kind, namespace, name))
        entry = self.table.get((kind, name))
        if entry is None:
            return Fetched(None, f"{kind.resource} {name!r} {NOT_FOUND}")
        if isinstance(entry, str):
            return Fetched(None, entry)
        return Fetched(entry)


def admit(case: Case, obj: dict[str, Any]) -> Any:
    fetch = FakeOwners(case.owners)
    request = review(obj)["request"]
    result = mutate(
        request["object"],
        request["namespace"],
        case.ns,
        fetch,
        lambda ns, name: case.agreed.get(name),
        case.config,
        {g.ref: g for g in case.groups}.get,
    )
    return result, fetch


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_mutate(case: Case) -> None:
    result, fetch = admit(case, case.pod)
    assert len(fetch.calls) <= 1, f"the owner is read at most once: {fetch.calls}"
    for expected in case.warnings:
        assert any(expected in w for w in result.warnings), (expected, result.warnings)
    if not case.warnings:
        assert result.warnings == ()
    assert all(w.startswith("muster: ") for w in result.warnings)
    if case.want is None:
        assert result.patch == ()
        assert case.skipped and case.skipped in result.skipped
        return
    assert result.skipped == ""
    patched = apply_patch(case.pod, list(result.patch))
    assert patched["spec"]["schedulerName"] == case.config.scheduler_name
    assert muster_labels(patched) == case.want
    # Labels Muster does not own are kept.
    for key, value in (case.pod["metadata"].get("labels") or {}).items():
        assert patched["metadata"]["labels"][key] == value
    # Idempotent: the admitted pod, admitted again, needs nothing.
    again, _ = admit(case, patched)
    assert again.patch == ()


def test_paths_escape_slashes_and_tildes() -> None:
    assert escape_pointer("muster.io/pod-group") == "muster.io~1pod-group"
    assert escape_pointer("a~b/c") == "a~0b~1c"
    owner = job_obj("esc", 2, labels={"kueue.x-k8s.io/queue-name": "q"})
    case = Case("", job_pod("esc"), {}, owners={(JOB, "esc"): owner})
    result, _ = admit(case, case.pod)
    paths = sorted(op["path"] for op in result.patch)
    assert paths == [
        "/metadata/labels/muster.io~1min-member",
        "/metadata/labels/muster.io~1pod-group",
        "/metadata/labels/muster.io~1queue",
        "/spec/schedulerName",
    ]
    assert {op["op"] for op in result.patch if op["path"] == "/spec/schedulerName"} == {"replace"}


def test_pod_without_labels_gets_one_add_of_the_whole_map() -> None:
    case = Case("", job_pod("nol"), {}, owners={(JOB, "nol"): job_obj("nol", 2)})
    del case.pod["metadata"]["labels"]
    result, _ = admit(case, case.pod)
    assert [op for op in result.patch if op["path"].startswith("/metadata")] == [
        {"op": "add", "path": "/metadata/labels", "value": {G: "nol", M: "2"}}
    ]


def test_pod_without_scheduler_name_gets_an_add() -> None:
    obj = pod(gpu=1)
    del obj["spec"]["schedulerName"]
    result, _ = admit(Case("", obj, {}), obj)
    assert {"op": "add", "path": "/spec/schedulerName", "value": "muster"} in result.patch


def test_configured_scheduler_name() -> None:
    case = Case("", pod(gpu=1), {}, config=AdmissionConfig(scheduler_name="gpu-batch"))
    result, _ = admit(case, case.pod)
    assert apply_patch(case.pod, list(result.patch))["spec"]["schedulerName"] == "gpu-batch"
    assert result.values["schedulerName"] == "gpu-batch"


def test_owner_not_read_when_the_pod_says_everything() -> None:
    case = Case("", job_pod("full", labels={G: "full", M: "2", Q: "q"}), {})
    result, fetch = admit(case, case.pod)
    assert fetch.calls == []
    assert result.values == {"schedulerName": "muster", G: "full", M: "2", Q: "q"}


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"metadata": {"labels": {"a": 1}}, "spec": {}}, "request.object.metadata.labels.a"),
        ({"metadata": [], "spec": {}}, "request.object.metadata"),
        (
            {
                "metadata": {},
                "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "lots"}}}]},
            },  # fmt: skip
            "request.object.spec.containers[0].resources.limits.nvidia.com/gpu",
        ),
        (
            {"metadata": {"ownerReferences": {}}, "spec": {}},
            "request.object.metadata.ownerReferences",
        ),
        ("pod", "request.object"),
    ],
)
def test_malformed_pods_name_the_field(obj: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        mutate(obj, "ml", NamespaceMeta(), FakeOwners({}), lambda *_: None, CONFIG)
    assert exc.value.field == field


# -- workloads --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "owner", "expected"),
    [
        ({"trainer.kubeflow.org/trainjob-name": "t", "jobset.sigs.k8s.io/jobset-name": "t"},
         ("batch/v1", "Job", "t-node-0"), ("JobSet", "t", "TrainJob ml/t")),
        ({"jobset.sigs.k8s.io/jobset-name": "js"}, ("batch/v1", "Job", "js-w-0"),
         ("JobSet", "js", "JobSet ml/js")),
        ({"leaderworkerset.sigs.k8s.io/name": "l", "leaderworkerset.sigs.k8s.io/group-index": "3"},
         ("apps/v1", "StatefulSet", "l-3"), ("LeaderWorkerSet", "l", "LeaderWorkerSet ml/l-3")),
        ({"ray.io/cluster": "r"}, ("ray.io/v1", "RayCluster", "r"), ("RayCluster", "r",
                                                                     "RayCluster ml/r")),
        ({}, ("kubeflow.org/v1", "PyTorchJob", "p"), ("PyTorchJob", "p", "PyTorchJob ml/p")),
        ({}, ("batch/v1", "Job", "j"), ("Job", "j", "Job ml/j")),
        ({}, ("example.com/v1", "Job", "j"), None),
        ({}, ("apps/v1", "ReplicaSet", "rs"), None),
        ({}, None, None),
    ],
)  # fmt: skip
def test_workload_of(
    labels: dict[str, str], owner: tuple[str, str, str] | None, expected: Any
) -> None:
    refs = []
    if owner:
        refs = [{"apiVersion": owner[0], "kind": owner[1], "name": owner[2], "controller": True}]
    ref = workload_of("ml", labels, refs)
    got = None if ref is None else (ref.kind.kind, ref.name, ref.workload)
    assert got == expected


def test_non_controller_owner_is_not_the_workload() -> None:
    refs = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "controller": False}]
    assert workload_of("ml", {}, refs) is None


@pytest.mark.parametrize(
    ("kind", "obj", "size"),
    [
        (JOB, job_obj("j", parallelism=0, completions=3), None),
        (JOB, {"spec": {"parallelism": True}}, None),
        (JOBSET, jobset_obj("js", []), None),
        (JOBSET, jobset_obj("js", [("a", 3, 2)]), 6),
        (PYTORCHJOB, {"spec": {"pytorchReplicaSpecs": {"Master": {}, "Worker": {}}}}, 2),
        (RAYCLUSTER, raycluster_obj("r", []), 1),
        (RAYCLUSTER, raycluster_obj("r", [{"replicas": 0, "minReplicas": 0}]), 1),
        (LEADERWORKERSET, lws_obj("l", size=0), 1),
    ],
)
def test_gang_sizes(kind: WorkloadKind, obj: dict[str, Any], size: int | None) -> None:
    ref = WorkloadRef(kind, "ml", "x", f"{kind.kind} ml/x", "x")
    if size is None:
        with pytest.raises(InvalidInput):
            gang_of(ref, obj, {})
    else:
        assert gang_of(ref, obj, {}).min_member == size


# -- validate ---------------------------------------------------------------------------------


def member(name: str, labels: dict[str, str], *, ns: str = "ml", phase: str = "Pending",
           deleting: bool = False) -> Pod:  # fmt: skip
    return Pod(uid=f"uid-{name}", namespace=ns, name=name, requests=Resources(), labels=labels,
               phase=phase, deleting=deleting)  # fmt: skip


@dataclass
class VCase:
    name: str
    pod: dict[str, Any]
    members: list[Pod] = field(default_factory=list)
    rejected: str = ""  # a substring of the rejection message; "" means allowed


VCASES = [
    VCase("no group", pod(gpu=1)),
    VCase("group without min-member yet", pod(labels={G: "g"})),
    VCase("consistent", pod(labels={G: "g", M: "2", keys.MAX_MEMBER: "4"})),
    VCase(
        "min-member above max-member",
        pod(labels={G: "g", M: "4", keys.MAX_MEMBER: "2"}),
        rejected="muster.io/max-member=2 is below the min-member 4",
    ),
    VCase(
        "min-member that does not parse",
        pod(labels={G: "g", M: "two"}),
        rejected="muster.io/min-member='two' is not a whole number",
    ),
    VCase(
        "convention min-member below 1",
        pod(annotations=vc_annotations("v", "0")),
        rejected="must be at least 1",
    ),
    VCase(
        "agrees with the live members",
        pod(labels={G: "g", M: "2"}),
        members=[member("a", {G: "g", M: "2"}), member("b", {G: "g", M: "2"})],
    ),
    VCase(
        "differs from the live members",
        pod(labels={G: "g", M: "3"}),
        members=[member("a", {G: "g", M: "2"}), member("b", {G: "g", M: "2"})],
        rejected="this pod says min-member 3 but the gang's live members disagree (2 say 2)",
    ),
    VCase(
        "max-member differs from the live members",
        pod(labels={G: "g", M: "2", keys.MAX_MEMBER: "8"}),
        members=[member("a", {G: "g", M: "2", keys.MAX_MEMBER: "4"})],
        rejected="max-member 8",
    ),
    VCase(
        "members under another convention count",
        pod(labels={G: "vc", M: "3"}),
        members=[
            member(
                "a",
                {
                    "scheduling.k8s.io/group-name": "vc",
                    "scheduling.volcano.sh/group-min-member": "2",
                },
            )
        ],  # fmt: skip
        rejected="min-member 3",
    ),
    VCase(
        "finished, terminating, other-namespace and other-gang pods do not count",
        pod(labels={G: "g", M: "3"}),
        members=[
            member("done", {G: "g", M: "2"}, phase="Succeeded"),
            member("dying", {G: "g", M: "2"}, deleting=True),
            member("elsewhere", {G: "g", M: "2"}, ns="other"),
            member("other", {G: "h", M: "2"}),
            member("mentions", {"note": "g", M: "2"}),
        ],
    ),
    VCase("a valid GPU share", pod(annotations={"muster.io/gpu-fraction": "0.5"})),
    VCase(
        "a GPU share above one GPU",
        pod(annotations={"muster.io/gpu-fraction": "1.5"}),
        rejected="metadata.annotations[muster.io/gpu-fraction]: expected a share of one GPU",
    ),
    VCase(
        "a GPU share and whole GPUs",
        pod(gpu=1, labels={"gpu-fraction": "0.5"}),
        rejected="metadata.labels[gpu-fraction]: a GPU share cannot be combined",
    ),
    VCase(
        "kube-system is not judged",
        pod(namespace="kube-system", labels={G: "g", M: "4", keys.MAX_MEMBER: "2"}),
    ),
    VCase(
        "another scheduler's pods are not judged",
        pod(scheduler="my-scheduler", labels={G: "g", M: "4", keys.MAX_MEMBER: "2"}),
    ),
]


@pytest.mark.parametrize("case", VCASES, ids=lambda c: c.name)
def test_validate(case: VCase) -> None:
    request = review(case.pod)["request"]
    verdict = validate(request["object"], request["namespace"], lambda ns, g: case.members, CONFIG)
    assert verdict.ok == (not case.rejected), verdict.reason
    assert case.rejected in verdict.reason


def test_agreed_min_member() -> None:
    pods = [member("a", {G: "g", M: "2"}), member("b", {G: "g", M: "2"}), member("c", {G: "h"})]
    assert agreed_min_member(pods, "ml", "g") == 2
    assert agreed_min_member(pods, "ml", "h") is None
    assert agreed_min_member([*pods, member("d", {G: "g", M: "3"})], "ml", "g") is None
    assert agreed_min_member(pods, "other", "g") is None


SHARE_SPECS = [
    # (first container's resources, expected after the patch)
    (None, {"requests": {"muster.io/gpu-share": "1"}, "limits": {"muster.io/gpu-share": "1"}}),
    ({}, {"requests": {"muster.io/gpu-share": "1"}, "limits": {"muster.io/gpu-share": "1"}}),
    (
        {"requests": {"cpu": "1"}},
        {
            "requests": {"cpu": "1", "muster.io/gpu-share": "1"},
            "limits": {"muster.io/gpu-share": "1"},
        },
    ),
    (
        {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}},
        {
            "requests": {"cpu": "1", "muster.io/gpu-share": "1"},
            "limits": {"memory": "1Gi", "muster.io/gpu-share": "1"},
        },
    ),
]


@pytest.mark.parametrize(("resources", "expected"), SHARE_SPECS)
def test_gpu_share_pods_get_the_marker_resource_once(resources: Any, expected: Any) -> None:
    from app.core.admission.pods import share_resource_ops
    from tests.reviews import apply_patch

    container: dict[str, Any] = {"name": "main", "image": "x"}
    if resources is not None:
        container["resources"] = resources
    doc = {"spec": {"containers": [container, {"name": "side", "image": "y"}]}}
    annotations = {"muster.io/gpu-fraction": "0.5"}
    patched = apply_patch(doc, share_resource_ops(doc["spec"], {}, annotations))
    assert patched["spec"]["containers"][0]["resources"] == expected
    assert "resources" not in patched["spec"]["containers"][1]
    assert share_resource_ops(patched["spec"], {}, annotations) == []  # idempotent
    assert share_resource_ops(doc["spec"], {}, {}) == []  # only for GPU-share pods
