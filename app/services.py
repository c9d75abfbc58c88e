"""What one server instance holds: settings, cache, gateway, extender, metrics, cluster sync."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from app.api.metrics import Metrics
from app.core.admission.pods import NamespaceReader, OwnerReader
from app.core.cycle.loop import PlannerLoop
from app.core.cycle.planner import Planner
from app.core.model.clusterfile import load_cluster_file
from app.core.state.cache import ClusterCache
from app.core.state.gateway import Gateway, InMemoryGateway
from app.core.state.queuefile import QueueFile
from app.core.verbs.extender import Extender
from app.settings import DEMO_CLUSTER, Settings

log = logging.getLogger("muster")


class Source(Protocol):
    """Something that keeps the cache filled (the Kubernetes watch)."""

    def start(self) -> None: ...
    def stop(self, timeout: float = 5.0) -> None: ...


@dataclass
class Services:
    """The collaborators behind the HTTP handlers, created per app (nothing global)."""

    settings: Settings
    cache: ClusterCache
    gateway: Gateway
    extender: Extender
    metrics: Metrics
    source: Source | None = None
    planner_loop: PlannerLoop | None = None
    #: Cluster mode: cached readers of pod owners and namespaces for the admission webhook
    #: (standalone: ``None``, owners unknown).
    owners: OwnerReader | None = None
    namespaces: NamespaceReader | None = None

    def start(self) -> None:
        """Start filling the cache (cluster mode) and the planner's background loop."""
        if self.source is not None:
            self.source.start()
        if self.planner_loop is not None:
            self.planner_loop.start()

    def stop(self) -> None:
        """Stop background work."""
        if self.planner_loop is not None:
            self.planner_loop.stop()
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
    cache = ClusterCache(assume_ttl=settings.assume_ttl_seconds)
    source: Source | None = None
    owners: OwnerReader | None = None
    namespaces: NamespaceReader | None = None
    if settings.mode == "cluster":
        from app.k8s.config import load_api_client
        from app.k8s.gateway import KubeGateway
        from app.k8s.owners import NamespaceLister, OwnerLister
        from app.k8s.sync import ClusterSync

        api = api_client or load_api_client(settings.kubeconfig, settings.in_cluster or None)
        gateway = gateway or KubeGateway(api)
        source = ClusterSync(cache, api)
        owners, namespaces = OwnerLister(api), NamespaceLister(api)
    else:
        path = settings.cluster_file or DEMO_CLUSTER
        cache.upsert_nodes(load_cluster_file(path))
        cache.mark_synced()
        gateway = gateway or InMemoryGateway(cache)
    queues = QueueFile(settings.queue_file)
    planner = Planner(
        cache,
        strategy=settings.strategy,
        plan_ttl=settings.plan_ttl_seconds,
        queues=queues,
        scheduler_name=settings.scheduler_name,
        default_runtime=settings.default_runtime_seconds,
        min_runtime=settings.min_runtime_seconds,
        preemption=settings.preemption,
        topology_keys=settings.topology_keys,
    )
    extender = Extender(
        cache,
        gateway,
        strategy=settings.strategy,
        planner=planner,
        barrier_timeout=settings.bind_barrier_seconds,
    )
    loop = PlannerLoop(planner, gateway, queues=queues)
    return Services(settings, cache, gateway, extender, Metrics(), source, loop, owners, namespaces)
