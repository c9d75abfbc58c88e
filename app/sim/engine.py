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

from app.core.cache import ClusterCache
from app.core.model import Pod
from app.sim import bounds
from app.sim.apiserver import SimApi
from app.sim.clock import Event, SimClock
from app.sim.kubescheduler import Decision, KubeScheduler, SchedulerConfig, SchedulingPolicy
from app.sim.metrics import JobRecord, Result, Sample, TimeIntegral, percentile
from app.sim.policies import MusterPolicy, PolicyConfig, make_policy
from app.sim.workload import ClusterSpec, Job, WorkloadSpec, generate

_GPU, _CPU, _PODS = 0, 1, 3


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


@dataclass(slots=True)
class _JobState:
    job: Job
    record: JobRecord
    live: dict[str, Pod] = field(default_factory=dict)
    bound: set[str] = field(default_factory=set)
    deadline_event: Event | None = None
    completion_event: Event | None = None
    recreated: int = 0

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
        workload: WorkloadSpec | list[Job],
        config: SimConfig | None = None,
    ) -> None:
        self.config = config or SimConfig()
        self.clock = SimClock()
        self.cache = ClusterCache(clock=self.clock)
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
        self.jobs = generate(workload) if isinstance(workload, WorkloadSpec) else list(workload)
        self.capacity = cluster.capacity
        self._cap = np.asarray(self.capacity, dtype=np.float64)
        self._states = [_JobState(j, JobRecord(j.name, j.arrival, j.runtime)) for j in self.jobs]
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
        self._owner[pod.uid] = state
        state.live[pod.uid] = pod
        self.api.create(pod)

    def _start(self, state: _JobState) -> None:
        state.record.started = self.clock.now
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
        if reschedule:
            self.clock.after(self.config.sample_interval, self._sample)

    # -- the watch (SimApi reports every change here) --------------------------------------

    def pod_added(self, pod: Pod) -> None:
        self._pending += 1
        self.scheduler.pod_added(pod)

    def pod_bound(self, uid: str, node: str) -> None:
        state = self._owner.get(uid)
        if state is None or uid in state.bound:
            return
        self._advance(self.clock.now)
        pod = state.live[uid]
        state.bound.add(uid)
        self._used += np.asarray(pod.requests, dtype=np.int64)
        self._pending -= 1
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
            if pod.uid in state.bound:
                state.bound.discard(pod.uid)
                self._used -= np.asarray(original.requests, dtype=np.int64)
                if not state.started:
                    self._partial -= 1
            else:
                self._pending -= 1
        self.scheduler.pod_deleted(pod.uid, assigned=assigned)
        if by_scheduler and state is not None and not state.done:
            self._recreate(state, pod)

    def _interrupt(self, state: _JobState) -> None:
        """Muster evicted a member of a running job (preemption): training stops, and the job
        starts over once whole again (generated jobs share one priority, so this is rare)."""
        if state.completion_event is not None:
            state.completion_event.cancel()
        state.record.started = None
        self._running -= 1
        self._partial += len(state.bound)

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
        )
