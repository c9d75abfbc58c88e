"""Translate Kubernetes API JSON (camelCase dicts) into ``app.core.model.values`` values.

One translation serves every source: objects embedded in extender calls, objects from the watch
(``app.k8s`` serialises client objects to the same JSON first) and cluster files. Every problem
raises ``InvalidInput`` with the path of the offending field.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from datetime import datetime
from sys import intern
from typing import Any

from app.core.model import labels
from app.core.model.errors import InvalidInput
from app.core.model.quantity import parse_milli
from app.core.model.values import (
    CPU,
    GPU,
    MEMORY,
    PODS,
    ZERO,
    Node,
    Pod,
    Requirement,
    Resources,
    SelectorTerm,
    Taint,
    Toleration,
    WorkloadRef,
)

_ONE_POD = Resources(pods=1000)


def json_object(value: Any, field: str) -> Mapping[str, Any]:
    """``value`` as a JSON object (``{}`` for null); ``InvalidInput`` naming ``field`` if not."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInput(field, f"expected an object, got {type(value).__name__}")
    return value


def json_list(value: Any, field: str) -> list[Any]:
    """``value`` as a JSON list (``[]`` for null); ``InvalidInput`` naming ``field`` if not."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput(field, f"expected a list, got {type(value).__name__}")
    return value


def json_str(value: Any, field: str, default: str = "") -> str:
    """``value`` as a string (``default`` for null); ``InvalidInput`` naming ``field`` if not."""
    if value is None:
        return default
    if not isinstance(value, str):
        raise InvalidInput(field, f"expected a string, got {type(value).__name__}")
    return value


_str = json_str


def _str_map(value: Any, field: str) -> dict[str, str]:
    # Keys and values repeat across objects (a job's pods share most labels): interned, a
    # cache of 50 000 pods keeps one copy of each instead of one per pod.
    result = {}
    for key, item in json_object(value, field).items():
        result[intern(key)] = intern(_str(item, f"{field}.{key}"))
    return result


@functools.lru_cache(maxsize=4096)
def _toleration(key: str, operator: str, value: str, effect: str) -> Toleration:
    """One shared ``Toleration`` per distinct value (every pod carries the same few)."""
    return Toleration(key=key, operator=operator, value=value, effect=effect)


def resources_from_map(value: Any, field: str) -> Resources:
    """The accounted resources of a ``{name: quantity}`` map; other names are ignored."""
    amounts = json_object(value, field)
    if not amounts:
        return ZERO
    for name, quantity in amounts.items():
        # Validate every quantity, including ones Muster does not account for.
        if name not in (GPU, CPU, MEMORY, PODS):
            parse_milli(quantity, f"{field}.{name}")
    return Resources(
        gpu=parse_milli(amounts[GPU], f"{field}.{GPU}") if GPU in amounts else 0,
        cpu=parse_milli(amounts[CPU], f"{field}.{CPU}") if CPU in amounts else 0,
        memory=parse_milli(amounts[MEMORY], f"{field}.{MEMORY}") if MEMORY in amounts else 0,
        pods=parse_milli(amounts[PODS], f"{field}.{PODS}") if PODS in amounts else 0,
    )


def _container_requests(container: Any, field: str) -> Resources:
    resources = json_object(json_object(container, field).get("resources"), f"{field}.resources")
    requests = resources_from_map(resources.get("requests"), f"{field}.resources.requests")
    limits = resources_from_map(resources.get("limits"), f"{field}.resources.limits")
    # A limit without a request means request == limit (the API server defaults it so).
    given = json_object(resources.get("requests"), f"{field}.resources.requests")
    names = (GPU, CPU, MEMORY, PODS)
    return Resources(
        *(
            req if name in given else lim
            for name, req, lim in zip(names, requests, limits, strict=True)
        )
    )


def effective_requests(spec: Mapping[str, Any], field: str = "spec") -> Resources:
    """A pod's requests computed the Kubernetes way.

    The sum over containers, against the peak of init containers (restartable "sidecar" init
    containers keep running, so they add to everything after them), plus the pod overhead and
    one ``pods`` unit.
    """
    total = ZERO
    for i, container in enumerate(json_list(spec.get("containers"), f"{field}.containers")):
        total = total + _container_requests(container, f"{field}.containers[{i}]")
    sidecars = ZERO
    init_peak = ZERO
    init_field = f"{field}.initContainers"
    for i, container in enumerate(json_list(spec.get("initContainers"), init_field)):
        requests = _container_requests(container, f"{init_field}[{i}]")
        if json_object(container, f"{init_field}[{i}]").get("restartPolicy") == "Always":
            total = total + requests
            sidecars = sidecars + requests
            running = sidecars
        else:
            running = requests + sidecars
        init_peak = init_peak.max(running)
    total = total.max(init_peak)
    overhead = resources_from_map(spec.get("overhead"), f"{field}.overhead")
    return total + overhead + _ONE_POD


def _requirements(value: Any, field: str) -> tuple[Requirement, ...]:
    result = []
    for i, item in enumerate(json_list(value, field)):
        item_field = f"{field}[{i}]"
        item = json_object(item, item_field)
        operator = _str(item.get("operator"), f"{item_field}.operator")
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
            raise InvalidInput(f"{item_field}.operator", f"unknown operator {operator!r}")
        values = tuple(
            _str(v, f"{item_field}.values[{j}]")
            for j, v in enumerate(json_list(item.get("values"), f"{item_field}.values"))
        )
        result.append(Requirement(_str(item.get("key"), f"{item_field}.key"), operator, values))
    return tuple(result)


def _required_affinity(spec: Mapping[str, Any], field: str) -> tuple[SelectorTerm, ...] | None:
    affinity = json_object(spec.get("affinity"), f"{field}.affinity")
    node_affinity = json_object(affinity.get("nodeAffinity"), f"{field}.affinity.nodeAffinity")
    path = f"{field}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    terms = []
    for i, term in enumerate(json_list(json_object(required, path).get("nodeSelectorTerms"), path)):
        term_field = f"{path}.nodeSelectorTerms[{i}]"
        term = json_object(term, term_field)
        terms.append(
            SelectorTerm(
                _requirements(term.get("matchExpressions"), f"{term_field}.matchExpressions"),
                _requirements(term.get("matchFields"), f"{term_field}.matchFields"),
            )
        )
    return tuple(terms)


_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
#: Owners whose pods kube-scheduler spreads by default (its system default topology spread
#: constraints, ``ScheduleAnyway``), when no constraint of the pod's own says otherwise.
SPREAD_OWNERS = frozenset({"ReplicaSet", "StatefulSet", "ReplicationController"})


def _soft_preferences(meta: Mapping[str, Any], spec: Mapping[str, Any], field: str) -> bool:
    """Whether kube-scheduler's scoring has a preference of this pod's to weigh (see
    ``Pod.soft_preferences``)."""
    affinity = json_object(spec.get("affinity"), f"{field}.spec.affinity")
    for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity"):
        terms = json_object(affinity.get(kind), f"{field}.spec.affinity.{kind}").get(_PREFERRED)
        if json_list(terms, f"{field}.spec.affinity.{kind}.{_PREFERRED}"):
            return True
    path = f"{field}.spec.topologySpreadConstraints"
    constraints = json_list(spec.get("topologySpreadConstraints"), path)
    if constraints:
        unsatisfiable = [
            json_object(c, f"{path}[{i}]").get("whenUnsatisfiable")
            for i, c in enumerate(constraints)
        ]
        return "ScheduleAnyway" in unsatisfiable
    owners = json_list(meta.get("ownerReferences"), f"{field}.metadata.ownerReferences")
    return any(
        json_object(o, f"{field}.metadata.ownerReferences[{i}]").get("kind") in SPREAD_OWNERS
        for i, o in enumerate(owners)
    )


def _tolerations(value: Any, field: str) -> tuple[Toleration, ...]:
    result = []
    for i, item in enumerate(json_list(value, field)):
        f = f"{field}[{i}]"
        item = json_object(item, f)
        result.append(
            _toleration(
                _str(item.get("key"), f"{f}.key"),
                _str(item.get("operator"), f"{f}.operator", "Equal") or "Equal",
                _str(item.get("value"), f"{f}.value"),
                _str(item.get("effect"), f"{f}.effect"),
            )
        )
    return tuple(result)


#: RFC 3339 date-time (what the API server writes; what the OpenAPI document promises).
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def _timestamp(value: Any, field: str) -> float:
    if value in (None, ""):
        return 0.0
    text = _str(value, field)
    if not _RFC3339.fullmatch(text):
        raise InvalidInput(field, f"expected an RFC 3339 date-time, got {text!r}")
    text = text.upper().replace("Z", "+00:00")
    if text[17:19] == "60":  # a leap second: RFC 3339 has them, Python does not
        text = text[:17] + "59" + text[19:]
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError as exc:
        raise InvalidInput(field, f"unparsable timestamp {value!r}: {exc}") from exc


def pod_from_dict(data: Any, field: str = "Pod") -> Pod:
    """Build a ``Pod`` from its API JSON. Requires ``metadata.name``; the rest may be absent."""
    data = json_object(data, field)
    if not data:
        raise InvalidInput(field, "missing pod object")
    meta = json_object(data.get("metadata"), f"{field}.metadata")
    spec = json_object(data.get("spec"), f"{field}.spec")
    status = json_object(data.get("status"), f"{field}.status")
    name = _str(meta.get("name"), f"{field}.metadata.name")
    if not name:
        raise InvalidInput(f"{field}.metadata.name", "missing")
    namespace = _str(meta.get("namespace"), f"{field}.metadata.namespace", "default") or "default"
    priority = spec.get("priority", 0)
    if priority is None:
        priority = 0
    if isinstance(priority, float) and priority.is_integer():
        priority = int(priority)  # 5.0 is an integer in JSON
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidInput(f"{field}.spec.priority", f"expected an integer, got {priority!r}")
    pod_labels = _str_map(meta.get("labels"), f"{field}.metadata.labels")
    annotations = _str_map(meta.get("annotations"), f"{field}.metadata.annotations")
    requests = effective_requests(spec, f"{field}.spec")
    node_name = _str(spec.get("nodeName"), f"{field}.spec.nodeName")
    fraction = 0
    try:
        fraction = gpu_fraction(pod_labels, annotations, requests)
    except InvalidInput as exc:
        # A bound pod keeps running whatever its annotation says (Muster did not place it):
        # count what it requests rather than drop it from the books.
        if not node_name:
            raise InvalidInput(f"{field}.metadata.{exc.field}", exc.problem) from exc
    if fraction == 1000:
        requests, fraction = requests._replace(gpu=1000), 0
    elif fraction:
        requests = requests._replace(gpu=fraction)
    return Pod(
        uid=_str(meta.get("uid"), f"{field}.metadata.uid") or f"{namespace}/{name}",
        namespace=intern(namespace),
        name=name,
        requests=requests,
        node_name=intern(node_name),
        phase=intern(_str(status.get("phase"), f"{field}.status.phase", "Pending") or "Pending"),
        priority=priority,
        priority_class=_str(spec.get("priorityClassName"), f"{field}.spec.priorityClassName"),
        labels=pod_labels,
        annotations=annotations,
        node_selector=_str_map(spec.get("nodeSelector"), f"{field}.spec.nodeSelector"),
        tolerations=_tolerations(spec.get("tolerations"), f"{field}.spec.tolerations"),
        required_affinity=_required_affinity(spec, f"{field}.spec"),
        scheduler_name=intern(
            _str(spec.get("schedulerName"), f"{field}.spec.schedulerName", "")
            or "default-scheduler"
        ),
        created=_timestamp(meta.get("creationTimestamp"), f"{field}.metadata.creationTimestamp"),
        deleting=meta.get("deletionTimestamp") is not None,
        started=_timestamp(status.get("startTime"), f"{field}.status.startTime"),
        gpu_fraction=fraction,
        gpu_ids=gpu_ids(annotations.get(labels.GPU_IDS, "")),
        scheduling_group=_str(
            json_object(spec.get("schedulingGroup"), f"{field}.spec.schedulingGroup").get(
                "podGroupName"
            ),
            f"{field}.spec.schedulingGroup.podGroupName",
        ),
        workload_ref=_workload_ref(spec.get("workloadRef"), f"{field}.spec.workloadRef"),
        gates=_gates(spec.get("schedulingGates"), f"{field}.spec.schedulingGates"),
        unschedulable=_unschedulable(status.get("conditions"), f"{field}.status.conditions"),
        soft_preferences=_soft_preferences(meta, spec, field),
        version=_str(meta.get("resourceVersion"), f"{field}.metadata.resourceVersion"),
    )


def _own_notes(value: Any, field: str) -> dict[str, str]:
    """The ``muster.io/`` entries of an annotation map (every entry is still checked).
    Agents write other annotations on nodes often (network plugins, autoscalers, operators):
    kept, each such write would look like a new node to the cache and the planner."""
    notes = _str_map(value, field)
    return {key: text for key, text in notes.items() if key.startswith(labels.PREFIX)}


def _unschedulable(value: Any, field: str) -> bool:
    """Whether a pod's conditions say kube-scheduler failed to place it (``PodScheduled``
    ``False``)."""
    if value is None:
        return False
    if not isinstance(value, list):
        raise InvalidInput(field, f"expected a list, got {type(value).__name__}")
    for i, condition in enumerate(value):
        item = json_object(condition, f"{field}[{i}]")
        if item.get("type") == "PodScheduled" and item.get("status") == "False":
            return True
    return False


def _workload_ref(value: Any, field: str) -> WorkloadRef | None:
    """A pod's ``spec.workloadRef`` (Kubernetes 1.35): ``name`` and ``podGroup`` required."""
    ref = json_object(value, field)
    if not ref:
        return None
    name = _str(ref.get("name"), f"{field}.name")
    group = _str(ref.get("podGroup"), f"{field}.podGroup")
    for key, given in (("name", name), ("podGroup", group)):
        if not given:
            raise InvalidInput(f"{field}.{key}", "missing")
    return WorkloadRef(
        name, group, _str(ref.get("podGroupReplicaKey"), f"{field}.podGroupReplicaKey")
    )


