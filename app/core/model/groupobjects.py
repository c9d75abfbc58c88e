"""Gangs declared as API objects: Volcano and coscheduling PodGroups, Kubernetes' own gang API.

Pods name such an object from their metadata or spec (``group_refs``); the object says how
many members the gang needs, and possibly its queue, priority and timeout. ``GroupKind`` lists
each object type Muster reads (API group, versions, plural, parser); ``app.k8s`` lists and
watches the ones the API server serves and hands the raw JSON to the parsers here, which turn
it into ``GroupObject`` values. The cache attaches each pod's object to the pod
(``Pod.group``), and ``app.core.model.gang.gang_spec`` reads it beside Muster's own labels.

Shapes read (fields not listed are ignored):

* Volcano ``PodGroup`` (``scheduling.volcano.sh/v1beta1``): ``spec.minMember``,
  ``spec.minResources``, ``spec.queue``, ``spec.priorityClassName``. Pods name it with the
  annotation (or label) ``scheduling.k8s.io/group-name``.
* scheduler-plugins coscheduling ``PodGroup`` (``scheduling.x-k8s.io/v1alpha1``):
  ``spec.minMember``, ``spec.minResources``, ``spec.scheduleTimeoutSeconds``. Pods name it
  with the label ``scheduling.x-k8s.io/pod-group``.
* Kubernetes ``PodGroup`` (``scheduling.k8s.io/v1alpha2``, Kubernetes 1.36; ``v1beta1`` read
  the same way): ``spec.schedulingPolicy.gang.minCount`` (``basic: {}`` is no gang),
  ``spec.priorityClassName``, ``spec.priority``. Pods name it with
  ``spec.schedulingGroup.podGroupName``.
* Kubernetes ``Workload`` (``scheduling.k8s.io/v1alpha1``, Kubernetes 1.35):
  ``spec.podGroups[].name`` and ``.policy.gang.minCount``. Pods name one of its groups with
  ``spec.workloadRef`` (``name``, ``podGroup``, optional ``podGroupReplicaKey``: each replica
  key is a gang of its own).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from app.core.model import labels
from app.core.model.errors import InvalidInput
from app.core.model.parse import json_object, json_str
from app.core.model.quantity import parse_milli
from app.core.model.values import (
    COSCHEDULING,
    KUBERNETES,
    RESOURCE_NAMES,
    VOLCANO,
    WORKLOAD,
    GroupObject,
    GroupRef,
    Resources,
    WorkloadRef,
)

#: Pod keys naming a Volcano / coscheduling PodGroup.
VOLCANO_GROUP_KEY = "scheduling.k8s.io/group-name"
COSCHEDULING_GROUP_KEY = "scheduling.x-k8s.io/pod-group"


#: ``(raw object, apiVersion) -> every gang it declares``; raises ``InvalidInput`` naming the
#: field when the object does not have the documented shape.
Parser = Callable[[Mapping[str, Any], str], list[GroupObject]]


@dataclass(frozen=True, slots=True)
class GroupKind:
    """An object type that declares gangs, and where the API serves it.

    ``versions`` in order of preference: the first one the API server serves is read.
    ``needs`` says what a cluster must have for the API server to serve it (for docs and logs).
    """

    source: str
    group: str
    versions: tuple[str, ...]
    plural: str
    kind: str
    parse: Parser
    needs: str


# -- reading JSON -------------------------------------------------------------------------------


def _int(value: Any, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(path, f"expected an integer, got {value!r}")
    return value


def _meta(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(namespace, name, uid)``; a name is required."""
    meta = json_object(obj.get("metadata"), "metadata")
    name = json_str(meta.get("name"), "metadata.name")
    if not name:
        raise InvalidInput("metadata.name", "missing")
    namespace = json_str(meta.get("namespace"), "metadata.namespace") or "default"
    return namespace, name, json_str(meta.get("uid"), "metadata.uid")


def _at_least_one(value: int | None, path: str) -> tuple[int | None, str]:
    if value is None:
        return None, f"{path} is not set"
    if value < 1:
        return None, f"{path}={value} must be at least 1"
    return value, ""


