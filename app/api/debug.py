"""Read-only views of the cache for people debugging with curl."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from app.api.schemas import errors
from app.core.gpu.ledger import device_count
from app.core.gpu.links import topology_of
from app.core.insight.shares import pending_pods
from app.core.model.quantity import format_milli
from app.core.model.queues import UNLIMITED
from app.core.model.values import RESOURCE_NAMES, Node, Resources
from app.core.policies.drf import deserved, dominant_share
from app.core.policies.proportion import ledger
from app.core.state.journal import Entry, Journal, Kind
from app.core.state.view import NodeView

router = APIRouter(prefix="/debug", tags=["debug"])


def _amounts(resources: Resources) -> dict[str, str]:
    return {n: format_milli(n, v) for n, v in zip(RESOURCE_NAMES, resources, strict=True)}


@router.get("/nodes", summary="Every node with capacity, used and free resources")
def nodes(
    request: Request,
    since: Annotated[
        int | None, Query(ge=0, description="a generation seen before: unchanged, no nodes")
    ] = None,
) -> dict[str, Any]:
    """Per node: allocatable, used (assumed binds included), free, GPUs and pod count; plus
    the topology label keys (broadest first). With ``since`` equal to the current generation
    the answer is just ``{"generation", "unchanged": true}`` (a poller's cheap no-op)."""
    services = request.app.state.muster
    snapshot = services.cache.snapshot()
    view = snapshot.view
    if since is not None and since == view.generation:
        return {"generation": view.generation, "unchanged": True}
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
    return {
        "generation": view.generation,
        "topologyKeys": list(services.settings.topology_keys),
        "count": len(items),
        "nodes": items,
    }


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


@router.get("/groups", summary="Gang objects (PodGroups, Workload groups) read from the API")
def groups(request: Request) -> dict[str, Any]:
    """Every group object the cache holds (``app.core.model.groupobjects``): where it comes
    from, what it says (minMember, queue, priority, timeout, minResources), and why it cannot be
    used as it stands (``problem``)."""
    items = [
        {
            "source": g.source,
            "object": g.display,
            "apiVersion": g.api_version,
            "namespace": g.namespace,
            "name": g.name,
            "gang": g.gang,
            "minMember": g.min_member,
            "queue": g.queue or None,
            "priorityClassName": g.priority_class or None,
            "priority": g.priority,
            "timeoutSeconds": g.timeout,
            "minResources": _amounts(g.min_resources) if g.min_resources else None,
            "problem": g.problem,
        }
        for g in request.app.state.muster.cache.groups()
    ]
    return {"count": len(items), "groups": items}


@router.get("/queues", summary="The queue tree with quotas, usage, borrowing and fair shares")
def queues(request: Request) -> dict[str, Any]:
    """Per queue: guaranteed, limit, weight, usage, borrowed, lent, fair share (deserved) and
    pending demand; plus the configuration file and its last error, if any."""
    services = request.app.state.muster
    planner = services.extender.planner
    snapshot = services.cache.snapshot()
    usage = planner.usage(pending_pods(snapshot))
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


#: Most entries one ``/debug/events`` answer carries.
MAX_EVENTS = 1000


class VictimOut(BaseModel):
    """A unit of running work evicted whole."""

    unit: str = Field(description="its gang (NAMESPACE/NAME) or pod:NAMESPACE/NAME")
    queue: str | None
    pods: int
    gpus: float = Field(description="GPUs it held")
    gpuSecondsLost: float = Field(description="GPU-seconds it had run, lost by the eviction")


class EventOut(BaseModel):
    """One decision of the scheduler."""

    seq: int = Field(description="grows by one per event; ask for since=SEQ to get newer ones")
    time: float = Field(description="wall-clock time, seconds since the epoch")
    kind: Kind
    gang: str = Field(description="NAMESPACE/NAME of the gang the decision is about")
    queue: str | None
    message: str
    nodes: list[str] = Field(description="planned nodes (plan), bound nodes (gang-started)")
    victims: list[VictimOut] = Field(description="preemption and reclaim only")
    gpuSecondsLost: float


class TotalsOut(BaseModel):
    """Cumulative counters since Muster started (they outlive the ring)."""

    counts: dict[Kind, int] = Field(description="events by kind")
    victims: dict[Kind, int] = Field(description="units evicted, by kind (preemption, reclaim)")
    gpuSecondsLost: dict[Kind, float] = Field(description="GPU-seconds lost, by kind")


class EventsOut(BaseModel):
    """A page of the decision journal, oldest first, and the cumulative counters."""

    events: list[EventOut]
    latest: int = Field(description="the newest sequence number written (0: none yet)")
    next: int = Field(description="pass as since= to get what comes after this page")
    missed: int = Field(description="events after since= the journal no longer holds")
    capacity: int = Field(description="how many recent events the journal keeps")
    totals: TotalsOut


def _event(entry: Entry) -> EventOut:
    return EventOut(
        seq=entry.seq,
        time=entry.time,
        kind=entry.kind,
        gang=entry.gang,
        queue=entry.queue,
        message=entry.message,
        nodes=list(entry.nodes),
        victims=[
            VictimOut(
                unit=v.key, queue=v.queue, pods=v.pods, gpus=v.gpus, gpuSecondsLost=v.gpu_seconds
            )
            for v in entry.victims
        ],
        gpuSecondsLost=entry.gpu_seconds_lost,
    )


@router.get(
    "/events",
    summary="Recent scheduling decisions: plans, preemptions, rollbacks, barrier timeouts",
    response_model=EventsOut,
    responses=errors(503, e503="this server has no decision journal"),
)
def events(
    request: Request,
    since: Annotated[
        int | None,
        Query(ge=0, description="only events with a larger sequence number (default: newest)"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_EVENTS, description="at most this many events")] = 100,
) -> EventsOut | JSONResponse:
    """The decision journal after ``since`` (oldest first, at most ``limit``); without
    ``since``, the newest ``limit`` events. Poll with ``since=next``."""
    journal: Journal | None = request.app.state.muster.journal
    if journal is None:
        return JSONResponse(
            {"error": "this server was built without a decision journal", "field": ""}, 503
        )
    page = journal.read(since, limit)
    totals = journal.totals()
    counters = TotalsOut(
        counts=totals.by_kind, victims=totals.victims, gpuSecondsLost=totals.gpu_seconds_lost
    )
    if page.entries:
        last = page.entries[-1].seq
    else:  # nothing new; a since= beyond latest (Muster restarted) starts over from latest
        last = page.latest if since is None else min(since, page.latest)
    events = [_event(e) for e in page.entries]
    return EventsOut(
        events=events, latest=page.latest, next=last, missed=page.missed,
        capacity=journal.capacity, totals=counters,
    )  # fmt: skip


@router.get("/leadership", summary="This replica's role, the Lease, and what it carried on")
def leadership(request: Request) -> dict[str, Any]:
    """Role (leader, taking-over, follower; always leader without election), the Lease as
    last seen, takeovers, what the last takeover carried on, and the head-of-line hold."""
    services = request.app.state.muster
    owner, holds, until = services.cache.holds
    body: dict[str, Any] = {
        "role": services.leadership.role if services.leadership else "leader",
        "election": services.election.stats() if services.election else None,
        "takeovers": services.leadership.takeovers if services.leadership else 0,
        "carried": list(services.leadership.carried) if services.leadership else [],
        "hold": {"owner": owner, "nodes": sorted(holds), "until": until} if owner else None,
    }
    return body


@router.get(
    "/binds", summary="Whether gangs bind after dry runs, and which admission sees Bindings"
)
def binds(request: Request) -> dict[str, Any]:
    """``dryRun``: whether a gang's Bindings go to the API server as dry runs before any member
    is bound; ``mode`` (``--bind-dry-run``); ``known``: whether the admission configurations
    have all been listed; ``seeBindings``: the webhooks (``CONFIG/WEBHOOK``) and policies whose
    rules match ``CREATE pods/binding``. Standalone: no API server, no dry runs."""
    admission = request.app.state.muster.bind_admission
    if admission is None:
        return {"mode": None, "known": True, "seeBindings": [], "dryRun": False}
    body: dict[str, Any] = admission.describe()
    return body
