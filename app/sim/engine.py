"""The simulation: jobs arrive, kube-scheduler (with a policy) places their pods, jobs run.

Life of a job:

* Its pods are created at their creation times (``workload``), each reported to
  kube-scheduler as a new pod.
* A pod is *running* once bound: kubelet start-up is instant, and the pod gets phase Running
  and ``status.startTime`` (Muster's head-of-line reservation reads it). The job *starts*
  (training begins) when ``min_member`` of its pods run - every pod unless it is elastic.
* ``runtime`` after it started, it completes and all its pods are deleted (kube-scheduler sees
  assigned pods deleted, and retries whatever is unschedulable).
* A job not started by its deadline fails: all its pods are deleted.
* If Muster deletes or evicts pods (a gang rolled back, a job preempted), the job controller
  recreates them; a preempted job stops and starts over once whole again.

Accounting, integrated exactly over simulated time: resources held by bound pods (utilisation)
and *partial-gang pods*: bound pods of a job that has not started, which hold resources
without doing any work; and *reserved pods*: room held for pods that are not bound yet
(Muster's plans waiting for kube-scheduler to retry their members, binds in flight), idle
meanwhile. The cluster is sampled every ``sample_interval`` for the plots.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from app.core.model.queues import OPEN
from app.core.model.runtime import EXPECTED_RUNTIME
from app.core.model.values import Pod
from app.core.policies.drf import deserved
from app.core.state.queueusage import QueueUsage
from app.sim import bounds
from app.sim.apiserver import SimApi
from app.sim.clock import Event, SimClock
from app.sim.kubescheduler import Decision, KubeScheduler, SchedulerConfig, SchedulingPolicy
from app.sim.metrics import (
    JobRecord,
    QueueSample,
    Result,
    Sample,
    TimeIntegral,
    percentile,
    queue_figures,
)
from app.sim.policies import MusterPolicy, PolicyConfig, make_policy, settings_of
from app.sim.workload import ClusterSpec, Job, MixSpec, WorkloadSpec, generate, generate_mix
from app.wiring import build_cache

_GPU, _CPU, _MEM, _PODS = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class SimConfig:
    """One run: which policy, kube-scheduler's queue, the policy's knobs, sampling."""

    policy: str = "muster"
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    policy_config: PolicyConfig = field(default_factory=PolicyConfig)
    sample_interval: float = 1.0
    #: Stop here even if jobs are left (default: generous, from the workload's bounds).
    max_time: float | None = None
    label: str = ""
    #: False: pods lose ``muster.io/expected-runtime``, so nothing may backfill reserved room
    #: (Muster has no switch to turn backfill off; this is how the simulator emulates it).
    backfill: bool = True
    #: The largest job is "on time" if it starts within its reservation's estimate plus this.
    reservation_slack: float = 60.0


@dataclass(slots=True)
class _JobState:
    job: Job
    record: JobRecord
    live: dict[str, Pod] = field(default_factory=dict)
    bound: set[str] = field(default_factory=set)
    deadline_event: Event | None = None
    completion_event: Event | None = None
    recreated: int = 0
    bound_at: dict[str, float] = field(default_factory=dict)
    interrupted: bool = False  # preempted, its pods being evicted

    @property
    def started(self) -> bool:
        return self.record.started is not None

    @property
    def done(self) -> bool:
        return self.record.finished is not None


class _TimedPolicy:
    """Measures the wall time of each scheduling attempt (the real extender code's cost)."""

    def __init__(self, policy: SchedulingPolicy) -> None:
        self.inner = policy
        self.wall: list[float] = []

    def schedule(self, pod: Pod) -> Decision:
        start = time.perf_counter()
        decision = self.inner.schedule(pod)
        self.wall.append(time.perf_counter() - start)
        return decision

    def bind(self, pod: Pod, node: str, done: Callable[[str, str], None]) -> None:
        self.inner.bind(pod, node, done)

    def gated(self, pod: Pod) -> bool:
        return self.inner.gated(pod)


class Simulation:
    """One policy on one workload, in simulated time. ``run()`` returns the figures."""

    def __init__(
        self,
        cluster: ClusterSpec,
        workload: WorkloadSpec | MixSpec | list[Job],
        config: SimConfig | None = None,
    ) -> None:
        self.config = config or SimConfig()
        self.clock = SimClock()
        self.cache = build_cache(settings_of(self.config.policy_config), clock=self.clock)
        self.cache.upsert_nodes(cluster.build())
        self.cache.mark_synced()
        self.api = SimApi(self.cache, self)
        self.policy = make_policy(
            self.config.policy, self.clock, self.cache, self.api, self.config.policy_config
        )
        self._timed = _TimedPolicy(self.policy)
        self.scheduler = KubeScheduler(
            self.clock, self._timed, self.cache.pod, self.config.scheduler
        )
        if isinstance(workload, WorkloadSpec):
            self.jobs = generate(workload)
        elif isinstance(workload, MixSpec):
            self.jobs = generate_mix(workload)
        else:
            self.jobs = list(workload)
        self.capacity = cluster.capacity
        self._cap = np.asarray(self.capacity, dtype=np.float64)
        self._states = [_JobState(j, self._record(j)) for j in self.jobs]
        self._owner: dict[str, _JobState] = {}
        self._used = np.zeros(len(self.capacity), dtype=np.int64)
        self._partial = 0
        self._pending = 0
        self._running = 0
        self._done = 0
        self._integral = TimeIntegral(3)
        self._reserved = 0
        self._reserved_area = 0.0
        self._reserved_since = 0.0
        self._reserved_generation = -1
        self.clock.after_each(self._track_reserved)
        self.samples: list[Sample] = []
        self._queue_config = self.config.policy_config.queues
        self._queues = sorted({s.record.queue for s in self._states})
        self._track_queues = self._queue_config is not OPEN or any(j.queue for j in self.jobs)
        width = len(self.capacity)
        self._q_used = {q: np.zeros(width, dtype=np.int64) for q in self._queues}
        self._q_pending = {q: np.zeros(width, dtype=np.int64) for q in self._queues}
        self._q_waiting = dict.fromkeys(self._queues, 0)
        self.queue_samples: list[QueueSample] = []
        self.reservations: dict[str, tuple[float, float]] = {}  # gang -> (when, expected start)
        if isinstance(self.policy, MusterPolicy):
            self.clock.after_each(self._track_reservation)
        self._evicted_pods = 0
        self._lost = np.zeros(width)  # resource-milli-seconds of evicted pods' running time

    def _record(self, job: Job) -> JobRecord:
        queue = job.queue or self.config.policy_config.queues.default_queue
        return JobRecord(job.name, job.arrival, job.runtime, queue=queue, priority=job.priority)

    # -- observation -----------------------------------------------------------------------

    @property
    def partial_pods(self) -> int:
        """Bound pods of jobs that have not started (now)."""
        return self._partial

    def after_each_event(self, hook: Callable[[Simulation], None]) -> None:
        """Call ``hook(self)`` after every simulated event (for invariant checks)."""
        self.clock.after_each(lambda: hook(self))

    def job_of(self, uid: str) -> Job | None:
        """The job pod ``uid`` belongs to, while it exists."""
        state = self._owner.get(uid)
        return state.job if state else None

    # -- running -----------------------------------------------------------------------------

    def run(self) -> Result:
        """Simulate until every job has completed or failed (or ``max_time``)."""
        wall = time.perf_counter()
        lower = bounds.lower_bound(self.jobs, self.capacity)
        reference = bounds.greedy_reference(self.jobs, self.capacity)
        for state in self._states:
            for pod, at in zip(state.job.pods, state.job.pod_times, strict=True):
                self.clock.at(at, self._create, state, pod)
            if math.isfinite(state.job.deadline):
                state.deadline_event = self.clock.at(state.job.deadline, self._deadline, state)
        self.clock.at(0.0, self._sample)
        limit = self.config.max_time
        if limit is None:
            last = max((j.deadline if math.isfinite(j.deadline) else j.ready) for j in self.jobs)
            limit = last + 10 * (reference + max(j.runtime for j in self.jobs))
        self.clock.run(lambda: self._done == len(self._states), limit=limit)
        finished = [s.record.finished for s in self._states if s.record.finished is not None]
        makespan = max(finished, default=0.0) if self._done == len(self._states) else limit
        self._advance(makespan)
        self._reserved_area += self._reserved * max(makespan - self._reserved_since, 0.0)
        self._sample(reschedule=False)
        return self._result(makespan, lower, reference, time.perf_counter() - wall)

    def _create(self, state: _JobState, pod: Pod) -> None:
        if state.done:
            return
        if not self.config.backfill and EXPECTED_RUNTIME in pod.labels:
            kept = {k: v for k, v in pod.labels.items() if k != EXPECTED_RUNTIME}
            pod = replace(pod, labels=kept)
        self._owner[pod.uid] = state
        state.live[pod.uid] = pod
        self.api.create(pod)

    def _start(self, state: _JobState) -> None:
        state.record.started = self.clock.now
        if state.record.first_started is None:
            state.record.first_started = self.clock.now
        state.interrupted = False
        self._partial -= len(state.bound)
        self._running += 1
        if state.deadline_event is not None:
            state.deadline_event.cancel()
        state.completion_event = self.clock.after(state.job.runtime, self._complete, state)

    def _complete(self, state: _JobState) -> None:
        self._running -= 1
        self._finish(state)

    def _deadline(self, state: _JobState) -> None:
        if not state.started and not state.done:
            state.record.failed = True
            self._finish(state)

    def _finish(self, state: _JobState) -> None:
        state.record.finished = self.clock.now
        self._done += 1
        for uid in list(state.live):
            self.api.delete(uid)

    def _advance(self, now: float) -> None:
        self._integral.advance(
            now, np.array([self._used[_CPU], self._used[_GPU], self._partial], dtype=np.float64)
        )

    def _track_reserved(self) -> None:
        """Integrate the pods whose room is held but who are not bound (plans, binds in
        flight); that only changes with the cache, so only look when it did."""
        generation = self.cache.generation
        if generation == self._reserved_generation:
            return
        self._reserved_generation = generation
        now = self.clock.now
        self._reserved_area += self._reserved * (now - self._reserved_since)
        self._reserved_since = now
        # Room counted on nodes (bound, binding, planned; not backfill holds) minus bound pods.
        counted = int(self.cache.backfill_view().used[:, _PODS].sum())
        self._reserved = max(counted - int(self._used[_PODS]), 0) // 1000

    def _sample(self, *, reschedule: bool = True) -> None:
        cap = self._cap
        self.samples.append(
            Sample(
                time=self.clock.now,
                cpu_util=float(self._used[_CPU] / cap[_CPU]) if cap[_CPU] else 0.0,
                gpu_util=float(self._used[_GPU] / cap[_GPU]) if cap[_GPU] else None,
                pending_pods=self._pending,
                running_jobs=self._running,
                partial_pods=self._partial,
                reserved_pods=self._reserved,
            )
        )
        if self._track_queues:
            self.queue_samples.append(self._queue_sample())
        if reschedule:
            self.clock.after(self.config.sample_interval, self._sample)

    def _queue_sample(self) -> QueueSample:
        """Each queue's dominant share now, and what DRF says it deserves given what every
        queue holds and still wants. A queue's dominant resource is the one it wants most of
        (held plus pending, as a fraction of the cluster)."""
        config = self._queue_config
        usage = QueueUsage(config, self.capacity_array)
        for q in self._queues:
            if q in config.queues:
                usage.add(q, self._q_used[q])
                usage.add(q, self._q_pending[q], pending=True)
        fair = deserved(usage)
        cap = np.where(self._cap > 0, self._cap, np.inf)[:_PODS]
        share, due = {}, {}
        for q in self._queues:
            want = (self._q_used[q] + self._q_pending[q])[:_PODS] / cap
            k = int(np.argmax(want))
            share[q] = float(self._q_used[q][k] / cap[k])
            due[q] = float(fair[q][k] / cap[k]) if q in fair else 0.0
        saturated = all(self._q_waiting[q] > 0 for q in self._queues)
        return QueueSample(self.clock.now, share, due, saturated)

    @property
    def capacity_array(self) -> np.ndarray:
        """The cluster's allocatable, milli-units per resource."""
        return np.asarray(self.capacity, dtype=np.int64)

    def _track_reservation(self) -> None:
        """Remember each gang's first head-of-line reservation: when, and its expected start."""
        assert isinstance(self.policy, MusterPolicy)
        head = self.policy.planner.reservation
        if head is not None and head.gang not in self.reservations:
            self.reservations[head.gang] = (self.clock.now, head.start)

    # -- the watch (SimApi reports every change here) --------------------------------------

    def pod_added(self, pod: Pod) -> None:
        self._pending += 1
        state = self._owner.get(pod.uid)
        if state is not None:
            self._q_pending[state.record.queue] += np.asarray(pod.requests, dtype=np.int64)
            self._q_waiting[state.record.queue] += 1
        self.scheduler.pod_added(pod)

    def pod_bound(self, uid: str, node: str) -> None:
        state = self._owner.get(uid)
        if state is None or uid in state.bound:
            return
        self._advance(self.clock.now)
        pod = state.live[uid]
        state.bound.add(uid)
        state.bound_at[uid] = self.clock.now
        amount = np.asarray(pod.requests, dtype=np.int64)
        self._used += amount
        self._pending -= 1
        queue = state.record.queue
        self._q_used[queue] += amount
        self._q_pending[queue] -= amount
        self._q_waiting[queue] -= 1
        self.api.start(uid, self.clock.now)
        if not state.started:
            self._partial += 1
            if len(state.bound) >= state.job.min_member:
                self._start(state)

    def pod_updated(self, uid: str) -> None:
        self.scheduler.pod_updated(uid)

    def pod_deleted(self, pod: Pod, *, by_scheduler: bool) -> None:
        state = self._owner.pop(pod.uid, None)
        assigned = bool(pod.node_name)
        if state is not None:
            self._advance(self.clock.now)
            if by_scheduler and state.started and not state.done:
                self._interrupt(state)
            original = state.live.pop(pod.uid)
            amount = np.asarray(original.requests, dtype=np.int64)
            queue = state.record.queue
            if pod.uid in state.bound:
                state.bound.discard(pod.uid)
                self._used -= amount
                self._q_used[queue] -= amount
                if by_scheduler and state.interrupted:
                    self._evicted(state, pod.uid, amount)
                if not state.started:
                    self._partial -= 1
            else:
                self._pending -= 1
                self._q_pending[queue] -= amount
                self._q_waiting[queue] -= 1
        self.scheduler.pod_deleted(pod.uid, assigned=assigned)
        if by_scheduler and state is not None and not state.done:
            self._recreate(state, pod)

    def _interrupt(self, state: _JobState) -> None:
        """Muster evicted a member of a running job (preemption): training stops, and the job
        starts over once whole again (generated jobs share one priority, so this is rare)."""
        if state.completion_event is not None:
            state.completion_event.cancel()
        state.record.started = None
        state.record.evictions += 1
        state.interrupted = True
        self._running -= 1
        self._partial += len(state.bound)

    def _evicted(self, state: _JobState, uid: str, amount: np.ndarray) -> None:
        """Account an evicted pod of a preempted job: its running time is lost work."""
        self._evicted_pods += 1
        self._lost += amount * (self.clock.now - state.bound_at.pop(uid, self.clock.now))

    def _recreate(self, state: _JobState, pod: Pod) -> None:
        """The job controller replaces a pod Muster deleted (a rolled-back gang member)."""
        state.recreated += 1
        base = state.job.pods[0]
        name = f"{state.job.name}-r{state.recreated}"
        fresh = replace(
            base, uid=f"{pod.namespace}/{name}", name=name, created=math.floor(self.clock.now)
        )
        self._create(state, fresh)

    # -- results ---------------------------------------------------------------------------

    def _result(self, makespan: float, lower: float, reference: float, wall: float) -> Result:
        records = [s.record for s in self._states]
        starts = [r.started - r.arrival for r in records if r.started is not None]
        area = self._integral.area
        span = makespan or 1.0
        cap = self._cap
        extra: dict[str, float] = {
            "attempt_wall_ms_mean": 1000 * float(np.mean(self._timed.wall))
            if self._timed.wall
            else 0.0,
            "attempt_wall_ms_max": 1000 * max(self._timed.wall, default=0.0),
        }
        if isinstance(self.policy, MusterPolicy):  # also muster-gated
            extra.update(
                planner_cycles=self.policy.planner.cycles,
                nudges=self.policy.loop.nudges,
                barrier_timeouts=self.policy.barrier_timeouts,
                rollbacks=self.policy.rollbacks,
            )
        extra.update(self._preemption_figures(records))
        extra.update(self._largest_job_figures())
        return Result(
            label=self.config.label or self.config.policy,
            policy=self.config.policy,
            makespan=makespan,
            lower_bound=lower,
            greedy_reference=reference,
            jobs=len(records),
            completed=sum(1 for r in records if r.finished is not None and not r.failed),
            failed=sum(1 for r in records if r.failed),
            unfinished=sum(1 for r in records if r.finished is None),
            partial_pod_seconds=float(area[2]),
            reserved_pod_seconds=self._reserved_area,
            cpu_util=float(area[0] / (cap[_CPU] * span)) if cap[_CPU] else 0.0,
            gpu_util=float(area[1] / (cap[_GPU] * span)) if cap[_GPU] else None,
            attempts=self.scheduler.attempts,
            bind_failures=self.scheduler.bind_failures,
            start_p50=percentile(starts, 50),
            start_p99=percentile(starts, 99),
            wall_seconds=wall,
            events=self.clock.events_run,
            extra=extra,
            samples=self.samples,
            records=records,
            queues=[queue_figures(q, records, self.queue_samples) for q in self._queues]
            if self._track_queues
            else [],
            queue_samples=self.queue_samples,
        )

    def _preemption_figures(self, records: list[JobRecord]) -> dict[str, float]:
        """Evictions, the work they lost, and how long the highest-priority jobs waited (only
        when jobs have more than one priority)."""
        out = {
            "evicted_pods": float(self._evicted_pods),
            "evicted_gangs": float(sum(r.evictions for r in records)),
            "gpu_hours_lost": float(self._lost[_GPU]) / 1000 / 3600,
            "cpu_hours_lost": float(self._lost[_CPU]) / 1000 / 3600,
        }
        priorities = {r.priority for r in records}
        if len(priorities) > 1:
            top = max(priorities)
            waits = [r.first_started - r.arrival for r in records
                     if r.priority == top and r.first_started is not None]  # fmt: skip
            out["high_priority_jobs"] = float(sum(1 for r in records if r.priority == top))
            out["high_priority_started"] = float(len(waits))
            if waits:
                out["preemption_latency_p50"] = float(np.percentile(waits, 50))
                out["preemption_latency_max"] = float(max(waits))
        return out

    def largest_job(self) -> _JobState:
        """The job asking for the most (GPUs, then CPU), the earliest among equals."""
        return max(self._states, key=lambda s: (
            sum(p.requests[_GPU] for p in s.job.pods),
            sum(p.requests[_CPU] for p in s.job.pods),
            -s.job.arrival,
        ))  # fmt: skip

    def _largest_job_figures(self) -> dict[str, float]:
        """The largest job's wait, and its first reservation's estimate against its start."""
        state = self.largest_job()
        record = state.record
        out: dict[str, float] = {}
        if record.first_started is not None:
            out["largest_wait"] = record.first_started - record.arrival
        key = f"{state.job.pods[0].namespace}/{state.job.name}"
        if key in self.reservations:
            when, start = self.reservations[key]
            out["largest_reserved_at"] = when
            out["largest_estimated_start"] = start
            if record.first_started is not None:
                out["largest_started"] = record.first_started
                slip = record.first_started - start
                out["largest_start_slip"] = slip
                out["largest_on_time"] = float(slip <= self.config.reservation_slack)
        return out
