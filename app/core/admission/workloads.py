"""The batch workloads Muster recognises behind a pod, and the gang each one implies.

Job controllers mark the pods they create: some with a label naming the workload (JobSet,
Kubeflow TrainJob, LeaderWorkerSet, KubeRay), others only with their controlling
``ownerReference`` (batch Job, Kubeflow PyTorchJob). ``workload_of`` finds the workload from a
pod's metadata; ``gang_of`` computes the gang (name and min-member) from the workload object's
API JSON, which the webhook reads through ``app.k8s.owners``. Both are pure.

How each workload's gang is sized (the size lives on the object, never on the pod):

* batch Job: its active pods, ``parallelism`` (default 1) capped by ``completions``.
* JobSet: every replicated job's ``replicas`` x its Job's active pods, summed. A *staged* JobSet
  (``startupPolicyOrder: InOrder`` or any ``dependsOn``) creates later jobs only once earlier ones
  run, so one gang over all of them could never assemble: there each replicated job is its own
  gang, named ``<jobset>-<replicated job>``.
* TrainJob: the JobSet the trainer creates for it (same name) holds the runtime's resolved
  shape (``numNodes``, initializers), so it is sized as that JobSet.
* PyTorchJob: ``runPolicy.schedulingPolicy.minAvailable`` when set (the operator's own gang
  size), else the sum of ``pytorchReplicaSpecs[*].replicas``; ``schedulingPolicy.queue`` names
  a queue.
* RayCluster: the head plus, per worker group that is not suspended, ``minReplicas`` (or
  ``replicas`` when no minimum is set) x ``numOfHosts`` - what KubeRay's own gang integrations
  ask for.
* LeaderWorkerSet: each replica group (leader + workers) is a gang of
  ``leaderWorkerTemplate.size``, named ``<lws>-<group index>``. With ``startupPolicy:
  LeaderReady`` workers are created only once the leader runs, so the gang cannot be held
  back for them: min-member is then 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.model.errors import InvalidInput
from app.core.model.parse import json_list, json_object


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    """An API resource that owns gang-scheduled pods."""

    kind: str
    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        """``group/version`` (``v1``-style for the core group)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """``plural.group`` as RBAC and error messages name it."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


JOB = WorkloadKind("Job", "batch", "v1", "jobs")
JOBSET = WorkloadKind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets")
PYTORCHJOB = WorkloadKind("PyTorchJob", "kubeflow.org", "v1", "pytorchjobs")
RAYCLUSTER = WorkloadKind("RayCluster", "ray.io", "v1", "rayclusters")
LEADERWORKERSET = WorkloadKind(
    "LeaderWorkerSet", "leaderworkerset.x-k8s.io", "v1", "leaderworkersets"
)
#: Every kind the webhook may read (deploy/ grants get/list/watch on each).
KINDS: tuple[WorkloadKind, ...] = (JOB, JOBSET, PYTORCHJOB, RAYCLUSTER, LEADERWORKERSET)

# Pod labels the controllers set, in the order ``workload_of`` consults them.
TRAINJOB_NAME = "trainer.kubeflow.org/trainjob-name"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
RAY_CLUSTER = "ray.io/cluster"

#: Owners whose pods are not batch work: the webhook leaves them alone.
NODE_BOUND_OWNERS = frozenset({"DaemonSet", "Node"})


@dataclass(frozen=True, slots=True)
class WorkloadRef:
    """The workload a pod belongs to, and the object that holds its gang size.

    ``name`` is the object to read (of ``kind``); ``workload`` names the workload as users know
    it (``"TrainJob ml/llama"``); ``base`` is the gang name before any per-stage suffix.
    """

    kind: WorkloadKind
    namespace: str
    name: str
    workload: str
    base: str


@dataclass(frozen=True, slots=True)
class WorkloadGang:
    """The gang a workload implies for one of its pods.

    ``queue`` is a queue named by the workload's spec (not its labels), or ``""``; ``basis``
    says where min-member came from, for messages (``"parallelism 4"``).
    """

    name: str
    min_member: int
    queue: str = ""
    basis: str = ""


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def controller_of(owner_refs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The ownerReference with ``controller: true``, if any."""
    for ref in owner_refs:
        if ref.get("controller") is True:
            return ref
    return None


