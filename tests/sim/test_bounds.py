"""The scheduler-free yardsticks: capacity lower bound and the idealised FCFS reference."""

from __future__ import annotations

import math

import pytest

from app.core.model.values import Pod, Resources
from app.sim.bounds import greedy_reference, lower_bound
from app.sim.workload import Job

CPU2 = Resources(cpu=2000, pods=1000)


def job(name: str, runtime: float, *, ready: float = 0.0, pods: int = 1,
        deadline: float = math.inf) -> Job:  # fmt: skip
    members = tuple(Pod(uid=f"{name}-{i}", namespace="sim", name=f"{name}-{i}", requests=CPU2)
                    for i in range(pods))  # fmt: skip
    return Job(name, ready, runtime, deadline, pods, members, (ready,) * pods)


def test_work_over_capacity() -> None:
    jobs = [job("a", 30), job("b", 10), job("c", 10)]
    cluster = Resources(cpu=4000, pods=10_000)  # two jobs at a time
    assert lower_bound(jobs, cluster) == 30  # longest job (work / capacity = 25)
    assert greedy_reference(jobs, cluster) == 30  # a | b then c


def test_late_arrivals_bound_from_their_arrival() -> None:
    jobs = [job("a", 10), job("b", 10, ready=100)]
    assert lower_bound(jobs, Resources(cpu=2000, pods=10_000)) == 110


def test_fcfs_without_knowing_runtimes_can_be_far_from_the_bound() -> None:
    # short jobs first, then one long: FCFS starts the long one last
    jobs = [job("s1", 10), job("s2", 10), job("long", 20)]
    cluster = Resources(cpu=4000, pods=10_000)
    assert lower_bound(jobs, cluster) == 20
    assert greedy_reference(jobs, cluster) == 30


def test_jobs_past_their_deadline_are_dropped_from_the_reference() -> None:
    jobs = [job("a", 50), job("b", 50, deadline=20)]
    assert greedy_reference(jobs, Resources(cpu=2000, pods=10_000)) == pytest.approx(50)
