"""What one server instance holds: settings, cache, gateway, extender, cluster sync.

``build_services`` assembles the server's edge pieces (the cache filled from a cluster file or
a watch, the gateway to the cluster) and gets the scheduling graph from the composition root
``app.wiring``, as the simulator does. The HTTP layer's own pieces (Prometheus metrics) are
the app factory's (``app.main``).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from app.core.admission.pods import NamespaceReader, OwnerReader
from app.core.cycle.leadership import Leadership
from app.core.cycle.loop import PlannerLoop
from app.core.insight.census import CensusTaker
from app.core.insight.headlines import GangLines
from app.core.insight.shares import ShareHistory, ShareSampler
from app.core.model.clusterfile import load_cluster_file
from app.core.model.errors import MusterError
from app.core.model.labels import HOLD_RECORD, LEADER_ENDPOINT
from app.core.state.bindadmission import BindAdmission
from app.core.state.cache import ClusterCache
from app.core.state.gateway import Gateway, InMemoryGateway
from app.core.state.journal import Journal
from app.core.state.timings import Timings
from app.core.verbs.extender import Extender
from app.heap import freeze_heap
from app.settings import DEMO_CLUSTER, Settings
from app.wiring import Graph, build_cache, build_graph

log = logging.getLogger("muster")


class Source(Protocol):
    """Something that keeps the cache filled (the Kubernetes watch)."""

    def start(self) -> None: ...
    def stop(self, timeout: float = 5.0) -> None: ...


class Election(Protocol):
    """The leader election (``app.k8s.lease.LeaseElector``)."""

    def start(self) -> None: ...
    def stop(self, timeout: float = 5.0) -> None: ...
    def stats(self) -> dict[str, object]: ...
    def leader_annotations(self) -> Mapping[str, str] | None: ...


@dataclass
class Services:
    """The collaborators behind the HTTP handlers, created per app (nothing global)."""

    settings: Settings
    cache: ClusterCache
    gateway: Gateway
    extender: Extender
    source: Source | None = None
    planner_loop: PlannerLoop | None = None
    #: Cluster mode: cached readers of pod owners and namespaces for the admission webhook
    #: (standalone: ``None``, owners unknown).
    owners: OwnerReader | None = None
    namespaces: NamespaceReader | None = None
    #: The decision journal (``/debug/events``, metrics); ``None`` when the caller built the
    #: services without a graph.
    journal: Journal | None = None
    timings: Timings | None = None
    census: CensusTaker | None = None
    #: Queue shares over time, sampled while the server runs (``/debug/queues/history``).
    shares: ShareHistory | None = None
    sampler: ShareSampler | None = None
    #: Every gang's brief story with its ETA (``/debug/gangs/outlook``).
    gang_lines: GangLines | None = None
    #: Whether this replica decides (always, unless it runs for a Lease).
    leadership: Leadership | None = None
    #: The leader election (``--leader-elect``): started after the cache, stopped first.
    election: Election | None = None

    @property
    def leading(self) -> bool:
        """Whether this replica may serve the extender verbs and decide now."""
        return self.leadership is None or self.leadership.leading

    @property
    def leader_url(self) -> str | None:
        """Where the leader (another replica) serves the verbs; None if unknown."""
        if self.election is None:
            return None
        annotations = self.election.leader_annotations()
        return (annotations or {}).get(LEADER_ENDPOINT) or None

    #: Whether the webhook creates gang members behind Muster's scheduling gate.
    gang_gate: bool = False
    #: Cluster mode: what admission may see of Bindings, so whether gangs bind after dry runs.
    bind_admission: BindAdmission | None = None

    def start(self) -> None:
        """Start filling the cache (cluster mode), the election and the planner's loop."""
        if self.source is not None:
            self.source.start()
        if self.election is not None:
            self.election.start()
        if self.planner_loop is not None:
            self.planner_loop.start()
        if self.sampler is not None:
            self.sampler.start()

    def stop(self) -> None:
        """Stop background work (a leader releases its Lease)."""
        if self.sampler is not None:
            self.sampler.stop()
        if self.planner_loop is not None:
            self.planner_loop.stop()
        if self.election is not None:
            self.election.stop()
        if self.source is not None:
            self.source.stop()


