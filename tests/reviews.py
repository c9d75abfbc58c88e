"""Factories for admission tests: AdmissionReviews, pods as each job controller creates them,
the workload objects behind them, and a small JSONPatch applier.

Every review starts from ``fixtures/admissionreview-v1-pod-create.json``, a request captured
from a real kube-apiserver 1.20.2 (a pod created with an ownerReference to a Job); the factories
swap in the pod's metadata and resources, keeping the defaulted spec the API server sends.
Pod labels are the ones each controller sets (Job, JobSet, Kubeflow trainer and training
operator, KubeRay, LeaderWorkerSet).
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

FIXTURE = Path(__file__).parent / "fixtures" / "admissionreview-v1-pod-create.json"
GPU = "nvidia.com/gpu"


@cache
def _captured() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def review(pod: dict[str, Any], namespace: str | None = None, uid: str = "") -> dict[str, Any]:
    """A CREATE pods AdmissionReview (admission.k8s.io/v1) carrying ``pod``."""
    body = copy.deepcopy(_captured())
    request = body["request"]
    request["namespace"] = namespace or pod["metadata"].get("namespace", "default")
    if uid:
        request["uid"] = uid
    request["object"] = pod
    return body


def pod(
    *,
    namespace: str = "ml",
    name: str = "",
    generate_name: str = "",
    gpu: int = 0,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owner: tuple[str, str, str] | None = None,
    scheduler: str = "default-scheduler",
    node_name: str = "",
) -> dict[str, Any]:
    """A pod as ``request.object`` holds it: the captured pod's defaulted spec, new metadata.

    ``owner`` is ``(apiVersion, kind, name)`` of the controlling ownerReference.
    """
    obj = copy.deepcopy(_captured()["request"]["object"])
    meta: dict[str, Any] = {"namespace": namespace, "creationTimestamp": None}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = generate_name or "pod-"
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    if owner is not None:
        api_version, kind, owner_name = owner
        meta["ownerReferences"] = [
            {
                "apiVersion": api_version,
                "kind": kind,
                "name": owner_name,
                "uid": f"{owner_name}-uid",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    obj["metadata"] = meta
    container = obj["spec"]["containers"][0]
    container["resources"] = {"requests": {"cpu": "1"}}
    if gpu:
        container["resources"]["requests"][GPU] = str(gpu)
        container["resources"]["limits"] = {GPU: str(gpu)}
    obj["spec"]["schedulerName"] = scheduler
    if node_name:
        obj["spec"]["nodeName"] = node_name
    return obj


# -- pods as the controllers create them ----------------------------------------------------


def job_pod(job: str, *, gpu: int = 1, namespace: str = "ml", **extra: Any) -> dict[str, Any]:
    """A pod of batch Job ``job`` (labels of the 1.27+ Job controller)."""
    labels = {
        "batch.kubernetes.io/controller-uid": f"{job}-uid",
        "batch.kubernetes.io/job-name": job,
        "controller-uid": f"{job}-uid",
        "job-name": job,
        **extra.pop("labels", {}),
    }
    return pod(namespace=namespace, generate_name=f"{job}-", gpu=gpu, labels=labels,
               owner=("batch/v1", "Job", job), **extra)  # fmt: skip


def jobset_pod(
    jobset: str, step: str, index: int = 0, *, gpu: int = 1, trainjob: str = "", **extra: Any
) -> dict[str, Any]:
    """A pod of replicated job ``step`` of JobSet ``jobset`` (owned by the child Job)."""
    job = f"{jobset}-{step}-{index}"
    labels = {
        "jobset.sigs.k8s.io/jobset-name": jobset,
        "jobset.sigs.k8s.io/replicatedjob-name": step,
        "jobset.sigs.k8s.io/replicatedjob-replicas": "2",
        "jobset.sigs.k8s.io/job-index": str(index),
        "jobset.sigs.k8s.io/job-key": "0f3a9c" * 6,
        "job-name": job,
        "batch.kubernetes.io/job-name": job,
        **extra.pop("labels", {}),
    }
    if trainjob:
        labels["trainer.kubeflow.org/trainjob-name"] = trainjob
    return pod(generate_name=f"{job}-", gpu=gpu, labels=labels,
               owner=("batch/v1", "Job", job), **extra)  # fmt: skip


def pytorch_pod(job: str, role: str = "worker", index: int = 0, *, gpu: int = 1) -> dict[str, Any]:
    """A pod of Kubeflow PyTorchJob ``job`` (training-operator v1 labels)."""
    labels = {
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/replica-type": role,
        "training.kubeflow.org/replica-index": str(index),
    }
    return pod(name=f"{job}-{role}-{index}", gpu=gpu, labels=labels,
               owner=("kubeflow.org/v1", "PyTorchJob", job))  # fmt: skip


def ray_pod(cluster: str, group: str = "gpu-workers", *, gpu: int = 1) -> dict[str, Any]:
    """A worker pod of KubeRay RayCluster ``cluster``."""
    labels = {
        "ray.io/cluster": cluster,
        "ray.io/node-type": "worker",
        "ray.io/group": group,
        "ray.io/is-ray-node": "yes",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    return pod(generate_name=f"{cluster}-{group}-worker-", gpu=gpu, labels=labels,
               owner=("ray.io/v1", "RayCluster", cluster))  # fmt: skip


def lws_pod(lws: str, group_index: int, worker_index: int = 0, *, gpu: int = 1) -> dict[str, Any]:
    """A pod of LeaderWorkerSet ``lws`` (owned by the leader or worker StatefulSet)."""
    labels = {
        "leaderworkerset.sigs.k8s.io/name": lws,
        "leaderworkerset.sigs.k8s.io/group-index": str(group_index),
        "leaderworkerset.sigs.k8s.io/group-key": "5d0c1b7f" * 5,
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker_index),
    }
    owner = lws if worker_index == 0 else f"{lws}-{group_index}"
    return pod(name=f"{lws}-{group_index}" + (f"-{worker_index}" if worker_index else ""),
               gpu=gpu, labels=labels, annotations={"leaderworkerset.sigs.k8s.io/size": "4"},
               owner=("apps/v1", "StatefulSet", owner))  # fmt: skip


# -- the workload objects (API JSON as a GET returns it) -----------------------------------


def _object(api_version: str, kind: str, name: str, spec: dict[str, Any], **meta: Any) -> dict:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": name, "namespace": "ml", "uid": f"{name}-uid", **meta},
        "spec": spec,
    }


def _job_template(parallelism: int | None = None, completions: int | None = None) -> dict:
    spec: dict[str, Any] = {
        "backoffLimit": 0,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m"}]}},
    }
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    return spec


def job_obj(name: str, parallelism: int | None = None, completions: int | None = None,
            **meta: Any) -> dict:  # fmt: skip
    """A batch/v1 Job."""
    return _object("batch/v1", "Job", name, _job_template(parallelism, completions), **meta)


def jobset_obj(name: str, steps: list[tuple[str, int, int]], *, depends: bool = False,
               in_order: bool = False, **meta: Any) -> dict:  # fmt: skip
    """A JobSet; ``steps`` are ``(replicated job, replicas, parallelism)``; ``depends`` makes
    each step depend on the previous one (a Kubeflow trainer runtime with initializers)."""
    jobs = []
    for i, (step, replicas, parallelism) in enumerate(steps):
        item: dict[str, Any] = {
            "name": step,
            "replicas": replicas,
            "template": {"spec": _job_template(parallelism, parallelism)},
        }
        if depends and i:
            item["dependsOn"] = [{"name": steps[i - 1][0], "status": "Complete"}]
        jobs.append(item)
    spec: dict[str, Any] = {"replicatedJobs": jobs, "network": {"enableDNSHostnames": True}}
    if in_order:
        spec["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    return _object("jobset.x-k8s.io/v1alpha2", "JobSet", name, spec, **meta)


def pytorchjob_obj(name: str, master: int = 1, workers: int = 3, *, min_available: int = 0,
                   queue: str = "") -> dict:  # fmt: skip
    """A kubeflow.org/v1 PyTorchJob."""
    spec: dict[str, Any] = {
        "pytorchReplicaSpecs": {
            "Master": {"replicas": master, "restartPolicy": "OnFailure", "template": {}},
            "Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": {}},
        },
        "runPolicy": {"cleanPodPolicy": "None"},
    }
    policy: dict[str, Any] = {}
    if min_available:
        policy["minAvailable"] = min_available
    if queue:
        policy["queue"] = queue
    if policy:
        spec["runPolicy"]["schedulingPolicy"] = policy
    return _object("kubeflow.org/v1", "PyTorchJob", name, spec)


def raycluster_obj(name: str, groups: list[dict[str, Any]]) -> dict:
    """A ray.io/v1 RayCluster with these worker groups."""
    spec = {
        "headGroupSpec": {"rayStartParams": {}, "template": {}},
        "workerGroupSpecs": [{"rayStartParams": {}, "template": {}, **g} for g in groups],
    }
    return _object("ray.io/v1", "RayCluster", name, spec)


def lws_obj(name: str, size: int, replicas: int = 2, startup: str = "") -> dict:
    """A leaderworkerset.x-k8s.io/v1 LeaderWorkerSet."""
    spec: dict[str, Any] = {
        "replicas": replicas,
        "leaderWorkerTemplate": {"size": size, "workerTemplate": {}},
    }
    if startup:
        spec["startupPolicy"] = startup
    return _object("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", name, spec)


# -- JSONPatch -------------------------------------------------------------------------------


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply RFC 6902 ``add``/``replace`` operations on object members; return a new doc.

    Strict like the API server: ``replace`` needs the member, ``add`` needs the parent.
    """
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [_unescape(t) for t in op["path"].split("/")[1:]]
        target = doc
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        if op["op"] == "replace" and last not in target:
            raise KeyError(f"replace of missing {op['path']}")
        if op["op"] not in ("add", "replace"):
            raise ValueError(f"unexpected op {op['op']}")
        if isinstance(target, list):
            raise ValueError(f"unexpected add into a list at {op['path']}")
        target[last] = op["value"]
    return doc
