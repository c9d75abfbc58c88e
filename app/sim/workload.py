"""Generated gang workloads: a cluster of identical nodes and jobs made of gang pods.

Everything is a pure function of the specs and the seed. Each random aspect draws from its own
stream (``numpy.random.default_rng([seed, stream])``), so changing e.g. the arrival pattern
does not reshuffle the runtimes.

Pods are Muster model ``Pod`` values carrying Muster's gang labels (``muster.io/pod-group``,
``muster.io/min-member``). They are created the way a job controller creates them: a few
workers (``create_workers``, like kube-controller-manager's concurrent Job syncs) each take the
next submitted job and create its pods one after another, ``create_gap`` seconds apart, so the
pods of jobs submitted together interleave. ``Pod.created`` is the creation time truncated to
whole seconds, as the API server's ``creationTimestamp`` is.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace

import numpy as np

from app.core.model import labels
from app.core.model.runtime import EXPECTED_RUNTIME
from app.core.model.values import GPU_PRODUCT_LABEL, Node, Pod, Resources

GIB = 2**30
_ARRIVAL, _RUNTIME = 1, 2  # random streams


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """``nodes`` identical nodes."""

    nodes: int = 100
    cpu: float = 100.0
    gpus: int = 0
    memory_gib: float = 512.0
    pods: int = 110
    gpu_model: str = "H100"

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.cpu <= 0 or self.gpus < 0 or self.memory_gib < 0:
            raise ValueError("need at least one node, positive cpu, no negative GPUs or memory")

    def build(self) -> list[Node]:
        """The nodes as Muster model values."""
        allocatable = Resources(
            gpu=self.gpus * 1000,
            cpu=round(self.cpu * 1000),
            memory=round(self.memory_gib * GIB * 1000),
            pods=self.pods * 1000,
        )
        width = max(len(str(self.nodes - 1)), 3)
        out = []
        for i in range(self.nodes):
            name = f"node-{i:0{width}d}"
            node_labels = {"kubernetes.io/hostname": name}
            if self.gpus:
                node_labels[GPU_PRODUCT_LABEL] = self.gpu_model
            out.append(Node(name=name, allocatable=allocatable, labels=node_labels))
        return out

    @property
    def capacity(self) -> Resources:
        """The whole cluster's allocatable."""
        one = self.build()[0].allocatable if self.nodes else Resources()
        return Resources(*(x * self.nodes for x in one))