def build_services(
    settings: Settings, *, gateway: Gateway | None = None, api_client: Any = None
) -> Services:
    """Wire up a server for ``settings``.

    Standalone mode loads the cluster file (or the demo cluster) now and uses the in-memory
    gateway; cluster mode connects to the API server (``api_client``, or one from the settings)
    and fills the cache from a list+watch once started.
    """
    cache = build_cache(settings)
    source: Source | None = None
    owners: OwnerReader | None = None
    namespaces: NamespaceReader | None = None
    election: Any = None
    if settings.leader_elect and settings.mode != "cluster":
        raise MusterError("leader election needs cluster mode (a kubeconfig or in-cluster)")
    gang_gate = False
    bind_admission: BindAdmission | None = None
    if settings.mode == "cluster":
        from app.k8s.admission import AdmissionSync
        from app.k8s.config import load_api_client
        from app.k8s.gateway import KubeGateway
        from app.k8s.groups import GroupSync, PriorityClasses
        from app.k8s.owners import NamespaceLister, OwnerLister
        from app.k8s.served import KubeGroupApi
        from app.k8s.sync import ClusterSync

        api = api_client or load_api_client(settings.kubeconfig, settings.in_cluster or None)
        gateway = gateway or KubeGateway(api)
        groups = GroupSync(
            cache,
            KubeGroupApi(api),
            priority_of=PriorityClasses(api),
            rediscover=settings.group_discovery_seconds,
        )
        bind_admission = BindAdmission(settings.bind_dry_run)
        admission = AdmissionSync(
            bind_admission, KubeGroupApi(api), rediscover=settings.group_discovery_seconds
        )
        source = ClusterSync(cache, api, groups=groups, admission=admission, on_synced=freeze_heap)
        owners, namespaces = OwnerLister(api), NamespaceLister(api)
        if settings.leader_elect:
            election = _elector(settings, api, cache, lambda: graph)
        gang_gate = settings.scheduling_gates == "on"
        if settings.scheduling_gates == "auto":
            from app.k8s.features import server_version, serves_scheduling_gates

            gang_gate = serves_scheduling_gates(server_version(api))
    else:
        path = settings.cluster_file or DEMO_CLUSTER
        cache.upsert_nodes(load_cluster_file(path))
        cache.mark_synced()
        gateway = gateway or InMemoryGateway(cache)
    graph = build_graph(
        settings, cache, gateway, lease_held=(lambda: election.held) if election else None,
        bind_admission=bind_admission,
    )  # fmt: skip
    return Services(
        settings,
        cache,
        gateway,
        graph.extender,
        source,
        graph.loop,
        owners,
        namespaces,
        graph.journal,
        graph.timings,
        graph.census,
        graph.shares,
        graph.sampler,
        graph.gang_lines,
        graph.leadership,
        election,
        gang_gate,
        bind_admission,
    )


def _elector(settings: Settings, api: Any, cache: ClusterCache, graph: Callable[[], Graph]) -> Any:
    """The ``LeaseElector`` of this replica: it runs once the cache has synced, takes over
    (``Leadership.take_over``) when it wins and steps down when it loses."""
    from app.k8s.lease import LeaseElector

    identity = settings.identity or f"{socket.gethostname()}-{os.getpid()}"
    try:
        return LeaseElector(
            api,
            namespace=settings.muster_namespace,
            name=settings.lease_name,
            identity=identity,
            lease_duration=settings.lease_duration_seconds,
            renew_deadline=settings.renew_deadline_seconds,
            retry_period=settings.retry_period_seconds,
            can_lead=lambda: cache.synced,
            on_started=lambda annotations: graph().leadership.take_over(annotations),
            on_stopped=lambda: graph().leadership.step_down(),
            annotations=lambda: {
                HOLD_RECORD: graph().planner.hold_record(),
                LEADER_ENDPOINT: settings.advertise_url,
            },
        )
    except ValueError as exc:  # the three durations out of order
        raise MusterError(str(exc)) from exc