def _resources(value: Any, path: str) -> Resources | None:
    """``spec.minResources`` (a ResourceList); resources Muster does not track are ignored."""
    amounts = json_object(value, path)
    if not amounts:
        return None
    if not any(name in amounts for name in RESOURCE_NAMES):
        return None
    return Resources(
        *(
            parse_milli(amounts[name], f"{path}.{name}") if name in amounts else 0
            for name in RESOURCE_NAMES
        )
    )


# -- parsers ------------------------------------------------------------------------------------


def _group(
    source: str, kind: str, api_version: str, obj: Mapping[str, Any], group: str = "", **fields: Any
) -> GroupObject:
    """A ``GroupObject`` for ``obj`` (``group``: one pod group of a Workload)."""
    namespace, name, uid = _meta(obj)
    return GroupObject(
        source=source,
        namespace=namespace,
        name=f"{name}:{group}" if group else name,
        kind=kind,
        api_version=api_version,
        object_name=name,
        uid=uid,
        **fields,
    )


def _crd_podgroup(
    source: str, obj: Mapping[str, Any], api_version: str, problem: str = "", **fields: Any
) -> GroupObject:
    """A Volcano or coscheduling ``PodGroup``: both state ``spec.minMember`` and
    ``spec.minResources``; ``fields`` adds what only one of them has."""
    spec = json_object(obj.get("spec"), "spec")
    min_member, why = _at_least_one(_int(spec.get("minMember"), "spec.minMember"),
                                    "spec.minMember")  # fmt: skip
    return _group(
        source,
        "PodGroup",
        api_version,
        obj,
        min_member=min_member,
        min_resources=_resources(spec.get("minResources"), "spec.minResources"),
        problem=why or problem,
        **fields,
    )


def volcano_podgroup(obj: Mapping[str, Any], api_version: str) -> list[GroupObject]:
    """A Volcano ``PodGroup``: minMember, minResources, queue, priorityClassName."""
    spec = json_object(obj.get("spec"), "spec")
    return [
        _crd_podgroup(
            VOLCANO,
            obj,
            api_version,
            queue=json_str(spec.get("queue"), "spec.queue"),
            priority_class=json_str(spec.get("priorityClassName"), "spec.priorityClassName"),
        )
    ]


def coscheduling_podgroup(obj: Mapping[str, Any], api_version: str) -> list[GroupObject]:
    """A scheduler-plugins coscheduling ``PodGroup``: minMember, minResources,
    scheduleTimeoutSeconds."""
    spec = json_object(obj.get("spec"), "spec")
    timeout = _int(spec.get("scheduleTimeoutSeconds"), "spec.scheduleTimeoutSeconds")
    problem = ""
    if timeout is not None and timeout < 1:
        problem = f"spec.scheduleTimeoutSeconds={timeout} must be at least 1"
        timeout = None
    seconds = float(timeout) if timeout is not None else None
    return [_crd_podgroup(COSCHEDULING, obj, api_version, problem, timeout=seconds)]


def _policy(value: Any, path: str) -> dict[str, Any]:
    """A Kubernetes scheduling policy as ``GroupObject`` fields (gang, min_member, problem);
    exactly one of ``basic`` and ``gang`` must be set (a malformed one is a gang that waits)."""
    policy = json_object(value, path)
    basic, gang = policy.get("basic"), policy.get("gang")
    if (basic is None) == (gang is None):
        return {"problem": f"{path} must set exactly one of basic and gang"}
    if basic is not None:
        json_object(basic, f"{path}.basic")
        return {"gang": False}
    count = _int(json_object(gang, f"{path}.gang").get("minCount"), f"{path}.gang.minCount")
    min_count, problem = _at_least_one(count, f"{path}.gang.minCount")
    return {"min_member": min_count, "problem": problem}


def kubernetes_podgroup(obj: Mapping[str, Any], api_version: str) -> list[GroupObject]:
    """A ``scheduling.k8s.io`` ``PodGroup``: spec.schedulingPolicy, priorityClassName,
    priority."""
    spec = json_object(obj.get("spec"), "spec")
    return [
        _group(
            KUBERNETES,
            "PodGroup",
            api_version,
            obj,
            priority_class=json_str(spec.get("priorityClassName"), "spec.priorityClassName"),
            priority=_int(spec.get("priority"), "spec.priority"),
            **_policy(spec.get("schedulingPolicy"), "spec.schedulingPolicy"),
        )
    ]