def _api_group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def workload_of(
    namespace: str, labels: Mapping[str, str], owner_refs: Sequence[Mapping[str, Any]]
) -> WorkloadRef | None:
    """The workload behind a pod with these labels and ownerReferences, if Muster knows it.

    Labels are consulted before owners because JobSet, TrainJob and LeaderWorkerSet pods are
    owned by intermediate objects (a Job, a StatefulSet) that do not describe the whole gang.
    """

    def ref(kind: WorkloadKind, name: str, workload: str, base: str = "") -> WorkloadRef:
        return WorkloadRef(kind, namespace, name, f"{workload} {namespace}/{base or name}",
                           base or name)  # fmt: skip

    trainjob = labels.get(TRAINJOB_NAME)
    if trainjob:
        return ref(JOBSET, labels.get(JOBSET_NAME) or trainjob, "TrainJob", trainjob)
    jobset = labels.get(JOBSET_NAME)
    if jobset:
        return ref(JOBSET, jobset, "JobSet")
    lws = labels.get(LWS_NAME)
    if lws:
        index = labels.get(LWS_GROUP_INDEX)
        base = f"{lws}-{index}" if index else labels.get(LWS_GROUP_KEY, "")
        return ref(LEADERWORKERSET, lws, "LeaderWorkerSet", base) if base else None
    ray = labels.get(RAY_CLUSTER)
    if ray:
        return ref(RAYCLUSTER, ray, "RayCluster")
    owner = controller_of(owner_refs)
    if owner is None:
        return None
    kind, name = _str(owner.get("kind")), _str(owner.get("name"))
    group = _api_group(_str(owner.get("apiVersion")))
    if not name:
        return None
    if kind == "PyTorchJob" and group == PYTORCHJOB.group:
        return ref(PYTORCHJOB, name, "PyTorchJob")
    if kind == "Job" and group == JOB.group:
        return ref(JOB, name, "Job")
    return None


# -- sizing ---------------------------------------------------------------------------------


