"""Read-only views of the cache for people debugging with curl."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from app.core.gpu.ledger import device_count
from app.core.gpu.links import topology_of
from app.core.model.quantity import format_milli
from app.core.model.queues import UNLIMITED
from app.core.model.values import RESOURCE_NAMES, Node, Resources
from app.core.policies.drf import deserved, dominant_share
from app.core.policies.proportion import ledger
from app.core.state.cache import NodeView

router = APIRouter(prefix="/debug", tags=["debug"])


def _amounts(resources: Resources) -> dict[str, str]:
    return {n: format_milli(n, v) for n, v in zip(RESOURCE_NAMES, resources, strict=True)}


@router.get("/nodes", summary="Every node with capacity, used and free resources")
def nodes(request: Request) -> dict[str, Any]:
    """Per node: allocatable, used (assumed binds included), free, GPUs and pod count."""
    snapshot = request.app.state.muster.cache.snapshot()
    view = snapshot.view
    pods_per_node: dict[str, int] = {}
    for node in snapshot.placement.values():
        pods_per_node[node] = pods_per_node.get(node, 0) + 1
    holders: dict[tuple[str, int], list[str]] = {}
    for uid, held in snapshot.devices.items():
        pod = snapshot.pods.get(uid)
        for d in held.devices:
            holders.setdefault((held.node, d), []).append(pod.key if pod else uid)
    items = []
    for node in view.nodes:
        used = view.used_of(node.name)
        free = view.free_of(node.name)
        items.append(
            {
                "name": node.name,
                "gpuModel": node.gpu_model,
                "unschedulable": node.unschedulable,
                "taints": [f"{t.key}={t.value}:{t.effect}" for t in node.taints],
                "labels": dict(node.labels),
                "allocatable": _amounts(node.allocatable),
                "used": _amounts(used),
                "free": _amounts(free),
                "gpus": {
                    "total": node.allocatable.gpu / 1000,
                    "used": used.gpu / 1000,
                    "free": free.gpu / 1000,
                    "devices": _devices(view, node, holders),
                    "topology": topology_of(node).as_dict(),
                },
                "pods": pods_per_node.get(node.name, 0),
            }
        )
    return {"generation": view.generation, "count": len(items), "nodes": items}


def _devices(
    view: NodeView, node: Node, holders: dict[tuple[str, int], list[str]]
) -> list[dict[str, Any]]:
    """Per GPU of ``node``: index, free share (1.0 = idle) and the pods holding it."""
    row = view.index[node.name]
    free = view.gpu_free[row]
    return [
        {"index": d, "free": int(free[d]) / 1000, "pods": holders.get((node.name, d), [])}
        for d in range(device_count(node))
    ]


@router.get("/pods", summary="Every pod the cache knows, with its placement")
def pods(request: Request) -> dict[str, Any]:
    """Per pod: where it counts (bound, assumed while a bind is in flight, or pending)."""
    snapshot = request.app.state.muster.cache.snapshot()
    items = []
    for uid, pod in snapshot.pods.items():
        node = snapshot.placement.get(uid, "")
        if pod.terminal:
            state = pod.phase.lower()
        elif uid in snapshot.assumed:
            state = "assumed"
        else:
            state = "bound" if node else "pending"
        items.append(
            {
                "namespace": pod.namespace,
                "name": pod.name,
                "uid": uid,
                "node": node,
                "state": state,
                "phase": pod.phase,
                "priority": pod.priority,
                "requests": _amounts(pod.requests),
                "gpuShare": pod.gpu_fraction / 1000 if pod.gpu_fraction else None,
                "gpuIds": list(snapshot.devices[uid].devices) if uid in snapshot.devices else [],
            }
        )
    items.sort(key=lambda p: (p["namespace"], p["name"]))
    return {"count": len(items), "pods": items}


@router.get("/gangs", summary="Every gang with its state, plan and current reason")
def gangs(request: Request) -> dict[str, Any]:
    """Per gang: waiting / planned / binding / running, members seen and bound, the plan
    (member -> node), elastic members, age and why it waits."""
    services = request.app.state.muster
    items = services.extender.planner.describe()
    waiting = services.extender.binder.waiting
    for item in items:
        item["atBarrier"] = waiting.get(item["gang"], 0)
    return {"count": len(items), "gangs": items}


@router.get("/queues", summary="The queue tree with quotas, usage, borrowing and fair shares")
def queues(request: Request) -> dict[str, Any]:
    """Per queue: guaranteed, limit, weight, usage, borrowed, lent, fair share (deserved) and
    pending demand; plus the configuration file and its last error, if any."""
    services = request.app.state.muster
    planner = services.extender.planner
    snapshot = services.cache.snapshot()
    pending = [p for uid, p in snapshot.pods.items() if not snapshot.placement.get(uid)]
    usage = planner.usage(pending)
    fair = deserved(usage)
    book = ledger(usage)
    config = usage.config
    zero = Resources()

    def amounts(values: Any) -> dict[str, str]:
        return _amounts(Resources(*(int(v) for v in values)))

    rows = []
    for depth, queue in config.walk():
        borrowed, lent = book.get(queue.name, (zero, zero))
        rows.append(
            {
                "name": queue.name,
                "parent": queue.parent,
                "depth": depth,
                "weight": queue.weight,
                "borrowing": queue.borrowing,
                "guaranteed": _amounts(queue.guaranteed),
                "limit": _limits(queue.limit),
                "usage": amounts(usage.of(queue.name)),
                "borrowed": amounts(borrowed),
                "lent": amounts(lent),
                "fairShare": amounts(fair.get(queue.name, zero)),
                "pending": amounts(usage.pending.get(queue.name, zero)),
                "dominantShare": round(dominant_share(usage, queue.name) * queue.weight, 4),
            }
        )
    source = planner.queues
    return {
        "file": str(source.path) if source.path else None,
        "configError": source.error,
        "defaultQueue": config.default_queue,
        "namespaces": dict(config.namespaces),
        "unknownQueues": usage.unknown,
        "queues": rows,
    }


def _limits(limit: Resources) -> dict[str, str]:
    return {
        name: ("unlimited" if value >= UNLIMITED else format_milli(name, value))
        for name, value in zip(RESOURCE_NAMES, limit, strict=True)
    }
