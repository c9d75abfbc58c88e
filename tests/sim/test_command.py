"""``muster simulate`` end to end at a tiny scale: the table, JSON, the plot, bad options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.cli import build_parser, main
from app.sim.command import build_configs, build_specs


def test_seed_preset_at_tiny_scale_prints_both_policies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "figures.json"
    code = main(["simulate", "--preset", "seed", "--scale", "0.02", "--quiet", "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert text.startswith("2 nodes x 100 CPU; 20 jobs x 10 pods x 2 CPU, gang of 10")
    header = next(line for line in text.splitlines() if line.lstrip().startswith("muster"))
    assert header.split() == ["muster", "default"]
    for row in ("makespan / lower bound", "partial-gang pod-seconds", "scheduling attempts"):
        assert row in text
    figures = {f["label"]: f for f in json.loads(out.read_text())}
    assert figures["muster"]["partialGangPodSeconds"] == 0
    assert figures["muster"]["failed"] == 0 and figures["muster"]["completed"] == 20
    assert figures["muster"]["makespan"] >= figures["muster"]["lowerBound"]


def test_plot_is_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "sim.png"
    argv = ["simulate", "--nodes", "2", "--node-cpu", "8", "--jobs", "4", "--pods-per-job", "2",
            "--runtime", "20", "--quiet", "--plot", str(png)]  # fmt: skip
    assert main(argv) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_backoff_lists_make_one_run_per_policy_and_setting() -> None:
    args = build_parser().parse_args(
        ["simulate", "--preset", "seed", "--policies", "muster", "--max-backoff", "10,2"]
    )
    _, workload = build_specs(args)
    configs = build_configs(args, workload)
    assert [c.label for c in configs] == ["muster 1/10s", "muster 1/2s"]
    assert [c.scheduler.max_backoff for c in configs] == [10.0, 2.0]


def test_options_override_the_preset() -> None:
    args = build_parser().parse_args(
        ["simulate", "--preset", "seed", "--jobs", "7", "--arrival", "poisson:0.5",
         "--node-gpus", "8", "--scale", "0.5"]
    )  # fmt: skip
    cluster, workload = build_specs(args)
    assert (cluster.nodes, cluster.gpus, cluster.cpu) == (50, 8, 100.0)
    assert (workload.jobs, str(workload.arrival), workload.pods_per_job) == (4, "poisson:0.5", 10)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--policies", "volcano"], "unknown policy volcano"),
        (["--arrival", "soon"], "use all, uniform:SECONDS or poisson:JOBS_PER_SECOND"),
        (["--max-backoff", "ten"], "expected numbers separated by commas"),
    ],
)
def test_bad_options_are_refused_with_a_reason(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_inconsistent_workload_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--pods-per-job", "2", "--min-member", "3", "--quiet"]) == 2
    assert "min-member" in capsys.readouterr().err


def test_declared_runtimes_and_gang_order_reach_the_runs() -> None:
    argv = ["simulate", "--preset", "seed", "--declare-runtime", "own", "--gang-order", "fifo",
            "--longest-first-window", "60"]  # fmt: skip
    args = build_parser().parse_args(argv)
    _, workload = build_specs(args)
    assert workload.declare_runtime and workload.declare_own_runtime
    (config, _) = build_configs(args, workload)
    assert (config.policy_config.gang_order, config.policy_config.longest_first_window) == (
        "fifo",
        60.0,
    )
    plain = build_parser().parse_args(["simulate", "--preset", "seed", "--declare-runtime"])
    _, workload = build_specs(plain)
    assert workload.declare_runtime and not workload.declare_own_runtime
