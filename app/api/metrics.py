"""Prometheus metrics of one app instance (its own registry: nothing global).

The HTTP layer owns them: the app factory (``app.main``) creates one ``Metrics`` per app
(``app.state.metrics``) and the handlers record into it; nothing below ``app.api`` knows them.
What the scheduler itself decided (the decision journal, cycle timings, the census of gangs,
queues and free GPUs) is read from the pure core when Prometheus scrapes, by
``SchedulerCollector``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
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
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from app.core.insight.census import Census
from app.core.model.categories import Category
from app.core.model.queues import UNLIMITED
from app.core.model.values import RESOURCE_NAMES
from app.services import Services

log = logging.getLogger("muster.metrics")

#: Bind answers that are part of forming a gang (kube-scheduler retries the pod), not errors.
BIND_WAITING = frozenset({"BarrierTimeout", "NoPlan", "NotPlanned", "Superseded"})

_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
            1.0, 2.5, 5.0)  # fmt: skip


class Metrics:
    """``muster_*`` metrics: per-verb requests and latency, filter and bind outcomes, webhook
    requests and latency; with ``services``, also what ``SchedulerCollector`` reads."""

    def __init__(self, services: Services | None = None) -> None:
        self.registry = CollectorRegistry()
        if services is not None:
            self.registry.register(SchedulerCollector(services))
        self.webhook_requests = Counter(
            "muster_webhook_requests",
            "Admission webhook calls by webhook (mutate, validate) and HTTP status code.",
            ["webhook", "code"],
            registry=self.registry,
        )
        self.webhook_latency = Histogram(
            "muster_webhook_request_duration_seconds",
            "Time to answer an admission review, by webhook.",
            ["webhook"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
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
        self.bind_errors = Counter(
            "muster_bind_errors",
            "Binds that failed: refused by the cache, the API server, or rolled back with their "
            "gang (not the expected answers of a gang still forming: "
            + ", ".join(sorted(BIND_WAITING))
            + ").",
            registry=self.registry,
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

    def bound(self, reason: str, error: str) -> None:
        """Count one bind answer (``error`` empty: bound)."""
        self.binds.labels(reason).inc()
        if error and reason not in BIND_WAITING:
            self.bind_errors.inc()

    @contextmanager
    def observe(self, verb: str) -> Iterator[list[int]]:
        """Time an extender call; the caller may set ``status[0]`` to the HTTP code it
        answered."""
        with _timed(self.requests, self.latency, verb) as status:
            yield status

    @contextmanager
    def observe_webhook(self, webhook: str) -> Iterator[list[int]]:
        """Time an admission review (``mutate`` or ``validate``), as ``observe``."""
        with _timed(self.webhook_requests, self.webhook_latency, webhook) as status:
            yield status


@contextmanager
def _timed(requests: Counter, latency: Histogram, label: str) -> Iterator[list[int]]:
    status = [200]
    start = time.perf_counter()
    try:
        yield status
    except Exception as exc:
        status[0] = getattr(exc, "status", 500)
        raise
    finally:
        latency.labels(label).observe(time.perf_counter() - start)
        requests.labels(label, str(status[0])).inc()


#: Prometheus base units per resource (amounts in the core are milli-units).
_UNITS = {"nvidia.com/gpu": 1000, "cpu": 1000, "memory": 1000, "pods": 1000}


class SchedulerCollector(Collector):
    """Reads the scheduler's state when Prometheus scrapes: the decision journal's counters,
    planner cycle timings, and a census of gangs, queues and free GPUs. Nothing is stored
    here; the core keeps the counts."""

    def __init__(self, services: Services) -> None:
        self._services = services

    def describe(self) -> Iterable[Metric]:
        """Nothing up front: the registry then does not call ``collect`` at registration."""
        return ()

    def collect(self) -> Iterator[Metric]:
        """Every family, read now."""
        services = self._services
        dry = GaugeMetricFamily(
            "muster_bind_dry_run",
            "1 while a gang's Bindings go to the API server as dry runs first (an admission "
            "webhook or policy may see Bindings, or that is not known); see /debug/binds.",
        )
        admission = services.bind_admission  # standalone: no API server, no dry runs
        dry.add_metric([], int(admission is not None and admission.dry_run_wanted()))
        yield dry
        if services.journal is not None:
            yield from _journal_families(services)
        if services.timings is not None:
            counts = services.timings.counts()
            yield HistogramMetricFamily(
                "muster_planner_cycle_duration_seconds",
                "Time one planner cycle took (order every pending gang, place, commit).",
                buckets=[(_le(b), n) for b, n in counts.buckets],
                sum_value=counts.total,
            )
        if services.census is None:
            return
        up = GaugeMetricFamily(
            "muster_census_up", "1 if the census of gangs, queues and GPUs could be taken."
        )
        try:
            taken = services.census.take()
        except Exception:  # a scrape must never fail because one census did
            log.exception("census for /metrics failed")
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from _census_families(taken)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def _journal_families(services: Services) -> Iterator[Metric]:
    assert services.journal is not None
    totals = services.journal.totals()
    decisions = CounterMetricFamily(
        "muster_decisions",
        "Scheduling decisions by kind (plan, preemption, reclaim, barrier-timeout, rollback, "
        "gang-started, plan-expired, plan-released); see GET /debug/events.",
        labels=["kind"],
    )
    for kind, n in totals.by_kind.items():
        decisions.add_metric([kind], n)
    yield decisions
    victims = CounterMetricFamily(
        "muster_preemption_victims",
        "Units of running work (whole gangs, elastic members, single pods) evicted, by kind "
        "(preemption, reclaim).",
        labels=["kind"],
    )
    lost = CounterMetricFamily(
        "muster_preemption_gpu_seconds_lost",
        "GPU-seconds of running work thrown away by evictions, by kind (preemption, reclaim).",
        labels=["kind"],
    )
    for kind, n in totals.victims.items():
        victims.add_metric([kind], n)
        lost.add_metric([kind], totals.gpu_seconds_lost[kind])
    yield victims
    yield lost


def _census_families(c: Census) -> Iterator[Metric]:
    gangs = GaugeMetricFamily(
        "muster_gangs", "Gangs by state (running, binding, planned, waiting).", labels=["state"]
    )
    for state, n in c.states.items():
        if state != "unknown":
            gangs.add_metric([state], n)
    yield gangs
    waiting = GaugeMetricFamily(
        "muster_gangs_waiting",
        "Waiting gangs by the category of their first blocker (as GET /explain says).",
        labels=["category"],
    )
    for category, n in c.categories.items():
        if category != Category.NONE:
            waiting.add_metric([category], n)
    yield waiting
    unlisted = GaugeMetricFamily(
        "muster_gangs_waiting_unlisted",
        "Waiting gangs beyond the oldest ones reported one by one by muster_gang_*.",
    )
    unlisted.add_metric([], c.unlisted)
    yield unlisted
    lagging = GaugeMetricFamily(
        "muster_census_lagging_gangs",
        "Waiting gangs whose category is from an older cluster state (stale) or not judged yet "
        "(unjudged: not in muster_gangs_waiting); each census explains changed gangs within a "
        "time budget.",
        labels=["why"],
    )
    lagging.add_metric(["stale"], c.stale)
    lagging.add_metric(["unjudged"], c.unjudged)
    yield lagging
    yield from _gang_families(c)
    yield from _queue_families(c)
    f = c.fragmentation
    for name, doc, value in (
        (
            "muster_gpu_fragmentation_ratio",
            "Share of free GPU capacity on nodes that cannot take one member of the largest "
            "waiting GPU ask (0 when nothing waits for GPUs or nothing is free).",
            f.ratio,
        ),
        ("muster_gpu_free", "Free GPU capacity in GPUs (shares of devices included).", f.free),
        (
            "muster_gpu_largest_free_block",
            "The most whole free GPUs on one node.",
            f.largest_block,
        ),
        (
            "muster_gpu_waiting_ask",
            "GPUs asked by the largest waiting member (0: nothing waits for GPUs).",
            f.ask,
        ),
        (
            "muster_gpu_unusable_free",
            "Free GPUs on nodes that cannot take one member of the largest waiting GPU ask.",
            f.unusable,
        ),
    ):
        family = GaugeMetricFamily(name, doc)
        family.add_metric([], value)
        yield family


def _gang_families(c: Census) -> Iterator[Metric]:
    labels = ["namespace", "gang", "queue", "category"]
    age = GaugeMetricFamily(
        "muster_gang_waiting_seconds",
        "How long a waiting gang has waited (since its first member was created).",
        labels=labels,
    )
    eta = GaugeMetricFamily(
        "muster_gang_eta_seconds",
        "Seconds until a waiting gang is expected to start (the oldest ones; absent when unknown).",
        labels=labels,
    )
    overdue = GaugeMetricFamily(
        "muster_gang_overdue_seconds",
        "Seconds a waiting gang is past the start first promised to it (its first known ETA); "
        "negative while that start is still ahead.",
        labels=labels,
    )
    for gang in c.waiting:
        namespace, name = gang.key.split("/", 1)
        values = [namespace, name, gang.queue, gang.category]
        age.add_metric(values, max(c.now - gang.created, 0.0))
        if gang.eta_start is not None:
            eta.add_metric(values, max(gang.eta_start - c.now, 0.0))
        if gang.promised_start is not None:
            overdue.add_metric(values, c.now - gang.promised_start)
    yield age
    yield eta
    yield overdue


def _queue_families(c: Census) -> Iterator[Metric]:
    per_resource = {
        "usage": "Resources held by the queue's running and binding pods (and planned ones).",
        "guaranteed": "The queue's guaranteed (deserved) amount.",
        "limit": "The queue's limit (absent when unlimited).",
        "borrowed": "What the queue holds beyond its guarantee.",
        "lent": "Idle guarantee of the queue that others borrow.",
        "fair_share": "The queue's fair share now (what DRF deserves it, given demand).",
        "pending": "Resources asked by the queue's pending pods (demand not yet placed).",
    }
    families = {
        key: GaugeMetricFamily(
            f"muster_queue_{key}",
            f"{doc} Per resource, in GPUs, cores, bytes or pods.",
            labels=["queue", "resource"],
        )
        for key, doc in per_resource.items()
    }
    weight = GaugeMetricFamily("muster_queue_weight", "The queue's weight.", labels=["queue"])
    share = GaugeMetricFamily(
        "muster_queue_dominant_share",
        "The queue's weighted dominant share (what DRF orders queues by).",
        labels=["queue"],
    )
    waiting = GaugeMetricFamily(
        "muster_queue_gangs_waiting", "Waiting gangs in the queue.", labels=["queue"]
    )
    for book in c.queues:
        for key, family in families.items():
            amounts = getattr(book, key)
            for i, resource in enumerate(RESOURCE_NAMES):
                value = int(amounts[i])
                if key == "limit" and value >= UNLIMITED:
                    continue
                family.add_metric([book.name, resource], value / _UNITS[resource])
        weight.add_metric([book.name], book.weight)
        share.add_metric([book.name], book.dominant_share)
        waiting.add_metric([book.name], book.waiting_gangs)
    yield from families.values()
    yield weight
    yield share
    yield waiting


router = APIRouter(tags=["operations"])


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text exposition format",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    },
)
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
