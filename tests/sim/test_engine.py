"""Whole simulations on small workloads: Muster's guarantees, plain kube-scheduler's failure
mode, and reproducibility."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from app.core.model import labels
from app.core.model.values import Pod, Resources
from app.sim.engine import SimConfig, Simulation
from app.sim.policies import MusterPolicy
from app.sim.workload import Arrival, ClusterSpec, Job, WorkloadSpec

# Contended: 12 jobs of 4 x 2 CPU pods (8 CPU each) on 48 CPU, all submitted at once, so
# their pods are created interleaved and the cluster fills up mid-stream.
CLUSTER = ClusterSpec(nodes=6, cpu=8.0)
CONTENDED = WorkloadSpec(jobs=12, pods_per_job=4, pod_cpu=2.0, runtime=30.0, seed=3)
# Churn: gangs of 6 x 3 CPU arriving over time (two fit at once: 2 pods per 8-CPU node).
STREAM = WorkloadSpec(
    jobs=16, pods_per_job=6, pod_cpu=3.0, runtime=20.0, arrival=Arrival("poisson", 1.0), seed=7
)


def check_gangs_whole_and_nodes_not_overcommitted(sim: Simulation) -> None:
    assert sim.partial_pods == 0, "the engine counts a bound pod of a job that has not started"
    snapshot = sim.cache.snapshot()
    bound = Counter()
    used = np.zeros_like(snapshot.view.allocatable)
    for pod in snapshot.pods.values():
        if pod.node_name:
            bound[pod.labels[labels.POD_GROUP]] += 1
        if snapshot.holds_node(pod):  # bound, or its bind in flight
            used[snapshot.view.index[snapshot.placement[pod.uid]]] += np.asarray(pod.requests)
    minimum = {p.labels[labels.POD_GROUP]: int(p.labels[labels.MIN_MEMBER])
               for p in snapshot.pods.values()}  # fmt: skip
    for gang, count in bound.items():
        assert count >= minimum[gang], f"gang {gang}: {count} of {minimum[gang]} bound"
    assert (used <= snapshot.view.allocatable).all(), "a node holds more than it has"


@pytest.mark.parametrize("workload", [CONTENDED, STREAM], ids=["contended", "stream"])
def test_muster_never_binds_part_of_a_gang_nor_overcommits_and_fails_nothing(
    workload: WorkloadSpec,
) -> None:
    sim = Simulation(CLUSTER, workload, SimConfig(policy="muster"))
    sim.after_each_event(check_gangs_whole_and_nodes_not_overcommitted)
    result = sim.run()
    assert result.partial_pod_seconds == 0
    assert (result.completed, result.failed, result.unfinished) == (workload.jobs, 0, 0)
    assert result.makespan >= result.lower_bound


def test_plain_kube_scheduler_holds_resources_with_partial_gangs() -> None:
    result = Simulation(CLUSTER, CONTENDED, SimConfig(policy="default")).run()
    assert result.partial_pod_seconds > 0
    assert result.completed == CONTENDED.jobs  # jobs end, so partial gangs complete later


def test_runs_are_reproducible_with_a_seed() -> None:
    def figures(seed: int) -> tuple[object, ...]:
        workload = WorkloadSpec(**{**vars_of(STREAM), "seed": seed, "jobs": 8})
        r = Simulation(CLUSTER, workload, SimConfig(policy="muster")).run()
        return r.makespan, r.attempts, r.start_p50, [(j.started, j.finished) for j in r.records]

    assert figures(7) == figures(7)
    assert figures(7) != figures(8)


def test_a_job_that_cannot_start_before_its_deadline_fails_and_frees_everything() -> None:
    too_big = WorkloadSpec(jobs=2, pods_per_job=4, pod_cpu=8.0, runtime=100.0, jitter=0.0,
                           deadline=30.0)  # fmt: skip
    sim = Simulation(ClusterSpec(nodes=5, cpu=8.0), too_big, SimConfig(policy="muster"))
    result = sim.run()
    ran, late = result.records
    assert (ran.failed, late.failed, late.started, late.finished) == (False, True, None, 30.0)
    assert ran.started is not None and result.makespan == ran.started + 100.0
    assert not sim.cache.snapshot().pods


def vars_of(spec: WorkloadSpec) -> dict[str, object]:
    return {f: getattr(spec, f) for f in spec.__slots__}  # type: ignore[attr-defined]


def test_a_preempted_job_stops_and_starts_over_after_the_preemptor() -> None:
    def job(name: str, arrival: float, runtime: float, priority: int) -> Job:
        gang = {labels.POD_GROUP: name, labels.MIN_MEMBER: "2"}
        pods = tuple(
            Pod(uid=f"sim/{name}-{i}", namespace="sim", name=f"{name}-{i}",
                requests=Resources(cpu=4000, pods=1000), priority=priority, labels=gang,
                created=arrival)
            for i in range(2)
        )  # fmt: skip
        return Job(name, arrival, runtime, math.inf, 2, pods, (arrival, arrival))

    low, high = job("low", 0.0, 200.0, 0), job("high", 100.0, 50.0, 100)
    sim = Simulation(ClusterSpec(nodes=1, cpu=8.0), [low, high], SimConfig(policy="muster"))
    sim.after_each_event(check_gangs_whole_and_nodes_not_overcommitted)
    result = sim.run()
    first, second = result.records
    assert second.started is not None and 100 < second.started < 110  # low was evicted
    assert first.started is not None and first.started >= second.started + 50  # after high
    assert first.finished == first.started + 200 and result.completed == 2


def test_the_simulated_planner_loop_forces_a_cycle_once_a_second_as_the_server_does() -> None:
    """Cycles run every poll; one per loop interval (1 s) is forced, judging every gang afresh
    (``StillBlocked`` forgets carried gangs then), as ``PlannerLoop`` does in the server."""
    sim = Simulation(CLUSTER, CONTENDED, SimConfig(policy="muster"))
    policy = sim.policy
    assert isinstance(policy, MusterPolicy)
    forced: list[float] = []
    plain: list[float] = []
    real = policy.loop.run_once

    def run_once(*, force: bool = False) -> None:
        (forced if force else plain).append(sim.clock.now)
        real(force=force)

    policy.loop.run_once = run_once  # type: ignore[method-assign]
    result = sim.run()
    assert policy.loop.interval == 1.0
    # one per interval, give or take a poll (0.05 s) each
    assert result.makespan / 1.1 - 1 <= len(forced) <= result.makespan + 1
    assert all(b - a >= 1.0 - 1e-9 for a, b in zip(forced, forced[1:], strict=False))
    assert len(plain) > 10 * len(forced)
