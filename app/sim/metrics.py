"""What one simulation run measured: figures for the table and samples for the plots."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster at one instant."""

    time: float
    cpu_util: float  # fraction of the cluster's cpu held by bound pods
    gpu_util: float | None  # likewise for GPUs; None without GPUs
    pending_pods: int  # created, not bound
    running_jobs: int
    partial_pods: int  # bound pods of jobs that have not fully started
    reserved_pods: int  # pods whose room is held (plans, binds in flight) but not yet bound


@dataclass(slots=True)
class JobRecord:
    """One job's life in the simulation (times in simulated seconds)."""

    name: str
    arrival: float
    runtime: float
    started: float | None = None
    finished: float | None = None
    failed: bool = False
    queue: str = ""
    priority: int = 0
    first_started: float | None = None  # differs from ``started`` if it was preempted
    evictions: int = 0  # times the running job was preempted


@dataclass(frozen=True, slots=True)
class QueueSample:
    """Every queue's share of the cluster at one instant (dominant resource fractions)."""

    time: float
    share: dict[str, float]  # held by bound pods
    deserved: dict[str, float]  # DRF water-filling over held + pending
    saturated: bool  # every queue with jobs had pending demand


@dataclass(frozen=True, slots=True)
class QueueFigures:
    """One queue over a run."""

    name: str
    jobs: int
    mean_share: float | None  # while saturated
    mean_deserved: float | None
    fair_share_error: float | None  # mean |share - deserved| / deserved while saturated
    wait_p50: float | None
    wait_p99: float | None
    completion_p50: float | None
    completion_p99: float | None


@dataclass(slots=True)
class Result:
    """The figures of one run (one policy on one workload)."""

    label: str
    policy: str
    makespan: float
    lower_bound: float
    greedy_reference: float
    jobs: int
    completed: int
    failed: int
    unfinished: int
    partial_pod_seconds: float
    reserved_pod_seconds: float  # room held for pods not yet bound (idle capacity)
    cpu_util: float
    gpu_util: float | None
    attempts: int
    bind_failures: int
    start_p50: float | None
    start_p99: float | None
    wall_seconds: float
    events: int
    extra: dict[str, float] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    records: list[JobRecord] = field(default_factory=list)
    queues: list[QueueFigures] = field(default_factory=list)
    queue_samples: list[QueueSample] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """Makespan over the lower bound."""
        return self.makespan / self.lower_bound if self.lower_bound else float("nan")


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (linear interpolation), or None without values."""
    return float(np.percentile(values, q)) if values else None


class TimeIntegral:
    """Integrates piecewise-constant quantities over simulated time."""

    def __init__(self, size: int) -> None:
        self.area = np.zeros(size)
        self._last = 0.0

    def advance(self, now: float, values: np.ndarray) -> None:
        """Account ``values`` (held since the last call) up to ``now``."""
        if now > self._last:
            self.area += values * (now - self._last)
            self._last = now


def queue_figures(name: str, records: list[JobRecord], samples: list[QueueSample]) -> QueueFigures:
    """``name``'s waits, completion times and fair-share error from a run's records and
    queue samples."""
    mine = [r for r in records if r.queue == name]
    waits = [r.started - r.arrival for r in mine if r.started is not None]
    done = [r.finished - r.arrival for r in mine if r.finished is not None and not r.failed]
    pairs = [(s.share[name], s.deserved[name]) for s in samples
             if s.saturated and s.deserved.get(name, 0.0) > 0]  # fmt: skip
    error = float(np.mean([abs(a - d) / d for a, d in pairs])) if pairs else None
    return QueueFigures(
        name=name,
        jobs=len(mine),
        mean_share=float(np.mean([a for a, _ in pairs])) if pairs else None,
        mean_deserved=float(np.mean([d for _, d in pairs])) if pairs else None,
        fair_share_error=error,
        wait_p50=percentile(waits, 50),
        wait_p99=percentile(waits, 99),
        completion_p50=percentile(done, 50),
        completion_p99=percentile(done, 99),
    )
