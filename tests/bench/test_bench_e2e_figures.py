"""The contention figures of scripts/bench_e2e.py on a hand-made timeline (no cluster)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.scriptload import script_module


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    yield from script_module("bench_e2e")


def test_idle_counts_waiting_work_and_whole_jobs_apart(bench: ModuleType) -> None:
    """8 GPUs; j0 (whole at 0) runs 1-2; j1's last pod is created at 2.5, it runs 3-5.

    Idle while any job waits: 0-1 and 2-3 (16 of 40 GPU-seconds). Idle while a whole job
    waits: 0-1 and 2.5-3 (12 of 40): from 2 to 2.5 no scheduler could start j1.
    """
    pods = {
        **{f"j0-{i}": bench.PodLife("j0", bound=1.0, gone=2.0) for i in range(8)},
        **{f"j1-{i}": bench.PodLife("j1", bound=3.0, gone=5.0) for i in range(8)},
    }
    tracker = bench.Tracker(None, "bench")  # not entered: no watch, the lives given here
    tracker.pods.update(pods)
    jobs = {"j0": (8, 1.0), "j1": (8, 2.0)}
    figures = bench.contention_figures(tracker, jobs, 8, 0.0, 5.0, {"j0": 0.0, "j1": 2.5})
    assert figures["idle_pct"] == pytest.approx(40.0)
    assert figures["idle_whole_pct"] == pytest.approx(30.0)
    assert figures["fill_ready_seconds"] == 0.0
    assert figures["reuse_n"] == 1 and figures["reuse_p50"] == pytest.approx(1.0)
    assert figures["makespan_ratio"] == pytest.approx(5.0 / 3.0)


@pytest.mark.parametrize(
    ("rates", "median"),
    [
        ([50.0], 50.0),
        ([57.0, 45.0, 52.0], 52.0),
        ([60.0, 40.0], 40.0),  # even count: the lower of the two middle runs
        ([44.0, 61.0, 49.0, 53.0], 49.0),
    ],
)
def test_singles_report_the_median_run_with_every_rate(
    bench: ModuleType, rates: list[float], median: float
) -> None:
    runs = [{"rate": r, "seconds": 400 / r} for r in rates]
    chosen = bench.median_run(runs)
    assert chosen["rate"] == median
    assert chosen["seconds"] == 400 / median  # the figures of that one run
    assert chosen["rates"] == rates  # in the order they ran


def test_a_deadlocked_contention_run_is_reported_not_lost(bench: ModuleType) -> None:
    """kube-scheduler alone can deadlock on gangs: the run keeps what it measured and says so."""
    figures = {"idle_pct": 1.0, "idle_after_fill_pct": 0.5, "idle_whole_pct": 0.5,
               "reuse_p50": 0.5, "reuse_p99": 2.0, "makespan_ratio": 1.1, "makespan": 300.0,
               "whole": 60, "jobs": 60, "partial": 0, "overcommit": 0, "stuck": False,
               "fill_pods": 160, "fill_seconds": 9.0}  # fmt: skip
    results = bench.Results()
    results.figures["muster"]["contention"] = figures
    results.figures["alone"]["contention"] = {**figures, "whole": 41, "partial": 12,
                                              "makespan": 1500.0, "stuck": True}  # fmt: skip
    table = bench.report(results, bench.Sizes(), 1.0)
    (jobs,) = [line for line in table.splitlines() if line.startswith("3 jobs whole")]
    assert "60/60 " in jobs and "41/60 (stuck)" in jobs
    (makespan,) = [line for line in table.splitlines() if line.startswith("3 makespan (s)")]
    assert "1500.0 (stuck)" in makespan


def test_muster_args_reach_muster_serve(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--muster-args`` is split like a shell line and added to ``muster serve``'s flags."""
    seen: list[list[str]] = []
    monkeypatch.setattr(bench, "run", lambda *a, **k: seen.append(list(bench.MUSTER_ARGS)))
    monkeypatch.setattr(bench, "report", lambda *a, **k: "")
    assert (
        bench.main(["--only", "gangs", "--muster-args", "--bind-barrier 8 --log-level 'INFO'"]) == 0
    )
    assert seen == [["--bind-barrier", "8", "--log-level", "INFO"]]
    bench.main(["--only", "gangs"])
    assert seen[-1] == []