def kubernetes_workload(obj: Mapping[str, Any], api_version: str) -> list[GroupObject]:
    """A ``scheduling.k8s.io/v1alpha1`` ``Workload``: one ``GroupObject`` per entry of
    ``spec.podGroups`` (named ``WORKLOAD:GROUP``)."""
    _meta(obj)
    spec = json_object(obj.get("spec"), "spec")
    groups = spec.get("podGroups")
    if groups is None:
        groups = []
    if not isinstance(groups, list):
        raise InvalidInput("spec.podGroups", f"expected a list, got {type(groups).__name__}")
    out = []
    for i, entry in enumerate(groups):
        path = f"spec.podGroups[{i}]"
        entry = json_object(entry, path)
        group = json_str(entry.get("name"), f"{path}.name")
        if not group:
            raise InvalidInput(f"{path}.name", "missing")
        policy = _policy(entry.get("policy"), f"{path}.policy")
        out.append(_group(WORKLOAD, "Workload", api_version, obj, group, **policy))
    return out


VOLCANO_KIND = GroupKind(
    VOLCANO, "scheduling.volcano.sh", ("v1beta1",), "podgroups", "PodGroup", volcano_podgroup,
    "Volcano's CRDs installed (any Kubernetes version)",
)  # fmt: skip
COSCHEDULING_KIND = GroupKind(
    COSCHEDULING, "scheduling.x-k8s.io", ("v1alpha1",), "podgroups", "PodGroup",
    coscheduling_podgroup, "scheduler-plugins' PodGroup CRD installed (any Kubernetes version)",
)  # fmt: skip
KUBERNETES_KIND = GroupKind(
    KUBERNETES, "scheduling.k8s.io", ("v1beta1", "v1alpha2"), "podgroups", "PodGroup",
    kubernetes_podgroup,
    "Kubernetes 1.36+ with the GenericWorkload feature gate and scheduling.k8s.io/v1alpha2 on",
)  # fmt: skip
WORKLOAD_KIND = GroupKind(
    WORKLOAD, "scheduling.k8s.io", ("v1alpha1",), "workloads", "Workload", kubernetes_workload,
    "Kubernetes 1.35 with the GenericWorkload feature gate and scheduling.k8s.io/v1alpha1 on",
)  # fmt: skip
#: Every object type that declares gangs, in the order pods' references to them are tried.
GROUP_KINDS: tuple[GroupKind, ...] = (KUBERNETES_KIND, WORKLOAD_KIND, VOLCANO_KIND,
                                      COSCHEDULING_KIND)  # fmt: skip


# -- pods' references ---------------------------------------------------------------------------


def workload_gang(ref: WorkloadRef) -> str:
    """The gang name of pods with ``spec.workloadRef`` ``ref``: ``WORKLOAD:GROUP[:REPLICA]``."""
    name = f"{ref.name}:{ref.pod_group}"
    return f"{name}:{ref.replica_key}" if ref.replica_key else name


def group_refs(
    namespace: str,
    pod_labels: Mapping[str, str],
    annotations: Mapping[str, str],
    scheduling_group: str = "",
    workload_ref: WorkloadRef | None = None,
) -> tuple[GroupRef, ...]:
    """Every group object a pod names, in ``GROUP_KINDS`` order."""
    refs = []
    if scheduling_group:
        refs.append(GroupRef(KUBERNETES, namespace, scheduling_group))
    if workload_ref is not None:
        refs.append(GroupRef(WORKLOAD, namespace, f"{workload_ref.name}:{workload_ref.pod_group}"))
    volcano = labels.lookup(VOLCANO_GROUP_KEY, pod_labels, annotations)
    if volcano:
        refs.append(GroupRef(VOLCANO, namespace, volcano))
    cosched = labels.lookup(COSCHEDULING_GROUP_KEY, pod_labels, annotations)
    if cosched:
        refs.append(GroupRef(COSCHEDULING, namespace, cosched))
    return tuple(refs)