def _count(value: Any, field: str, default: int | None) -> int | None:
    """A non-negative integer field (``default`` when absent)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(field, f"expected a non-negative integer, got {value!r}")
    return value


def _pods_per_job(job_spec: Mapping[str, Any], field: str) -> int:
    """How many pods a Job runs at once: ``parallelism`` (default 1) capped by ``completions``."""
    parallelism = _count(job_spec.get("parallelism"), f"{field}.parallelism", 1)
    completions = _count(job_spec.get("completions"), f"{field}.completions", None)
    assert parallelism is not None
    return parallelism if completions is None else min(parallelism, completions)


def _job(ref: WorkloadRef, obj: Mapping[str, Any]) -> WorkloadGang:
    pods = _pods_per_job(json_object(obj.get("spec"), "spec"), "spec")
    return WorkloadGang(ref.base, pods, basis=f"{pods} pods at a time (parallelism)")


def _jobset(ref: WorkloadRef, obj: Mapping[str, Any], labels: Mapping[str, str]) -> WorkloadGang:
    spec = json_object(obj.get("spec"), "spec")
    sizes: dict[str, int] = {}
    staged = json_object(spec.get("startupPolicy"), "spec.startupPolicy").get(
        "startupPolicyOrder"
    ) == ("InOrder")
    for i, item in enumerate(json_list(spec.get("replicatedJobs"), "spec.replicatedJobs")):
        field = f"spec.replicatedJobs[{i}]"
        item = json_object(item, field)
        replicas = _count(item.get("replicas"), f"{field}.replicas", 1)
        template = json_object(item.get("template"), f"{field}.template")
        job_spec = json_object(template.get("spec"), f"{field}.template.spec")
        assert replicas is not None
        sizes[_str(item.get("name"))] = replicas * _pods_per_job(job_spec, f"{field}.template.spec")
        staged = staged or bool(json_list(item.get("dependsOn"), f"{field}.dependsOn"))
    if not sizes:
        raise InvalidInput("spec.replicatedJobs", "no replicated jobs")
    if not staged:
        total = sum(sizes.values())
        return WorkloadGang(ref.base, total, basis=f"{total} pods in {len(sizes)} replicated jobs")
    step = labels.get(REPLICATED_JOB, "")
    if step not in sizes:
        raise InvalidInput(
            REPLICATED_JOB,
            f"staged JobSet (each replicated job is its own gang) but the pod names "
            f"replicated job {step!r}, not one of {sorted(sizes)}",
        )
    return WorkloadGang(
        f"{ref.base}-{step}", sizes[step], basis=f"{sizes[step]} pods of staged step {step}"
    )


def _pytorchjob(ref: WorkloadRef, obj: Mapping[str, Any]) -> WorkloadGang:
    spec = json_object(obj.get("spec"), "spec")
    policy_field = "spec.runPolicy.schedulingPolicy"
    run_policy = json_object(spec.get("runPolicy"), "spec.runPolicy")
    policy = json_object(run_policy.get("schedulingPolicy"), policy_field)
    queue = _str(policy.get("queue"))
    min_available = _count(policy.get("minAvailable"), f"{policy_field}.minAvailable", None)
    if min_available:
        return WorkloadGang(ref.base, min_available, queue, "schedulingPolicy.minAvailable")
    replica_specs = json_object(spec.get("pytorchReplicaSpecs"), "spec.pytorchReplicaSpecs")
    total = 0
    for role, replica in replica_specs.items():
        field = f"spec.pytorchReplicaSpecs.{role}"
        count = _count(json_object(replica, field).get("replicas"), f"{field}.replicas", 1)
        assert count is not None
        total += count
    if total == 0:
        raise InvalidInput("spec.pytorchReplicaSpecs", "no replicas")
    return WorkloadGang(ref.base, total, queue, f"{total} replicas")


def _raycluster(ref: WorkloadRef, obj: Mapping[str, Any]) -> WorkloadGang:
    spec = json_object(obj.get("spec"), "spec")
    total = 1  # the head
    for i, group in enumerate(json_list(spec.get("workerGroupSpecs"), "spec.workerGroupSpecs")):
        field = f"spec.workerGroupSpecs[{i}]"
        group = json_object(group, field)
        if group.get("suspend") is True or group.get("suspended") is True:
            continue
        replicas = _count(group.get("replicas"), f"{field}.replicas", 0)
        minimum = _count(group.get("minReplicas"), f"{field}.minReplicas", 0)
        hosts = _count(group.get("numOfHosts"), f"{field}.numOfHosts", 1)
        assert replicas is not None and minimum is not None and hosts is not None
        total += (minimum or replicas) * hosts
    return WorkloadGang(ref.base, total, basis=f"head + {total - 1} workers")


def _leaderworkerset(ref: WorkloadRef, obj: Mapping[str, Any]) -> WorkloadGang:
    spec = json_object(obj.get("spec"), "spec")
    template = json_object(spec.get("leaderWorkerTemplate"), "spec.leaderWorkerTemplate")
    size = _count(template.get("size"), "spec.leaderWorkerTemplate.size", 1)
    assert size is not None
    if spec.get("startupPolicy") == "LeaderReady":
        return WorkloadGang(
            ref.base, 1, basis="startupPolicy LeaderReady: workers follow the leader"
        )
    return WorkloadGang(ref.base, max(size, 1), basis=f"group size {size}")


def gang_of(ref: WorkloadRef, obj: Mapping[str, Any], labels: Mapping[str, str]) -> WorkloadGang:
    """The gang ``ref``'s object (its API JSON) implies for a pod with these labels.

    Raises ``InvalidInput`` (field path inside the object) when the object cannot say.
    """
    if ref.kind == JOB:
        gang = _job(ref, obj)
    elif ref.kind == JOBSET:
        gang = _jobset(ref, obj, labels)
    elif ref.kind == PYTORCHJOB:
        gang = _pytorchjob(ref, obj)
    elif ref.kind == RAYCLUSTER:
        gang = _raycluster(ref, obj)
    elif ref.kind == LEADERWORKERSET:
        gang = _leaderworkerset(ref, obj)
    else:
        raise InvalidInput("kind", f"Muster cannot size a {ref.kind.kind}")
    if gang.min_member < 1:
        raise InvalidInput("spec", f"the workload runs no pods now ({gang.basis})")
    return gang


# -- the pods a workload creates (what-if) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberTemplate:
    """``count`` pods made from ``template`` (a pod template's API JSON) in role ``role``."""

    role: str
    count: int
    template: Mapping[str, Any]


def kind_of(obj: Mapping[str, Any]) -> WorkloadKind:
    """The workload kind of an object's ``apiVersion`` and ``kind``; ``InvalidInput`` naming
    the kinds Muster knows otherwise."""
    kind, group = _str(obj.get("kind")), _api_group(_str(obj.get("apiVersion")))
    for known in KINDS:
        if known.kind == kind and known.group == group:
            return known
    names = ", ".join(f"{k.api_version} {k.kind}" for k in KINDS)
    raise InvalidInput("kind", f"{obj.get('apiVersion')} {kind or '?'} is not one of {names}")


def member_templates(kind: WorkloadKind, obj: Mapping[str, Any]) -> list[MemberTemplate]:
    """The pods ``obj`` creates when it starts, per role (a staged JobSet: its first step;
    a LeaderWorkerSet: one group). Every template is listed, those of roles that start no pod
    now (a later step, a suspended or empty group) with count 0, so a caller can check them
    all. ``InvalidInput`` names the field that cannot say, or says the workload runs no pods."""
    spec = json_object(obj.get("spec"), "spec")
    out: list[MemberTemplate] = []
    if kind == JOB:
        out.append(MemberTemplate("", _pods_per_job(spec, "spec"), _template(spec, "spec")))
    elif kind == JOBSET:
        items = json_list(spec.get("replicatedJobs"), "spec.replicatedJobs")
        staged = _staged(spec, items)
        for i, item in enumerate(items):
            field = f"spec.replicatedJobs[{i}]"
            item = json_object(item, field)
            replicas = _count(item.get("replicas"), f"{field}.replicas", 1) or 0
            job = json_object(json_object(item.get("template"), f"{field}.template").get("spec"),
                              f"{field}.template.spec")  # fmt: skip
            count = replicas * _pods_per_job(job, f"{field}.template.spec")
            # Later steps of a staged JobSet start once this one runs: gangs of their own.
            count = 0 if staged and i > 0 else count
            out.append(MemberTemplate(_str(item.get("name")) or str(i), count,
                                      _template(job, f"{field}.template.spec")))  # fmt: skip
    elif kind == PYTORCHJOB:
        roles = json_object(spec.get("pytorchReplicaSpecs"), "spec.pytorchReplicaSpecs")
        for role, replica in roles.items():
            field = f"spec.pytorchReplicaSpecs.{role}"
            replica = json_object(replica, field)
            count = _count(replica.get("replicas"), f"{field}.replicas", 1) or 0
            out.append(MemberTemplate(role.lower(), count, _template(replica, field)))
    elif kind == RAYCLUSTER:
        head = json_object(spec.get("headGroupSpec"), "spec.headGroupSpec")
        out.append(MemberTemplate("head", 1, _template(head, "spec.headGroupSpec")))
        for i, group in enumerate(json_list(spec.get("workerGroupSpecs"), "spec.workerGroupSpecs")):
            field = f"spec.workerGroupSpecs[{i}]"
            group = json_object(group, field)
            suspended = group.get("suspend") is True or group.get("suspended") is True
            replicas = _count(group.get("replicas"), f"{field}.replicas", 0) or 0
            minimum = _count(group.get("minReplicas"), f"{field}.minReplicas", 0) or 0
            hosts = _count(group.get("numOfHosts"), f"{field}.numOfHosts", 1) or 1
            role = _str(group.get("groupName")) or f"worker{i}"
            count = 0 if suspended else (minimum or replicas) * hosts
            out.append(MemberTemplate(role, count, _template(group, field)))
    elif kind == LEADERWORKERSET:
        field = "spec.leaderWorkerTemplate"
        template = json_object(spec.get(field.split(".")[1]), field)
        size = _count(template.get("size"), f"{field}.size", 1) or 1
        workers = json_object(template.get("workerTemplate"), f"{field}.workerTemplate")
        leader = template.get("leaderTemplate")
        out.append(MemberTemplate("leader", 1, leader if isinstance(leader, Mapping) else workers))
        out.append(MemberTemplate("worker", size - 1, workers))
    if not any(t.count > 0 for t in out):
        raise InvalidInput("spec", f"the {kind.kind} runs no pods")
    return out


def _template(holder: Mapping[str, Any], field: str) -> Mapping[str, Any]:
    template = json_object(holder.get("template"), f"{field}.template")
    json_object(template.get("spec"), f"{field}.template.spec")
    return template


def _staged(spec: Mapping[str, Any], items: Sequence[Any]) -> bool:
    order = json_object(spec.get("startupPolicy"), "spec.startupPolicy").get("startupPolicyOrder")
    return order == "InOrder" or any(
        isinstance(item, Mapping) and item.get("dependsOn") for item in items
    )
