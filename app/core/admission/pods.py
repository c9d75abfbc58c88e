"""Admission: what the mutating and validating webhooks decide about a pod being created.

``mutate`` is a pure function of the pod (AdmissionReview ``request.object``), its namespace's
labels and annotations, a callback that reads workload objects, and the configuration. It
returns the JSONPatch that gives the pod Muster's scheduler and metadata, plus warnings.

Which pods: those requesting ``nvidia.com/gpu`` or carrying a GPU-fraction key, those with any
group or queue key Muster understands (``app.core.model.labels``), and every pod of a namespace
labelled ``muster.io/managed=true``. Never pods in kube-system or Muster's own namespace, pods
or namespaces labelled ``muster.io/managed=false``, pods already bound (``spec.nodeName``),
DaemonSet pods, or pods that ask for a scheduler Muster does not take over
(``AdmissionConfig.take_over``).

What it sets, each only when the pod does not say it already (label or annotation):

* ``spec.schedulerName``: the configured name (``muster``).
* ``muster.io/pod-group``: the first of: Muster's own key (kept as is); another scheduler's
  group key (``GROUP_CONVENTIONS`` order); the workload behind the pod
  (``app.core.admission.workloads``).
* ``muster.io/min-member``: from the same source as the group - the convention's min-member
  key, or the workload's size when the workload is that group. A size derived from a workload
  is sticky: when live members of the gang already agree on a min-member, new members get the
  same one (a Job rescaled mid-flight must not split its gang).
* ``muster.io/queue``: the pod's own queue key; else a queue key on the workload object (Kueue
  labels Jobs, not their pods) or a queue its spec names; else the namespace's
  ``muster.io/default-queue`` annotation. Otherwise nothing is written: the queue file's
  ``namespaces`` map and ``defaultQueue`` (``app.core.model.queues``) then decide at scheduling
  time, and stay hot-reloadable instead of being frozen into the pod at creation.

A pod that cannot be fully classified is admitted anyway - unmodified or partly tagged - with
a warning saying why: the webhook never blocks pod creation for reasons of its own. Keys
already present are never rewritten, so admitting a mutated pod again yields no patch.

``validate`` is the optional second webhook: it rejects pods whose gang metadata contradicts
itself or the live members of its gang.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.core.admission.workloads import (
    NODE_BOUND_OWNERS,
    WorkloadGang,
    WorkloadKind,
    WorkloadRef,
    controller_of,
    gang_of,
    workload_of,
)
from app.core.model import labels as keys
from app.core.model.errors import InvalidInput
from app.core.model.gang import gang_spec
from app.core.model.groupobjects import group_refs
from app.core.model.labels import is_label_value, label_safe
from app.core.model.parse import gpu_fraction
from app.core.model.quantity import parse_milli
from app.core.model.status import SUCCESS, Status
from app.core.model.values import GPU, GroupObject, GroupRef, Pod, Resources

#: Schedulers whose pods Muster takes over: the default one, and the batch schedulers whose
#: conventions it translates (their usual ``schedulerName``), so a migrated workload still
#: saying ``schedulerName: volcano`` is scheduled by Muster. Pods naming any other scheduler
#: are left alone.
DEFAULT_TAKE_OVER = frozenset(
    {"default-scheduler", "volcano", "kai-scheduler", "yunikorn", "scheduler-plugins-scheduler"}
)
KUBEFLOW_JOB_NAME = "training.kubeflow.org/job-name"
_WARNING = "muster: "
_NOT_GIVEN_MIN = "no min-member given"


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """What the webhook writes and which pods it leaves alone."""

    scheduler_name: str = "muster"
    muster_namespace: str = "muster-system"
    take_over: frozenset[str] = DEFAULT_TAKE_OVER
    #: Create gang members behind Muster's scheduling gate (``spec.schedulingGates``); only
    #: where the API server serves gates (Kubernetes 1.27+; older ones drop the field).
    gang_gate: bool = False

    @property
    def excluded_namespaces(self) -> frozenset[str]:
        """Namespaces whose pods are never touched."""
        return frozenset({"kube-system", self.muster_namespace})


@dataclass(frozen=True, slots=True)
class Fetched:
    """A workload object as the API returned it, or why it could not be read."""

    obj: Mapping[str, Any] | None
    problem: str = ""


@dataclass(frozen=True, slots=True)
class NamespaceMeta:
    """A namespace's labels and annotations; ``problem`` says why they are unknown."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    problem: str = ""


