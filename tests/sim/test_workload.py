"""Generated workloads: deterministic by seed, gang-labelled pods, realistic creation times."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.core.model import labels
from app.core.model.gang import gang_spec
from app.core.model.runtime import EXPECTED_RUNTIME
from app.sim.workload import (
    SEED_CLUSTER,
    SEED_WORKLOAD,
    Arrival,
    ClusterSpec,
    WorkloadSpec,
    generate,
)


def test_same_seed_same_jobs_other_seed_other_runtimes() -> None:
    spec = WorkloadSpec(jobs=20, pods_per_job=3, seed=5)
    assert generate(spec) == generate(spec)
    other = generate(WorkloadSpec(jobs=20, pods_per_job=3, seed=6))
    assert [j.runtime for j in other] != [j.runtime for j in generate(spec)]


def test_runtimes_stay_within_the_jitter() -> None:
    jobs = generate(WorkloadSpec(jobs=500, runtime=180.0, jitter=0.5))
    runtimes = np.array([j.runtime for j in jobs])
    assert runtimes.min() >= 90.0 and runtimes.max() <= 270.0
    assert 170 < runtimes.mean() < 190


def test_pods_are_gang_members_with_the_requested_resources() -> None:
    job = generate(WorkloadSpec(jobs=1, pods_per_job=4, min_member=3, pod_cpu=2.5, pod_gpus=1))[0]
    assert len(job.pods) == 4 and job.min_member == 3
    spec = gang_spec(job.pods[0])
    assert spec is not None and (spec.key, spec.min_member) == (f"sim/{job.name}", 3)
    assert job.pods[0].labels[labels.POD_GROUP] == job.name
    assert job.pods[0].requests.cpu == 2500 and job.pods[0].requests.gpu == 1000


def test_controller_workers_create_pods_interleaved_with_whole_second_timestamps() -> None:
    spec = WorkloadSpec(jobs=4, pods_per_job=3, create_gap=0.4, create_workers=2)
    jobs = generate(spec)
    # two workers take jobs 0 and 1 at once, then 2 and 3 when they are free
    assert [j.pod_times[0] for j in jobs] == pytest.approx([0.0, 0.0, 1.2, 1.2])
    assert jobs[0].pod_times == pytest.approx((0.0, 0.4, 0.8))
    assert [p.created for p in jobs[2].pods] == [1.0, 1.0, 2.0]  # creationTimestamp: seconds
    assert jobs[3].ready == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("text", "check"),
    [
        ("all", lambda t: (t == 0).all()),
        ("uniform:600", lambda t: (np.diff(t) >= 0).all() and t.min() >= 0 and t.max() <= 600),
        ("poisson:2", lambda t: (np.diff(t) >= 0).all() and 1.5 < len(t) / t.max() < 2.5),
    ],
)
def test_arrival_patterns(text: str, check) -> None:  # noqa: ANN001
    times = Arrival.parse(text).times(100, np.random.default_rng(0))
    assert check(times)


@pytest.mark.parametrize("text", ["sometimes", "uniform", "poisson:-1", "uniform:x", "all:3"])
def test_bad_arrival_is_refused_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(ValueError, match="all, uniform:SECONDS or poisson:JOBS_PER_SECOND"):
        Arrival.parse(text)


def test_seed_preset_is_the_issue_experiment() -> None:
    assert SEED_CLUSTER.capacity.cpu == 100 * 100 * 1000
    assert (SEED_WORKLOAD.jobs, SEED_WORKLOAD.pods_per_job, SEED_WORKLOAD.pod_cpu) == (1000, 10, 2)
    assert (SEED_WORKLOAD.runtime, SEED_WORKLOAD.jitter, SEED_WORKLOAD.deadline) == (180, 0.5, 900)
    assert SEED_WORKLOAD.arrival == Arrival("all")
    job = generate(SEED_WORKLOAD)[-1]
    assert job.deadline == job.arrival + 900 and not math.isinf(job.deadline)


def test_nonsense_specs_are_refused() -> None:
    with pytest.raises(ValueError):
        WorkloadSpec(jitter=1.5)
    with pytest.raises(ValueError):
        WorkloadSpec(pods_per_job=2, min_member=3)
    with pytest.raises(ValueError):
        ClusterSpec(nodes=0)


def test_declared_runtimes_are_the_longest_or_each_jobs_own() -> None:
    spec = WorkloadSpec(jobs=30, runtime=180.0, jitter=0.5, declare_runtime=True)
    declared = {p.labels[EXPECTED_RUNTIME] for j in generate(spec) for p in j.pods}
    assert declared == {"270"}
    own = generate(WorkloadSpec(jobs=30, runtime=180.0, jitter=0.5, declare_own_runtime=True))
    for job in own:
        assert {p.labels[EXPECTED_RUNTIME] for p in job.pods} == {str(math.ceil(job.runtime))}
    assert len({j.pods[0].labels[EXPECTED_RUNTIME] for j in own}) > 20
