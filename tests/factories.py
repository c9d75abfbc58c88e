"""Small factories for scenario tables: pods and nodes as API JSON or model values."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from app.core.model.parse import node_from_dict, pod_from_dict
from app.core.model.values import Node, Pod

_uids = itertools.count(1)
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def pod_json(
    name: str | None = None,
    *,
    gpu: int | str = 0,
    cpu: str = "100m",
    memory: str = "128Mi",
    namespace: str = "default",
    uid: str | None = None,
    node: str = "",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    affinity_terms: list[dict[str, Any]] | None = None,
    priority: int = 0,
    priority_class: str = "",
    phase: str = "Pending",
    created: float | None = None,
) -> dict[str, Any]:
    """A pod as the API server would send it (one container).

    ``created`` is seconds after 2026-01-01T00:00:00Z (the creation timestamp).
    """
    n = next(_uids)
    name = name or f"pod-{n}"
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "pause", "resources": {"requests": requests}}],
        "priority": priority,
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node:
        spec["nodeName"] = node
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if affinity_terms is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": affinity_terms
                }
            }
        }
    stamp = (
        (EPOCH + timedelta(seconds=created)).strftime("%Y-%m-%dT%H:%M:%SZ")
        if created is not None
        else None
    )
    return {
        "metadata": {
            "creationTimestamp": stamp,
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}-{n}",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec,
        "status": {"phase": phase},
    }


def pod(name: str | None = None, **kwargs: Any) -> Pod:
    """A model ``Pod`` (see ``pod_json`` for the keywords)."""
    return pod_from_dict(pod_json(name, **kwargs))


def node_json(
    name: str,
    *,
    gpus: int = 8,
    cpu: str = "64",
    memory: str = "512Gi",
    pods: int = 110,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    """A node as the API server would send it."""
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods), "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"capacity": allocatable, "allocatable": allocatable},
    }


def node(name: str, **kwargs: Any) -> Node:
    """A model ``Node`` (see ``node_json`` for the keywords)."""
    return node_from_dict(node_json(name, **kwargs))
