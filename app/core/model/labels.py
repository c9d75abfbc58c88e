"""Every label and annotation key Muster reads or writes, in one place.

Muster's own keys use the ``muster.io/`` prefix. It also understands, as-is, the keys other
batch schedulers and job controllers put on pods, so workloads migrate without relabelling.
Keys are looked up in labels first, then annotations (conventions differ on which they use).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

PREFIX = "muster.io/"

# -- Muster's own ----------------------------------------------------------------------
POD_GROUP = "muster.io/pod-group"
MIN_MEMBER = "muster.io/min-member"
#: The scheduling gate (``spec.schedulingGates``) the webhook puts on gang members where the
#: API server serves gates (Kubernetes 1.27+); the planner loop removes it once the gang is
#: planned, so kube-scheduler never tries a member before that.
GANG_GATE = "muster.io/gang"
MAX_MEMBER = "muster.io/max-member"
GANG_TIMEOUT = "muster.io/gang-timeout"
QUEUE = "muster.io/queue"
GPU_FRACTION = "muster.io/gpu-fraction"
GPU_IDS = "muster.io/gpu-ids"
GPU_TOPOLOGY = "muster.io/gpu-topology"
#: Extended resource a GPU-share pod requests (count 1) so kube-scheduler's extender
#: ``managedResources`` route it to Muster; the share itself is ``GPU_FRACTION``.
GPU_SHARE_RESOURCE = "muster.io/gpu-share"
MANAGED_NAMESPACE = "muster.io/managed"
DEFAULT_QUEUE_ANNOTATION = "muster.io/default-queue"
#: Keep a gang's core in one topology domain of this level (or wait) / if any fits.
TOPOLOGY_REQUIRED = "muster.io/topology-required"
TOPOLOGY_PREFERRED = "muster.io/topology-preferred"
#: A gang's plan, written on each planned member (and carried by its Binding) so that the
#: next leader, or a restarted Muster, carries on with it (``app.core.cycle.records``).
PLAN_RECORD = "muster.io/plan"
#: Set on a member of a newly planned gang so kube-scheduler retries it now
#: (``app.core.cycle.loop``).
PLANNED_NUDGE = "muster.io/planned"
#: Annotations only Muster writes on pods, which planning never reads back: their echo from
#: the API server gives a planner cycle nothing new.
OWN_NOTES = frozenset({PLAN_RECORD, PLANNED_NUDGE})
#: The head-of-line hold in force, on the leader's Lease (``app.core.cycle.records``).
HOLD_RECORD = "muster.io/hold"
#: Where the leader serves the extender verbs, on its Lease (followers forward to it).
LEADER_ENDPOINT = "muster.io/endpoint"

# -- other schedulers' conventions -----------------------------------------------------
#: (group-name key, min-member key or None), in the order they are consulted.
GROUP_CONVENTIONS: tuple[tuple[str, str | None], ...] = (
    (POD_GROUP, MIN_MEMBER),
    ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io/min-available"),
    ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-min-member"),
    ("kueue.x-k8s.io/pod-group-name", "kueue.x-k8s.io/pod-group-total-count"),
    ("pod-group-name", "kai.scheduler/batch-min-member"),
    ("yunikorn.apache.org/task-group-name", None),
)
#: Queue keys, in the order they are consulted.
QUEUE_KEYS: tuple[str, ...] = (
    QUEUE,
    "kueue.x-k8s.io/queue-name",
    "scheduling.volcano.sh/queue-name",
    "kai.scheduler/queue",
    "yunikorn.apache.org/queue",
)
#: GPU fraction keys (KAI's ``gpu-fraction`` is accepted too).
GPU_FRACTION_KEYS: tuple[str, ...] = (GPU_FRACTION, "gpu-fraction")


def lookup(key: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> str | None:
    """The value of ``key`` in ``labels``, else in ``annotations``, else ``None``."""
    value = labels.get(key)
    if value is None:
        value = annotations.get(key)
    return value


def first(
    keys: tuple[str, ...], labels: Mapping[str, str], annotations: Mapping[str, str]
) -> tuple[str, str] | None:
    """``(key, value)`` for the first of ``keys`` that is set, else ``None``."""
    for key in keys:
        value = lookup(key, labels, annotations)
        if value:
            return key, value
    return None


_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_MAX_LABEL_VALUE = 63


def is_label_value(value: str) -> bool:
    """Whether ``value`` is a valid Kubernetes label value (and not empty)."""
    return 0 < len(value) <= _MAX_LABEL_VALUE and _LABEL_VALUE.fullmatch(value) is not None


def label_safe(name: str) -> str:
    """``name`` as a label value: itself when valid, else a readable prefix plus a hash.

    Deterministic, so every member of a gang gets the same value.
    """
    if is_label_value(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    cleaned = re.sub(r"[^-A-Za-z0-9_.]", "-", name)[: _MAX_LABEL_VALUE - 9].strip("-_.")
    return f"{cleaned}-{digest}" if cleaned else digest