def _gates(value: Any, field: str) -> tuple[str, ...]:
    """The names in ``spec.schedulingGates`` (``[{"name": ...}]``)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidInput(field, f"expected a list, got {type(value).__name__}")
    names = []
    for i, item in enumerate(value):
        gate = json_object(item, f"{field}[{i}]")
        names.append(_str(gate.get("name"), f"{field}[{i}].name"))
    return tuple(names)


def gpu_fraction(
    pod_labels: Mapping[str, str], annotations: Mapping[str, str], requests: Resources
) -> int:
    """The share of one GPU a pod asks for, in milli-GPU (0 = none; 1000 = a whole GPU).

    From ``muster.io/gpu-fraction`` (or KAI's ``gpu-fraction``), label or annotation: a
    decimal in (0, 1]. Raises ``InvalidInput`` (field: the key) for anything else, and for a
    pod that also requests ``nvidia.com/gpu`` (a share and whole GPUs cannot be combined).
    """
    found = labels.first(labels.GPU_FRACTION_KEYS, pod_labels, annotations)
    if found is None:
        return 0
    key, text = found
    where = f"labels[{key}]" if key in pod_labels else f"annotations[{key}]"
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 1:  # also refuses nan and inf
        raise InvalidInput(where, f"expected a share of one GPU in (0, 1], got {text!r}")
    milli = round(value * 1000)
    if milli < 1:
        raise InvalidInput(where, f"{text!r} is below the smallest share, 0.001")
    if requests.gpu:
        raise InvalidInput(
            where, f"a GPU share cannot be combined with a {GPU} request; ask for one or the other"
        )
    return milli


def gpu_ids(text: str) -> tuple[int, ...]:
    """GPU indices from a ``muster.io/gpu-ids`` value (``"0,1"``); empty if unparsable."""
    try:
        ids = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        return ()
    return ids if len(set(ids)) == len(ids) and all(i >= 0 for i in ids) else ()


def node_from_dict(data: Any, field: str = "Node") -> Node:
    """Build a ``Node`` from its API JSON (allocatable, else capacity; labels; taints; Muster's
    own annotations)."""
    data = json_object(data, field)
    meta = json_object(data.get("metadata"), f"{field}.metadata")
    spec = json_object(data.get("spec"), f"{field}.spec")
    status = json_object(data.get("status"), f"{field}.status")
    name = _str(meta.get("name"), f"{field}.metadata.name")
    if not name:
        raise InvalidInput(f"{field}.metadata.name", "missing")
    # Capacity is checked even when allocatable (what counts) is given.
    capacity = resources_from_map(status.get("capacity"), f"{field}.status.capacity")
    allocatable = status.get("allocatable")
    taints = []
    for i, item in enumerate(json_list(spec.get("taints"), f"{field}.spec.taints")):
        f = f"{field}.spec.taints[{i}]"
        item = json_object(item, f)
        taints.append(
            Taint(
                key=_str(item.get("key"), f"{f}.key"),
                value=_str(item.get("value"), f"{f}.value"),
                effect=_str(item.get("effect"), f"{f}.effect", "NoSchedule"),
            )
        )
    unschedulable = spec.get("unschedulable", False)
    if not isinstance(unschedulable, bool) and unschedulable is not None:
        raise InvalidInput(f"{field}.spec.unschedulable", "expected a boolean")
    return Node(
        name=name,
        allocatable=capacity
        if allocatable is None
        else resources_from_map(allocatable, f"{field}.status.allocatable"),
        labels=_str_map(meta.get("labels"), f"{field}.metadata.labels"),
        annotations=_own_notes(meta.get("annotations"), f"{field}.metadata.annotations"),
        taints=tuple(taints),
        unschedulable=bool(unschedulable),
    )
