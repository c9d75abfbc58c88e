"""Mixed workloads at a tiny scale: queues and fair share, backfill, preemption."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from app.core.model import labels
from app.core.model.queues import parse_queue_config
from app.sim.engine import SimConfig, Simulation
from app.sim.metrics import Result
from app.sim.policies import PolicyConfig
from app.sim.workload import Arrival, ClusterSpec, JobClass, MixSpec, WorkloadSpec
from tests.sim.test_engine import check_gangs_whole_and_nodes_not_overcommitted

GPU_NODES = ClusterSpec(nodes=2, cpu=64.0, gpus=8)


def gpu_class(**kw: object) -> WorkloadSpec:
    """A GPU job class without deadline (``kw`` overrides)."""
    base: dict[str, object] = {"pod_cpu": 1.0, "deadline": 0.0, "jitter": 0.0}
    return WorkloadSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_queues_preset_at_tiny_scale_reports_each_queue_and_its_fair_share_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.cli import main

    out = tmp_path / "figures.json"
    argv = ["simulate", "--preset", "queues", "--scale", "0.07", "--policies", "muster",
            "--quiet", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "queues (muster):" in text and "fair-share error" in text
    (figures,) = json.loads(out.read_text())
    queues = {q["name"]: q for q in figures["queues"]}
    assert set(queues) == {"research", "prod", "batch"}
    for q in queues.values():
        assert q["jobs"] > 0 and q["waitP50"] is not None and q["completionP99"] is not None
        assert q["fairShareError"] is not None and q["fairShareError"] >= 0
    assert queues["research"]["deserved"] > queues["prod"]["deserved"]  # weight 2 vs 1


def test_two_equal_queues_saturating_the_cluster_each_get_half() -> None:
    # Both submitted at 0; a sorts first (name, then creation): FIFO would favour a.
    config = parse_queue_config("queues: [{name: a}, {name: b}]\ndefaultQueue: a\n")
    ones = {"pods_per_job": 1, "pod_gpus": 1, "runtime": 300.0, "jitter": 0.5}
    mix = MixSpec(jobs=120, classes=(
        JobClass(gpu_class(queue="a", prefix="a", **ones)),
        JobClass(gpu_class(queue="b", prefix="b", **ones)),
    ))  # fmt: skip
    sim_config = SimConfig(policy_config=PolicyConfig(queues=config), sample_interval=5.0)
    result = Simulation(ClusterSpec(nodes=2, cpu=64.0, gpus=8), mix, sim_config).run()
    assert result.completed == 120
    saturated = [s for s in result.queue_samples if s.saturated]
    assert len(saturated) >= 20
    for q in result.queues:
        assert q.mean_deserved == pytest.approx(0.5, abs=0.01)
        assert q.mean_share is not None and abs(q.mean_share - 0.5) <= 0.05, q
        assert q.fair_share_error is not None and q.fair_share_error <= 0.1, q


def backfill_mix() -> MixSpec:
    """A whole-cluster gang at 60 s behind a stream of declared-runtime single-GPU-pair jobs."""
    small = gpu_class(
        pods_per_job=1,
        pod_gpus=4,
        runtime=200.0,
        jitter=0.3,
        arrival=Arrival("poisson", 0.05),
        declare_runtime=True,
        prefix="small",
    )
    big = gpu_class(pods_per_job=2, pod_gpus=8, runtime=300.0, offset=60.0,
                    declare_runtime=True, prefix="big")  # fmt: skip
    return MixSpec(jobs=31, classes=(JobClass(small, 30), JobClass(big, 1)))


@pytest.mark.parametrize("backfill", [True, False], ids=["backfill", "no-backfill"])
def test_the_reserved_gang_reports_its_estimate_and_starts_within_it(backfill: bool) -> None:
    config = SimConfig(backfill=backfill, reservation_slack=30.0)
    result = Simulation(GPU_NODES, backfill_mix(), config).run()
    extra = result.extra
    assert result.completed == 31
    assert extra["largest_reserved_at"] >= 60.0  # reserved once submitted, not before
    assert extra["largest_estimated_start"] >= extra["largest_reserved_at"]
    assert extra["largest_started"] == pytest.approx(60.0 + extra["largest_wait"])
    if backfill:  # declared runtimes: the estimate holds
        assert extra["largest_on_time"] == 1.0
        assert extra["largest_started"] <= extra["largest_estimated_start"] + 30.0
    else:  # the default runtime (1 h) is far too pessimistic: the gang starts much earlier
        assert extra["largest_start_slip"] < -1000


def test_a_high_priority_gang_evicts_whole_low_priority_gangs_and_starts() -> None:
    low = gpu_class(pods_per_job=2, pod_gpus=4, runtime=1000.0, prefix="low")
    high = gpu_class(pods_per_job=2, pod_gpus=8, runtime=100.0, priority=1000, offset=100.0,
                     prefix="high")  # fmt: skip
    mix = MixSpec(jobs=5, classes=(JobClass(low, 4), JobClass(high, 1)))
    sim = Simulation(GPU_NODES, mix, SimConfig())
    sim.after_each_event(check_gangs_whole_and_nodes_not_overcommitted)
    evicted: Counter[str] = Counter()
    sim.api.evict = _counting(sim.api.evict, evicted)  # type: ignore[method-assign]
    result = sim.run()
    extra = result.extra
    assert result.completed == 5
    assert extra["evicted_gangs"] == 2 and extra["evicted_pods"] == 4  # two 8-GPU gangs
    assert set(evicted.values()) == {2}  # every evicted gang lost both its pods
    assert extra["gpu_hours_lost"] == pytest.approx(2 * 8 * 100 / 3600, rel=0.05)
    assert extra["high_priority_started"] == 1 and extra["preemption_latency_max"] < 10
    preempted = [r for r in result.records if r.evictions]
    assert all(r.finished is not None and r.started is not None for r in preempted)
    assert all(r.started > 200 for r in preempted)  # restarted after the preemptor ran


def _counting(evict, counter: Counter[str]):  # noqa: ANN001, ANN202 - test wrapper
    def wrapper(namespace: str, name: str, uid: str, *, dry_run: bool = False) -> None:
        if not dry_run:
            counter[name.rsplit("-", 1)[0]] += 1
        evict(namespace, name, uid, dry_run=dry_run)

    return wrapper


def test_min_runtime_protects_young_gangs_from_preemption() -> None:
    low = gpu_class(pods_per_job=2, pod_gpus=8, runtime=300.0, prefix="low")
    high = gpu_class(pods_per_job=2, pod_gpus=8, runtime=50.0, priority=1000, offset=30.0,
                     prefix="high")  # fmt: skip
    mix = MixSpec(jobs=2, classes=(JobClass(low, 1), JobClass(high, 1)))
    protected = SimConfig(policy_config=PolicyConfig(min_runtime=600.0))
    results: list[Result] = [Simulation(GPU_NODES, mix, c).run() for c in (SimConfig(), protected)]
    assert [r.extra["evicted_gangs"] for r in results] == [1, 0]
    assert results[1].extra["preemption_latency_max"] >= 270  # waited for low to finish


def test_queue_label_and_declared_runtime_are_on_every_pod() -> None:
    spec = gpu_class(queue="research", declare_runtime=True, runtime=100.0, jitter=0.5,
                     jobs=2, pods_per_job=3)  # fmt: skip
    mix = MixSpec(jobs=2, classes=(JobClass(spec),))
    pods = [p for job in Simulation(GPU_NODES, mix).jobs for p in job.pods]
    assert len(pods) == 6
    assert {p.labels[labels.QUEUE] for p in pods} == {"research"}
    assert {p.labels["muster.io/expected-runtime"] for p in pods} == {"150"}
