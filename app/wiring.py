"""The composition root: the one place that builds Muster's scheduling graph.

Domain classes take their collaborators as constructor parameters and build none of them;
this module decides which ones they get, from ``Settings`` and the edge pieces the caller
owns (the cache it fills, the gateway to the cluster, the clocks). The server
(``app.services``) and the simulator (``app.sim.policies``) both call ``build_graph``, so they
run the same graph; the simulator passes its simulated clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from app.core.cycle.leadership import Leadership
from app.core.cycle.loop import PlannerLoop
from app.core.cycle.planner import Planner
from app.core.insight.census import CensusTaker
from app.core.insight.headlines import GangLines, Headlines
from app.core.insight.shares import ShareHistory, ShareSampler, pending_pods
from app.core.policies.fgd import default_policy
from app.core.policies.gangorder import gang_order
from app.core.policies.gpuplacement import GpuPlacement
from app.core.policies.minruntime import MinRuntime
from app.core.state.bindadmission import BindAdmission
from app.core.state.cache import ClusterCache
from app.core.state.domains import trees_ahead
from app.core.state.gateway import Gateway
from app.core.state.journal import Journal
from app.core.state.queuefile import QueueFile
from app.core.state.timings import Timings
from app.core.verbs.barrier import Barrier
from app.core.verbs.bind import Binder, device_chooser, plan_recorder
from app.core.verbs.extender import Extender
from app.core.verbs.gangbind import BindRequest, GangBinder
from app.settings import Settings

#: Seconds from some fixed point: ``time.monotonic`` on the server, simulated time in the
#: simulator.
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Graph:
    """Everything ``build_graph`` wired, for the server's handlers and the simulator."""

    settings: Settings
    cache: ClusterCache
    gateway: Gateway
    queues: QueueFile
    planner: Planner
    #: The live GPU placement policy (strategy ``muster`` only).
    gpu: GpuPlacement | None
    binder: Binder
    gang_binder: GangBinder
    extender: Extender
    loop: PlannerLoop
    #: Recent decisions and cumulative counters (``/debug/events``, metrics).
    journal: Journal
    #: How long planner cycles take (metrics).
    timings: Timings
    #: Each waiting gang's ``category: summary`` per cycle (filter reasons, events, metrics).
    headlines: Headlines
    #: Gangs, queues and free GPUs counted for metrics (on the headlines' per-cycle look).
    census: CensusTaker
    #: Queue shares over time, sampled by ``sampler`` once it is started (the server does).
    shares: ShareHistory
    sampler: ShareSampler
    #: Every gang's brief story with its ETA, at most once per planner cycle (the dashboard).
    gang_lines: GangLines
    leadership: Leadership


def build_cache(settings: Settings, *, clock: Clock = time.monotonic) -> ClusterCache:
    """An empty cluster cache for ``settings`` (the caller fills it)."""
    return ClusterCache(
        assume_ttl=settings.assume_ttl_seconds,
        clock=clock,
        nodes_ahead=trees_ahead(settings.topology_keys),
    )


def build_graph(
    settings: Settings,
    cache: ClusterCache,
    gateway: Gateway,
    *,
    clock: Clock = time.monotonic,
    wall: Clock = time.time,
    queues: QueueFile | None = None,
    lease_held: Callable[[], bool] | None = None,
    bind_admission: BindAdmission | None = None,
) -> Graph:
    """Wire the planner, GPU placement, binders, extender and planner loop over ``cache``.

    ``clock`` times plans, reservations and the bind barrier; ``wall`` is the epoch time pods'
    start times are compared with. ``queues`` defaults to ``settings.queue_file`` (``None``:
    one open queue); the simulator passes a fixed configuration instead. ``lease_held`` tells
    whether this replica holds the leader Lease (``None``: it always leads, see
    ``Leadership``). ``bind_admission`` says whether a gang's Bindings go as dry runs first
    (``None``: always, where the gateway is a real API server).
    """
    if queues is None:
        queues = QueueFile(settings.queue_file)
    journal = Journal(wall=wall)
    timings = Timings()
    planner = Planner(
        cache,
        strategy=settings.strategy,
        plan_ttl=settings.plan_ttl_seconds,
        clock=clock,
        queues=queues,
        scheduler_name=settings.scheduler_name,
        default_runtime=settings.default_runtime_seconds,
        wall=wall,
        min_runtime=settings.min_runtime_seconds,
        preemption=settings.preemption,
        topology_keys=settings.topology_keys,
        protection=MinRuntime(lambda: queues.config, settings.min_runtime_seconds),
        journal=journal,
        timings=timings,
        order=gang_order(
            settings.gang_order,
            settings.longest_first_window_seconds,
            settings.default_runtime_seconds,
        ),
        leads=lambda: leadership.may_decide,  # ``leadership`` is bound below
    )
    gpu = GpuPlacement(default_policy()) if settings.strategy == "muster" else None
    binder = Binder(cache, gateway, device_chooser(planner, gpu, cache), plan_recorder(planner))
    leadership = Leadership(planner, cache, lease_held)
    barrier: Barrier[BindRequest] = Barrier(settings.bind_barrier_seconds)
    gang_binder = GangBinder(
        cache, planner, binder, gateway, barrier, clock=clock, journal=journal,
        dry_run_wanted=bind_admission.dry_run_wanted if bind_admission is not None else None,
    )  # fmt: skip
    headlines = Headlines(
        lambda: planner.look(wait=False),
        lambda: planner.cycles,
        clock=clock,
        members=cache.gang_size_of,
    )
    extender = Extender(
        cache,
        planner,
        gang_binder,
        strategy=settings.strategy,
        gpu=gpu,
        headline=headlines,
        sole_pick=settings.sole_pick,
    )
    loop = PlannerLoop(
        planner,
        gateway,
        poll=settings.planner_poll_seconds,
        queues=queues,
        news=headlines.news,
        journal=journal,
        wall=wall,
        active=lambda: leadership.leading,
        clock=clock,
    )
    shares = ShareHistory(settings.share_history)
    sampler = ShareSampler(
        shares,
        lambda: planner.usage(pending_pods(cache.snapshot())),
        interval=settings.share_interval_seconds,
        wall=wall,
    )
    gang_lines = GangLines(planner.look, lambda: planner.cycles, clock)
    return Graph(
        settings,
        cache,
        gateway,
        queues,
        planner,
        gpu,
        binder,
        gang_binder,
        extender,
        loop,
        journal,
        timings,
        headlines,
        # The headlines' once-per-cycle outlook, or (planner busy) the next one, waited for.
        CensusTaker(lambda: headlines.outlook() or planner.look()),
        shares,
        sampler,
        gang_lines,
        leadership,
    )