#: Reads a workload object: ``(kind, namespace, name) -> Fetched``. May block on the API.
OwnerFetch = Callable[[WorkloadKind, str, str], Fetched]


class OwnerReader(Protocol):
    """An ``OwnerFetch`` with a cache: ``peek`` answers from memory only (``None``: not there)."""

    def __call__(self, kind: WorkloadKind, namespace: str, name: str) -> Fetched: ...
    def peek(self, kind: WorkloadKind, namespace: str, name: str) -> Fetched | None: ...


class NamespaceReader(Protocol):
    """Reads a namespace's labels and annotations (never raises: ``problem`` says what failed);
    ``peek`` answers from memory only."""

    def __call__(self, name: str) -> NamespaceMeta: ...
    def peek(self, name: str) -> NamespaceMeta | None: ...


#: The group object (PodGroup ...) the cache holds for a reference, if any.
GroupLookup = Callable[[GroupRef], GroupObject | None]

#: The min-member live members of gang ``(namespace, name)`` agree on, if any.
GroupMinMember = Callable[[str, str], int | None]


@dataclass(frozen=True, slots=True)
class Admission:
    """The mutating decision: JSONPatch operations and warnings.

    ``skipped`` says why Muster leaves the pod alone (``""`` when it manages it); ``reason``
    says why it manages it; ``values`` holds what the pod ends up with (for logs and tests).
    """

    patch: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    skipped: str = ""
    reason: str = ""
    values: Mapping[str, str] = field(default_factory=dict)


# -- reading the pod --------------------------------------------------------------------------


