"""Prometheus metrics of one app instance (its own registry: nothing global).

The HTTP layer owns them: the app factory (``app.main``) creates one ``Metrics`` per app
(``app.state.metrics``) and the handlers record into it; nothing below ``app.api`` knows them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from fastapi import APIRouter, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from app.services import Services

_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
            1.0, 2.5, 5.0)  # fmt: skip


class Metrics:
    """``muster_*`` metrics: per-verb requests and latency, filter and bind outcomes."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "muster_extender_requests",
            "Extender calls by verb and HTTP status code.",
            ["verb", "code"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "muster_extender_request_duration_seconds",
            "Time to answer an extender call, by verb.",
            ["verb"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.filter_nodes = Counter(
            "muster_filter_nodes",
            "Candidate nodes judged by filter: feasible, failed or unresolvable.",
            ["result"],
            registry=self.registry,
        )
        self.binds = Counter(
            "muster_binds", "Bind outcomes by reason.", ["result"], registry=self.registry
        )
        self.preempt_nodes = Counter(
            "muster_preempt_nodes",
            "Preemption candidate nodes kept or vetoed.",
            ["result"],
            registry=self.registry,
        )
        self.cache_nodes = Gauge(
            "muster_cache_nodes", "Nodes in the cache.", registry=self.registry
        )
        self.cache_pods = Gauge("muster_cache_pods", "Pods in the cache.", registry=self.registry)
        self.gpu_devices = Gauge(
            "muster_gpu_devices",
            "GPU devices by state: idle (fully free), shared (partly used), full.",
            ["state"],
            registry=self.registry,
        )
        self.gpu_free_on_shared = Gauge(
            "muster_gpu_free_on_shared_devices",
            "GPU (in GPUs) free on partly used devices: room only GPU shares can use.",
            registry=self.registry,
        )

    @contextmanager
    def observe(self, verb: str) -> Iterator[list[int]]:
        """Time a call; the caller may set ``status[0]`` to the HTTP code it answered."""
        status = [200]
        start = time.perf_counter()
        try:
            yield status
        except Exception as exc:
            status[0] = getattr(exc, "status", 500)
            raise
        finally:
            self.latency.labels(verb).observe(time.perf_counter() - start)
            self.requests.labels(verb, str(status[0])).inc()


router = APIRouter(tags=["operations"])


@router.get("/metrics", summary="Prometheus metrics")
def metrics(request: Request) -> Response:
    """Prometheus text exposition of this server's metrics."""
    services: Services = request.app.state.muster
    mine: Metrics = request.app.state.metrics
    snapshot = services.cache.snapshot()
    mine.cache_nodes.set(len(snapshot.view.nodes))
    mine.cache_pods.set(len(snapshot.pods))
    view = snapshot.view
    free = view.gpu_free
    exists = np.arange(free.shape[1]) < (view.allocatable[:, 0] // 1000)[:, None]
    idle = exists & (free >= 1000)
    full = exists & (free <= 0)
    shared = exists & ~idle & ~full
    for state, mask in (("idle", idle), ("shared", shared), ("full", full)):
        mine.gpu_devices.labels(state).set(int(mask.sum()))
    mine.gpu_free_on_shared.set(float(free[shared].sum()) / 1000)
    return Response(generate_latest(mine.registry), media_type=CONTENT_TYPE_LATEST)
