"""Domain model: resources, nodes and pods as immutable values.

Objects are built from Kubernetes JSON by ``app.core.model.parse`` and never mutated; the cache
replaces them whole when the API (or a call) says something new about them.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

GPU = "nvidia.com/gpu"
CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
#: The resources Muster accounts for, in the order of ``Resources`` fields.
RESOURCE_NAMES: tuple[str, ...] = (GPU, CPU, MEMORY, PODS)
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: The phases of a pod that finished (``Pod.terminal``): it holds no resources.
TERMINAL_PHASES = frozenset(("Succeeded", "Failed"))


class WorkloadRef(NamedTuple):
    """A pod's ``spec.workloadRef`` (Kubernetes 1.35): a pod group of a Workload."""

    name: str
    pod_group: str
    replica_key: str = ""


class Resources(NamedTuple):
    """Amounts of the accounted resources, each in milli-units (see ``app.core.model.quantity``)."""

    gpu: int = 0
    cpu: int = 0
    memory: int = 0
    pods: int = 0

    def __add__(self, other: object) -> Resources:
        if not isinstance(other, Resources):
            return NotImplemented
        return tuple.__new__(Resources, map(operator.add, self, other))

    def __sub__(self, other: Resources) -> Resources:
        return tuple.__new__(Resources, map(operator.sub, self, other))

    def max(self, other: Resources) -> Resources:
        """Element-wise maximum."""
        return Resources(*(max(a, b) for a, b in zip(self, other, strict=True)))


#: Where a gang object comes from (``GroupObject.source``, ``GroupRef.source``).
VOLCANO = "volcano"
COSCHEDULING = "coscheduling"
KUBERNETES = "kubernetes"
WORKLOAD = "workload"


class GroupRef(NamedTuple):
    """Which object a pod names: ``source`` (``VOLCANO`` ...), namespace and group name.

    For a Workload's pod group the name is ``WORKLOAD:GROUP`` (see ``GroupObject.name``).
    """

    source: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class GroupObject:
    """One gang as an API object declares it.

    ``name`` is what pods name: the object's name, or ``WORKLOAD:GROUP`` for one pod group of
    a Workload (``object_name`` is then the Workload's name). ``gang`` is false for a policy
    that asks for no gang (Kubernetes' ``basic``). ``problem`` says why the object cannot be
    used as it stands (its members then wait, as for bad labels). ``priority`` is the value
    the object states or its priority class resolves to (``None``: unknown).
    """

    source: str
    namespace: str
    name: str
    kind: str
    api_version: str
    object_name: str
    uid: str = ""
    gang: bool = True
    min_member: int | None = None
    queue: str = ""
    priority_class: str = ""
    priority: int | None = None
    timeout: float | None = None
    min_resources: Resources | None = None
    problem: str = ""

    @property
    def ref(self) -> GroupRef:
        """The reference pods use."""
        return GroupRef(self.source, self.namespace, self.name)

    @property
    def display(self) -> str:
        """``PodGroup.scheduling.volcano.sh team-a/pg1`` (``Workload.scheduling.k8s.io
        team-a/train, pod group workers`` for a Workload's group)."""
        group = self.api_version.split("/", 1)[0]
        text = f"{self.kind}.{group} {self.namespace}/{self.object_name}"
        if self.source == WORKLOAD:
            text += f", pod group {self.name.split(':', 2)[1]}"
        return text


ZERO = Resources()


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod toleration (``operator`` is ``Equal`` or ``Exists``)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Whether this toleration matches ``taint`` (Kubernetes semantics)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement: ``key operator values``."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """A node selector term: all its requirements must hold (an empty term matches nothing)."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class Node:
    """A node as far as scheduling is concerned."""

    name: str
    allocatable: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Muster's own annotations (``muster.io/...``, e.g. the GPU topology) only: a node's
    #: other annotations are never read, so a change to them is no change to the node.
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False

    @property
    def gpu_model(self) -> str:
        """The GPU product label (``nvidia.com/gpu.product``), or ``""``."""
        return self.labels.get(GPU_PRODUCT_LABEL, "")


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod as far as scheduling is concerned.

    ``requests`` are the effective requests (see ``app.core.model.parse.effective_requests``),
    including the pod itself as one ``pods`` unit.
    """

    uid: str
    namespace: str
    name: str
    requests: Resources
    node_name: str = ""
    phase: str = "Pending"
    priority: int = 0
    #: ``spec.priorityClassName`` ("" for none).
    priority_class: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    required_affinity: tuple[SelectorTerm, ...] | None = None
    scheduler_name: str = "default-scheduler"
    created: float = 0.0
    deleting: bool = False
    #: ``status.startTime`` (epoch seconds), 0 when not started or unknown.
    started: float = 0.0
    #: A share of one GPU in milli-GPU (``muster.io/gpu-fraction``; 0 = none). Already
    #: included in ``requests.gpu``.
    gpu_fraction: int = 0
    #: GPU indices written at bind (``muster.io/gpu-ids``); empty when unknown.
    gpu_ids: tuple[int, ...] = ()
    #: ``spec.schedulingGroup.podGroupName`` (Kubernetes 1.36+), ``""`` for none.
    scheduling_group: str = ""
    #: ``spec.workloadRef`` (Kubernetes 1.35), if any.
    workload_ref: WorkloadRef | None = None
    #: The group object (PodGroup, Workload group) the pod names, as the cache knows it
    #: (``app.core.model.groupobjects``); attached by the cache, ``None`` when there is none.
    group: GroupObject | None = None
    #: Names of the pod's scheduling gates (``spec.schedulingGates``, Kubernetes 1.27+).
    gates: tuple[str, ...] = ()
    #: kube-scheduler has tried the pod and failed (condition ``PodScheduled=False``).
    unschedulable: bool = False
    #: The pod gives kube-scheduler's scoring something of its own to weigh: preferred node or
    #: pod (anti-)affinity, a ``ScheduleAnyway`` spread constraint, or the default spreading
    #: of a ReplicaSet's, StatefulSet's or ReplicationController's pods
    #: (``app.core.policies.solepick``).
    soft_preferences: bool = False
    #: ``metadata.resourceVersion`` as read ("" when unknown): which version of the object
    #: this is, not what it says, so two pods that differ only in it are equal.
    version: str = field(default="", compare=False)

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        """Finished pods hold no resources."""
        return self.phase in TERMINAL_PHASES