def _obj(value: Any, field_path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInput(field_path, f"expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, field_path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput(field_path, f"expected a list, got {type(value).__name__}")
    return value


def _str(value: Any, field_path: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput(field_path, f"expected a string, got {type(value).__name__}")
    return value


def _str_map(value: Any, field_path: str) -> dict[str, str]:
    return {k: _str(v, f"{field_path}.{k}") for k, v in _obj(value, field_path).items()}


@dataclass(frozen=True, slots=True)
class _PodMeta:
    """The parts of a pod (API JSON) admission looks at, type-checked."""

    namespace: str
    name: str
    uid: str
    labels: dict[str, str]
    annotations: dict[str, str]
    owners: list[Mapping[str, Any]]
    meta: Mapping[str, Any]
    spec: Mapping[str, Any]

    @property
    def display(self) -> str:
        """``ns/name``, or ``ns/generate-name*`` for a pod the API has not named yet."""
        name = self.name or f"{_str(self.meta.get('generateName'), 'metadata.generateName')}*"
        return f"{self.namespace}/{name}"


def _read(pod: Any, namespace: str) -> _PodMeta:
    pod = _obj(pod, "request.object")
    meta = _obj(pod.get("metadata"), "request.object.metadata")
    spec = _obj(pod.get("spec"), "request.object.spec")
    path = "request.object.metadata"
    owners = [
        _obj(ref, f"{path}.ownerReferences[{i}]")
        for i, ref in enumerate(_list(meta.get("ownerReferences"), f"{path}.ownerReferences"))
    ]
    return _PodMeta(
        namespace=namespace or _str(meta.get("namespace"), f"{path}.namespace") or "default",
        name=_str(meta.get("name"), f"{path}.name"),
        uid=_str(meta.get("uid"), f"{path}.uid"),
        labels=_str_map(meta.get("labels"), f"{path}.labels"),
        annotations=_str_map(meta.get("annotations"), f"{path}.annotations"),
        owners=owners,
        meta=meta,
        spec=spec,
    )


def requests_gpu(spec: Mapping[str, Any], field_path: str = "request.object.spec") -> bool:
    """Whether any container or init container requests or limits ``nvidia.com/gpu``."""
    for group in ("containers", "initContainers"):
        for i, container in enumerate(_list(spec.get(group), f"{field_path}.{group}")):
            c_path = f"{field_path}.{group}[{i}]"
            resources = _obj(_obj(container, c_path).get("resources"), f"{c_path}.resources")
            for kind in ("requests", "limits"):
                amounts = _obj(resources.get(kind), f"{c_path}.resources.{kind}")
                if GPU in amounts and parse_milli(amounts[GPU], f"{c_path}.resources.{kind}.{GPU}"):
                    return True
    return False


def _selection(pod: _PodMeta, ns: NamespaceMeta) -> str:
    """Why Muster manages the pod (``""``: it does not)."""
    if requests_gpu(pod.spec):
        return f"requests {GPU}"
    for key in keys.GPU_FRACTION_KEYS:
        if keys.lookup(key, pod.labels, pod.annotations) is not None:
            return f"carries {key}"
    for key in (*(g for g, _ in keys.GROUP_CONVENTIONS), *keys.QUEUE_KEYS):
        if keys.lookup(key, pod.labels, pod.annotations):
            return f"carries {key}"
    if ns.labels.get(keys.MANAGED_NAMESPACE) == "true":
        return f"namespace {pod.namespace} is labelled {keys.MANAGED_NAMESPACE}=true"
    return ""


# -- writing ----------------------------------------------------------------------------------


def escape_pointer(token: str) -> str:
    """A JSON Pointer reference token (RFC 6901): ``~`` as ``~0``, ``/`` as ``~1``."""
    return token.replace("~", "~0").replace("/", "~1")


def _patch(pod: _PodMeta, scheduler: str, new_labels: Mapping[str, str]) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    if scheduler:
        op = "replace" if "schedulerName" in pod.spec else "add"
        ops.append({"op": op, "path": "/spec/schedulerName", "value": scheduler})
    if not new_labels:
        return ops
    if pod.meta.get("labels") is None:
        ops.append({"op": "add", "path": "/metadata/labels", "value": dict(new_labels)})
    else:
        for key, value in new_labels.items():
            ops.append({"op": "add", "path": f"/metadata/labels/{escape_pointer(key)}",
                        "value": value})  # fmt: skip
    return ops


def gate_ops(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSONPatch operations that add Muster's scheduling gate to a gang member at creation
    (kept out of kube-scheduler's queue until the planner loop removes it); none when the
    pod carries it already."""
    gates = _list(spec.get("schedulingGates"), "request.object.spec.schedulingGates")
    names = [_str(_obj(g, "request.object.spec.schedulingGates[]").get("name"),
                  "request.object.spec.schedulingGates[].name") for g in gates]  # fmt: skip
    if keys.GANG_GATE in names:
        return []
    gate = {"name": keys.GANG_GATE}
    if "schedulingGates" not in spec or spec.get("schedulingGates") is None:
        return [{"op": "add", "path": "/spec/schedulingGates", "value": [gate]}]
    return [{"op": "add", "path": "/spec/schedulingGates/-", "value": gate}]


def share_resource_ops(
    spec: Mapping[str, Any], labels: Mapping[str, str], annotations: Mapping[str, str]
) -> list[dict[str, Any]]:
    """JSONPatch giving a GPU-share pod ``muster.io/gpu-share: 1`` (requests and limits) on its
    first container, unless some container has it already.

    The request is a marker, not an amount (the share is in the annotation): with
    ``muster.io/gpu-share`` in the extender's ``managedResources`` kube-scheduler sends the
    pod to Muster although it requests no ``nvidia.com/gpu``; ``ignoredByScheduler`` keeps
    kube-scheduler from looking for it on nodes, and the kubelet ignores extended resources
    its node does not advertise.
    """
    if keys.first(keys.GPU_FRACTION_KEYS, labels, annotations) is None:
        return []
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], dict):
        return []
    for container in containers:
        resources = container.get("resources") if isinstance(container, dict) else None
        requests = resources.get("requests") if isinstance(resources, dict) else None
        if isinstance(requests, dict) and keys.GPU_SHARE_RESOURCE in requests:
            return []
    base = "/spec/containers/0/resources"
    resources = containers[0].get("resources")
    if not isinstance(resources, dict):
        marker = {keys.GPU_SHARE_RESOURCE: "1"}
        return [{"op": "add", "path": base, "value": {"requests": marker, "limits": marker}}]
    ops: list[dict[str, Any]] = []
    for kind in ("requests", "limits"):
        if isinstance(resources.get(kind), dict):
            path = f"{base}/{kind}/{escape_pointer(keys.GPU_SHARE_RESOURCE)}"
            ops.append({"op": "add", "path": path, "value": "1"})
        else:
            ops.append(
                {"op": "add", "path": f"{base}/{kind}", "value": {keys.GPU_SHARE_RESOURCE: "1"}}
            )
    return ops


# -- deciding ---------------------------------------------------------------------------------


def _positive(value: str) -> int | None:
    try:
        number = int(value)
    except ValueError:
        return None
    return number if number >= 1 else None


@dataclass(slots=True)
class _Owner:
    """The pod's workload and what reading it gave (lazily: read at most once)."""

    ref: WorkloadRef | None
    fetch: OwnerFetch
    pod_labels: Mapping[str, str]
    read: bool = False
    obj: Mapping[str, Any] | None = None
    gang: WorkloadGang | None = None
    problem: str = ""

    def load(self) -> None:
        if self.read or self.ref is None:
            return
        self.read = True
        fetched = self.fetch(self.ref.kind, self.ref.namespace, self.ref.name)
        if fetched.obj is None:
            self.problem = fetched.problem or "not readable"
            return
        self.obj = fetched.obj
        try:
            self.gang = gang_of(self.ref, fetched.obj, self.pod_labels)
        except InvalidInput as exc:
            self.problem = f"{self.ref.kind.kind} {self.ref.namespace}/{self.ref.name}: {exc}"

    @property
    def subject(self) -> str:
        return self.ref.workload if self.ref else "its workload"


def mutate(
    pod: Any,
    namespace: str,
    ns: NamespaceMeta,
    fetch_owner: OwnerFetch,
    group_min: GroupMinMember,
    config: AdmissionConfig,
    group_object: GroupLookup | None = None,
) -> Admission:
    """Decide how to admit ``pod`` (the AdmissionReview's ``request.object``).

    ``namespace`` is the request's namespace (the pod's own may be empty at creation).
    ``group_object`` finds the group objects (PodGroups) the cache knows: a gang one of them
    declares gets no min-member written (the object stays the authority, and may change).
    Raises ``InvalidInput`` with the field path when the pod JSON is malformed.
    """
    p = _read(pod, namespace)
    if p.namespace in config.excluded_namespaces:
        return Admission(skipped=f"namespace {p.namespace} is never managed")
    if ns.labels.get(keys.MANAGED_NAMESPACE) == "false":
        return Admission(
            skipped=f"namespace {p.namespace} is labelled {keys.MANAGED_NAMESPACE}=false"
        )
    if p.labels.get(keys.MANAGED_NAMESPACE) == "false":
        return Admission(skipped=f"the pod is labelled {keys.MANAGED_NAMESPACE}=false")
    if _str(p.spec.get("nodeName"), "request.object.spec.nodeName"):
        return Admission(skipped="the pod is bound already (spec.nodeName)")
    controller = controller_of(p.owners)
    if controller is not None and controller.get("kind") in NODE_BOUND_OWNERS:
        return Admission(skipped=f"{controller.get('kind')} pods are node-bound")
    reason = _selection(p, ns)
    if not reason:
        return Admission(skipped="no GPU, gang or queue metadata and the namespace is not managed")
    scheduler = _str(p.spec.get("schedulerName"), "request.object.spec.schedulerName")
    scheduler = scheduler or "default-scheduler"
    if scheduler != config.scheduler_name and scheduler not in config.take_over:
        why = f"the pod asks for scheduler {scheduler!r}"
        return Admission(
            warnings=(f"{_WARNING}{p.display} {reason} but {why}; Muster leaves it alone",),
            skipped=why,
        )

    warnings: list[str] = []
    new: dict[str, str] = {}
    owner = _Owner(workload_of(p.namespace, p.labels, p.owners), fetch_owner, p.labels)
    if owner.ref is None and controller is not None and KUBEFLOW_JOB_NAME in p.labels:
        warnings.append(
            f"{p.display}: Muster cannot size a {controller.get('kind')} "
            f"(supported: Job, JobSet, TrainJob, PyTorchJob, RayCluster, LeaderWorkerSet)"
        )
    group = _group(p, owner, group_min, new, warnings, group_object)
    queue = _queue(p, owner, ns, new, warnings)
    patch = _patch(p, config.scheduler_name if scheduler != config.scheduler_name else "", new)
    patch += share_resource_ops(p.spec, p.labels, p.annotations)
    if group and config.gang_gate:
        patch += gate_ops(p.spec)
    values = {"schedulerName": config.scheduler_name}
    if queue:
        values[keys.QUEUE] = queue
    if group:
        values[keys.POD_GROUP] = group
    min_member = keys.lookup(keys.MIN_MEMBER, {**p.labels, **new}, p.annotations)
    if min_member:
        values[keys.MIN_MEMBER] = min_member
    return Admission(
        patch=tuple(patch),
        warnings=tuple(f"{_WARNING}{w}" for w in warnings),
        reason=reason,
        values=values,
    )


def _declared(p: _PodMeta, lookup: GroupLookup | None) -> GroupObject | None:
    """The gang-declaring group object the pod names, if the cache has one."""
    if lookup is None:
        return None
    for ref in group_refs(p.namespace, p.labels, p.annotations):
        found = lookup(ref)
        if found is not None and found.gang:
            return found
    return None


def _group(
    p: _PodMeta,
    owner: _Owner,
    group_min: GroupMinMember,
    new: dict[str, str],
    warnings: list[str],
    group_object: GroupLookup | None = None,
) -> str:
    """Decide pod-group and min-member (into ``new``); return the group name or ``""``."""
    explicit = keys.lookup(keys.POD_GROUP, p.labels, p.annotations)
    given_min = keys.lookup(keys.MIN_MEMBER, p.labels, p.annotations)
    if not explicit and any(p.spec.get(f) is not None for f in ("schedulingGroup", "workloadRef")):
        return ""  # Kubernetes' gang API declares the gang; the cache reads it
    declared = _declared(p, group_object)
    convention: tuple[str, str | None, str] | None = None
    for group_key, min_key in keys.GROUP_CONVENTIONS[1:]:
        value = keys.lookup(group_key, p.labels, p.annotations)
        if value:
            convention = (group_key, min_key, value)
            break

    if explicit:
        name, source = explicit, keys.POD_GROUP
    elif convention is not None:
        name, source = label_safe(convention[2]), convention[0]
        new[keys.POD_GROUP] = name
    else:
        owner.load()
        if owner.gang is None:
            if owner.ref is not None:
                warnings.append(
                    f"{p.display}: cannot size {owner.subject} ({owner.problem}); "
                    f"the pod is scheduled on its own, without {keys.POD_GROUP}"
                )
            return ""
        name, source = label_safe(owner.gang.name), owner.subject
        new[keys.POD_GROUP] = name

    if (
        given_min is None
        and declared is not None
        and name
        in (
            declared.name,
            label_safe(declared.name),
        )
    ):
        return name  # the group object gives the minimum
    if given_min is not None:
        if _positive(given_min) is None:
            warnings.append(
                f"{p.display}: {keys.MIN_MEMBER}={given_min!r} is not a whole number >= 1; "
                f"gang {p.namespace}/{name} cannot be planned until it is"
            )
        return name
    if convention is not None and convention[1] is not None and not explicit:
        raw = keys.lookup(convention[1], p.labels, p.annotations)
        if raw is not None:
            number = _positive(raw)
            if number is None:
                warnings.append(
                    f"{p.display}: {convention[1]}={raw!r} is not a whole number >= 1; "
                    f"{keys.MIN_MEMBER} not set"
                )
            else:
                new[keys.MIN_MEMBER] = str(number)
            return name
    owner.load()
    if owner.gang is not None and label_safe(owner.gang.name) == name:
        size = owner.gang.min_member
        agreed = group_min(p.namespace, name)
        if agreed is not None and agreed != size:
            warnings.append(
                f"{p.display}: {owner.subject} now implies min-member {size} "
                f"({owner.gang.basis}); gang {p.namespace}/{name} keeps {agreed}, "
                f"what its live members say"
            )
            size = agreed
        new[keys.MIN_MEMBER] = str(size)
        return name
    why = f"{owner.subject}: {owner.problem}" if owner.problem else f"{source} names no size"
    warnings.append(
        f"{p.display}: gang {p.namespace}/{name} has no min-member ({why}); set {keys.MIN_MEMBER}"
    )
    return name


def _queue(
    p: _PodMeta,
    owner: _Owner,
    ns: NamespaceMeta,
    new: dict[str, str],
    warnings: list[str],
) -> str:
    """Decide the queue (into ``new`` unless the pod carries ``muster.io/queue``).

    Returns ``""`` when nothing names one: the queue file then decides.
    """
    found = keys.first(keys.QUEUE_KEYS, p.labels, p.annotations)
    if found is not None and found[0] == keys.QUEUE:
        return found[1]
    if found is None:
        owner.load()
        if owner.obj is not None:
            meta = _obj(owner.obj.get("metadata"), "metadata")
            found = keys.first(
                keys.QUEUE_KEYS,
                _str_map(meta.get("labels"), "metadata.labels"),
                _str_map(meta.get("annotations"), "metadata.annotations"),
            )
        if found is None and owner.gang is not None and owner.gang.queue:
            found = (f"{owner.subject} spec", owner.gang.queue)
    if found is None:
        default = keys.lookup(keys.DEFAULT_QUEUE_ANNOTATION, ns.annotations, ns.labels)
        if default:
            found = (f"namespace {p.namespace}", default)
        elif ns.problem:
            warnings.append(
                f"{p.display}: namespace {p.namespace} unreadable ({ns.problem}); its "
                f"{keys.DEFAULT_QUEUE_ANNOTATION} is unknown, so the queue file decides"
            )
    if found is None:
        return ""
    source, queue = found
    if not is_label_value(queue):
        warnings.append(
            f"{p.display}: queue {queue!r} (from {source}) is not a valid label value; "
            f"{keys.QUEUE} not set"
        )
        return ""
    new[keys.QUEUE] = queue
    return queue


# -- validating -------------------------------------------------------------------------------


def _as_pod(p: _PodMeta) -> Pod:
    return Pod(
        uid=p.uid or f"{p.namespace}/{p.name}",
        namespace=p.namespace,
        name=p.name,
        requests=Resources(),
        labels=p.labels,
        annotations=p.annotations,
    )


def live_members(pods: Iterable[Pod], namespace: str, group: str, exclude: str = "") -> list[Pod]:
    """Live pods (not finished, not terminating) of gang ``namespace/group``, but ``exclude``."""
    members = []
    for pod in pods:
        if pod.namespace != namespace or pod.uid == exclude or pod.terminal or pod.deleting:
            continue
        # Cheap test first: a member carries the group name under some key.
        if group not in pod.labels.values() and group not in pod.annotations.values():
            continue
        spec = gang_spec(pod)
        if spec is not None and spec.name == group:
            members.append(pod)
    return members


def agreed_min_member(pods: Iterable[Pod], namespace: str, group: str) -> int | None:
    """The min-member every live member of ``namespace/group`` states, if they agree on one."""
    values = set()
    for pod in live_members(pods, namespace, group):
        spec = gang_spec(pod)
        if spec is not None and spec.min_member is not None:
            values.add(spec.min_member)
    return values.pop() if len(values) == 1 else None


#: The pods that may belong to gang ``(namespace, name)`` (a superset is fine: each is checked).
GangPods = Callable[[str, str], Iterable[Pod]]


def validate(pod: Any, namespace: str, members: GangPods, config: AdmissionConfig) -> Status:
    """Reject a pod whose gang metadata contradicts itself or its gang's live members.

    Rejected: a GPU share (``muster.io/gpu-fraction``) outside (0, 1] or combined with an
    ``nvidia.com/gpu`` request; min-member, max-member or gang-timeout that do not parse;
    max-member below min-member; a min-member or max-member other than the one the gang's
    live members (from ``members``, the cluster cache) state. A pod without a group, or
    with a group but no min-member yet, is allowed.
    """
    p = _read(pod, namespace)
    if p.namespace in config.excluded_namespaces:
        return SUCCESS
    scheduler = _str(p.spec.get("schedulerName"), "request.object.spec.schedulerName")
    if scheduler and scheduler != config.scheduler_name and scheduler not in config.take_over:
        return SUCCESS  # another scheduler's pod: its metadata is not Muster's to judge
    try:
        gpu_fraction(p.labels, p.annotations, Resources(gpu=1000 if requests_gpu(p.spec) else 0))
    except InvalidInput as exc:
        return Status.unresolvable(f"metadata.{exc.field}: {exc.problem}")
    spec = gang_spec(_as_pod(p))
    if spec is None:
        return SUCCESS
    gang = f"gang {spec.key}"
    if spec.problem and not spec.problem.startswith(_NOT_GIVEN_MIN):
        return Status.unresolvable(f"{gang}: {spec.problem}")
    others = live_members(members(p.namespace, spec.name), p.namespace, spec.name, exclude=p.uid)
    for what, mine in (("min-member", spec.min_member), ("max-member", spec.max_member)):
        if mine is None:
            continue
        theirs: dict[int, int] = {}
        for member in others:
            other = gang_spec(member)
            value = None if other is None else getattr(other, what.replace("-", "_"))
            if value is not None:
                theirs[value] = theirs.get(value, 0) + 1
        if theirs and mine not in theirs:
            said = ", ".join(f"{n} say {v}" for v, n in sorted(theirs.items()))
            return Status.unresolvable(
                f"{gang}: this pod says {what} {mine} but the gang's live members disagree "
                f"({said}); give every member the same {what}",
            )
    return SUCCESS