@dataclass(frozen=True, slots=True)
class Arrival:
    """When jobs are submitted: ``all`` at 0, ``uniform`` over ``value`` seconds, or
    ``poisson`` with ``value`` jobs per second."""

    kind: str = "all"
    value: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Arrival:
        """``all``, ``uniform:SECONDS`` or ``poisson:JOBS_PER_SECOND``."""
        kind, _, raw = text.partition(":")
        if kind == "all" and not raw:
            return cls("all")
        if kind in ("uniform", "poisson"):
            try:
                value = float(raw)
            except ValueError:
                value = -1.0
            if value > 0 and math.isfinite(value):
                return cls(kind, value)
        raise ValueError(
            f"arrival {text!r}: use all, uniform:SECONDS or poisson:JOBS_PER_SECOND "
            "(a positive number)"
        )

    def times(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Submission times of ``n`` jobs, ascending."""
        if self.kind == "all":
            return np.zeros(n)
        if self.kind == "uniform":
            return np.sort(rng.uniform(0.0, self.value, n))
        return np.cumsum(rng.exponential(1.0 / self.value, n))

    def __str__(self) -> str:
        return self.kind if self.kind == "all" else f"{self.kind}:{self.value:g}"


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """``jobs`` gang jobs of ``pods_per_job`` identical pods.

    ``runtime`` is the mean training time in seconds, drawn uniformly within ``± jitter``
    (a fraction). ``deadline`` (seconds after submission; 0 for none) is when a job that has
    not fully started fails. ``min_member`` defaults to every pod of the job.
    """

    jobs: int = 1000
    pods_per_job: int = 10
    min_member: int | None = None
    pod_cpu: float = 2.0
    pod_gpus: int = 0
    pod_memory_gib: float = 0.0
    runtime: float = 180.0
    jitter: float = 0.5
    arrival: Arrival = field(default_factory=Arrival)
    deadline: float = 900.0
    priority: int = 0
    seed: int = 0
    namespace: str = "sim"
    create_gap: float = 0.005
    create_workers: int = 5
    #: ``muster.io/queue`` of every pod ("" for none: the default queue).
    queue: str = ""
    #: Declare ``muster.io/expected-runtime`` on every pod: the job's longest possible
    #: runtime (``runtime * (1 + jitter)``), so the declaration is never below the actual.
    declare_runtime: bool = False
    #: Declare instead each job's own runtime, rounded up to a second (an exact estimate).
    declare_own_runtime: bool = False
    #: Job names are ``{prefix}-NNNN``.
    prefix: str = "job"
    #: Submission times start here (seconds).
    offset: float = 0.0

    def __post_init__(self) -> None:
        if self.jobs < 1 or self.pods_per_job < 1:
            raise ValueError("jobs and pods per job must be at least 1")
        if self.min_member is not None and not 1 <= self.min_member <= self.pods_per_job:
            raise ValueError("min-member must be between 1 and the pods per job")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be a fraction in [0, 1)")
        if self.runtime <= 0 or self.deadline < 0 or self.create_gap < 0:
            raise ValueError("runtime must be positive; deadline and create gap not negative")
        if self.create_workers < 1:
            raise ValueError("create workers must be at least 1")

    @property
    def requests(self) -> Resources:
        """One pod's effective requests (including its pod slot)."""
        return Resources(
            gpu=self.pod_gpus * 1000,
            cpu=round(self.pod_cpu * 1000),
            memory=round(self.pod_memory_gib * GIB * 1000),
            pods=1000,
        )


@dataclass(frozen=True, slots=True)
class Job:
    """One generated job: submitted at ``arrival``; its pods exist from ``pod_times``."""

    name: str
    arrival: float
    runtime: float
    deadline: float
    min_member: int
    pods: tuple[Pod, ...]
    pod_times: tuple[float, ...]
    queue: str = ""
    priority: int = 0

    @property
    def ready(self) -> float:
        """When the last pod exists (the job cannot start earlier)."""
        return max(self.pod_times)


def generate(spec: WorkloadSpec) -> list[Job]:
    """The jobs of ``spec``, in submission order."""
    rng = np.random.default_rng([spec.seed, _ARRIVAL])
    arrivals = spec.offset + spec.arrival.times(spec.jobs, rng)
    spread = spec.runtime * spec.jitter
    runtimes = np.random.default_rng([spec.seed, _RUNTIME]).uniform(
        spec.runtime - spread, spec.runtime + spread, spec.jobs
    )
    starts = _creation_starts(arrivals, spec.pods_per_job, spec.create_gap, spec.create_workers)
    width = max(len(str(spec.jobs - 1)), 4)
    minimum = spec.min_member or spec.pods_per_job
    requests = spec.requests
    extra = _class_labels(spec)
    jobs = []
    for j in range(spec.jobs):
        name = f"{spec.prefix}-{j:0{width}d}"
        gang_labels = {labels.POD_GROUP: name, labels.MIN_MEMBER: str(minimum), **extra}
        if spec.declare_own_runtime:
            gang_labels[EXPECTED_RUNTIME] = str(math.ceil(runtimes[j]))
        times = tuple(float(starts[j]) + k * spec.create_gap for k in range(spec.pods_per_job))
        pods = tuple(
            Pod(
                uid=f"{spec.namespace}/{name}-{k}",
                namespace=spec.namespace,
                name=f"{name}-{k}",
                requests=requests,
                priority=spec.priority,
                labels=gang_labels,
                created=float(math.floor(t)),
            )
            for k, t in enumerate(times)
        )
        arrival = float(arrivals[j])
        jobs.append(
            Job(
                name=name,
                arrival=arrival,
                runtime=float(runtimes[j]),
                deadline=arrival + spec.deadline if spec.deadline else math.inf,
                min_member=minimum,
                pods=pods,
                pod_times=times,
                queue=spec.queue,
                priority=spec.priority,
            )
        )
    return jobs


def _class_labels(spec: WorkloadSpec) -> dict[str, str]:
    """Queue and declared runtime labels every pod of ``spec`` carries."""
    out = {}
    if spec.queue:
        out[labels.QUEUE] = spec.queue
    if spec.declare_runtime and not spec.declare_own_runtime:
        out[EXPECTED_RUNTIME] = str(math.ceil(spec.runtime * (1 + spec.jitter)))
    return out


@dataclass(frozen=True, slots=True)
class JobClass:
    """One kind of job in a mixed workload: ``share`` of the jobs are like ``spec`` (whose
    ``jobs`` is ignored; its queue, priority, sizes, runtime and arrival are used)."""

    spec: WorkloadSpec
    share: float = 1.0


@dataclass(frozen=True, slots=True)
class MixSpec:
    """``jobs`` jobs split among ``classes`` in proportion to their shares."""

    jobs: int
    classes: tuple[JobClass, ...]
    seed: int = 0

    def __post_init__(self) -> None:
        if self.jobs < 1 or not self.classes or any(c.share <= 0 for c in self.classes):
            raise ValueError("a mix needs jobs, classes and positive shares")

    def counts(self) -> list[int]:
        """Jobs per class (at least one each), in proportion to the shares."""
        total = sum(c.share for c in self.classes)
        return [max(1, round(self.jobs * c.share / total)) for c in self.classes]

    def specs(self) -> list[WorkloadSpec]:
        """Each class's spec with its job count, seed and a distinct name prefix."""
        return [
            replace(c.spec, jobs=n, seed=self.seed + i, prefix=f"{c.spec.prefix}{i}")
            for i, (c, n) in enumerate(zip(self.classes, self.counts(), strict=True))
        ]


def generate_mix(mix: MixSpec) -> list[Job]:
    """Every class's jobs, merged in submission order."""
    jobs = [job for spec in mix.specs() for job in generate(spec)]
    return sorted(jobs, key=lambda j: (j.arrival, j.name))


def _creation_starts(arrivals: np.ndarray, per_job: int, gap: float, workers: int) -> list[float]:
    """When each job's first pod is created: the next free controller worker takes the job."""
    free = [0.0] * workers
    starts = []
    for arrival in arrivals:
        start = max(float(arrival), heapq.heappop(free))
        starts.append(start)
        heapq.heappush(free, start + per_job * gap)
    return starts


#: The issue's seed experiment: 100 nodes x 100 CPU; 1000 jobs x 10 pods x 2 CPU, gang of 10,
#: runtime 3 min +- 50 %, all submitted at once, 15-minute deadline per job.
SEED_CLUSTER = ClusterSpec(nodes=100, cpu=100.0)
SEED_WORKLOAD = WorkloadSpec(
    jobs=1000, pods_per_job=10, pod_cpu=2.0, runtime=180.0, jitter=0.5, deadline=900.0
)
