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
