"""The openb experiment on a tiny sampled trace: method (order, inflation, removal), every
policy deterministic per seed, figures in range, table and plot; ``muster-default`` is the
live policy, shown each pod before ranking it; ``muster simulate openb``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app import cli
from app.core.gpu.ask import PodAsk
from app.core.gpu.table import GpuTable
from app.core.model.clusterfile import parse_openb_csv
from app.core.policies.fgd import LiveGpuPolicy, MusterPolicy, TaskClass, default_policy
from app.core.policies.gpushare import DeviceRanking, choose
from app.sim import tracedata
from app.sim.openb import (
    GRID,
    POLICIES,
    arrival_order,
    load_trace,
    main,
    make_policy,
    run_all,
    simulate,
    summary,
)

NODES = """sn,cpu_milli,memory_mib,gpu,model
node-0,96000,393216,8,G2
node-1,96000,393216,8,G2
node-2,104000,524288,2,T4
node-3,104000,524288,2,T4
node-4,16000,122880,2,P100
node-5,32000,131072,4,V100M16
"""
#: openb-like pods: shares, whole GPUs, a multi-GPU pod, cpu-only pods, a model constraint
PODS = [
    ("pod-{:02d}", 12000, 16384, 1, 1000, ""),
    ("pod-{:02d}", 6000, 12288, 1, 460, ""),
    ("pod-{:02d}", 3152, 5600, 1, 810, ""),
    ("pod-{:02d}", 11300, 49152, 1, 470, ""),
    ("pod-{:02d}", 4000, 14336, 1, 160, ""),
    ("pod-{:02d}", 4000, 22528, 1, 320, "T4|P100"),
    ("pod-{:02d}", 64000, 262144, 8, 1000, ""),
    ("pod-{:02d}", 32000, 131072, 4, 1000, "V100M16"),
    ("pod-{:02d}", 16000, 65536, 2, 1000, ""),
    ("pod-{:02d}", 32000, 49152, 0, 0, ""),
    ("pod-{:02d}", 8000, 29696, 1, 650, ""),
    ("pod-{:02d}", 12000, 24576, 1, 1000, "G2"),
]
CAPACITY = 26_000  # milli-GPU of NODES


def write_trace(path: Path, pods: int, *, spec: bool = True, reverse: bool = False) -> Path:
    rows = [PODS[i % len(PODS)] for i in range(pods)]
    lines = [
        (name.format(i), cpu, mem, n, milli, gpu_spec)
        for i, (name, cpu, mem, n, milli, gpu_spec) in enumerate(rows)
    ]
    if reverse:
        lines.reverse()
    header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli" + (",gpu_spec" if spec else "")
    body = [",".join(map(str, line if spec else line[:-1])) for line in lines]
    path.write_text("\n".join([header, *body]) + "\n")
    return path


@pytest.fixture
def nodes_csv(tmp_path: Path) -> Path:
    path = tmp_path / "nodes.csv"
    path.write_text(NODES)
    return path


def test_arrival_order_inflates_to_130_percent(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "pods.csv", 12))
    request = trace.gpu_request
    assert request.sum() < 1.3 * CAPACITY  # the trace alone is too small
    order = arrival_order(trace, CAPACITY, seed=3)
    arrived = np.cumsum(request[order])
    assert arrived[-1] >= 1.3 * CAPACITY > arrived[-2]  # stops at the pod that crosses 130 %
    assert sorted(order[:12].tolist()) == list(range(12))  # every pod once, then draws
    assert order[:12].tolist() != list(range(12))  # shuffled
    assert arrival_order(trace, CAPACITY, seed=3).tolist() == order.tolist()
    assert arrival_order(trace, CAPACITY, seed=4).tolist() != order.tolist()


def test_arrival_order_removes_pods_above_130_percent(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    rows = [f"pod-{i:02d},4000,8192,1,1000" for i in range(60)]
    path.write_text("\n".join(["name,cpu_milli,memory_mib,num_gpu,gpu_milli", *rows]) + "\n")
    trace = load_trace(path)  # 60 whole GPUs for 26: 230 %
    order = arrival_order(trace, CAPACITY, seed=0)
    assert len(set(order.tolist())) == len(order)  # removal only, no duplicates
    # removal stops as soon as the rest asks for no more than 130 %: 33 of 33.8 GPUs
    assert len(order) == 33
    assert arrival_order(trace, CAPACITY, seed=1).tolist() != order.tolist()


def test_order_depends_on_names_not_file_order(tmp_path: Path) -> None:
    forward = load_trace(write_trace(tmp_path / "a.csv", 30))
    backward = load_trace(write_trace(tmp_path / "b.csv", 30, reverse=True))
    names_f = [forward.names[i] for i in arrival_order(forward, CAPACITY, seed=1)]
    names_b = [backward.names[i] for i in arrival_order(backward, CAPACITY, seed=1)]
    assert names_f == names_b


def test_every_policy_is_deterministic_per_seed_and_in_range(
    tmp_path: Path, nodes_csv: Path
) -> None:
    trace = load_trace(write_trace(tmp_path / "pods.csv", 12))
    nodes = parse_openb_csv(nodes_csv.read_text())
    runs = run_all(nodes, trace, POLICIES, seeds=[0, 1])
    again = run_all(nodes, trace, POLICIES, seeds=[0, 1], jobs=2)
    assert [r.curve.tolist() for r in runs] == [r.curve.tolist() for r in again]
    for r in runs:
        assert len(r.curve) == len(GRID)
        assert (np.diff(r.curve) >= 0).all()  # allocation only grows
        assert 0 <= r.at(100) <= r.at(130) <= 100
        assert r.at(130) > 40  # something was placed
        assert r.placed + r.failed > 12  # inflated
    table = summary(runs, POLICIES, {"fgd": 95.39})
    assert all(p in table for p in POLICIES) and "95.39" in table


def test_fragmentation_aware_policies_beat_random_on_a_fragmenting_trace(
    tmp_path: Path, nodes_csv: Path
) -> None:
    trace = load_trace(write_trace(tmp_path / "pods.csv", 36))
    nodes = parse_openb_csv(nodes_csv.read_text())
    mean = {
        p: np.mean([simulate(nodes, trace, p, seed).at(130) for seed in range(4)])
        for p in ("random", "fgd", "muster-default")
    }
    assert mean["fgd"] > mean["random"]
    assert mean["muster-default"] > mean["random"]


def test_trace_without_gpu_spec_column(tmp_path: Path) -> None:
    trace = load_trace(write_trace(tmp_path / "pods.csv", 12, spec=False))
    assert set(trace.gpu_spec) == {""}
    assert trace.ask(6).gpu.count == 8


def test_command_line_prints_the_table_and_draws_the_plot(
    tmp_path: Path, nodes_csv: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = write_trace(tmp_path / "pods.csv", 24)
    png = tmp_path / "alloc.png"
    argv = ["--trace", str(pods), "--nodes", str(nodes_csv), "--seeds", "2", "--jobs", "1"]
    assert main([*argv, "--policies", "random,muster-default", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "random" in out and "muster-default" in out and "best-fit" not in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit):
        main([*argv, "--policies", "nope"])


class Spy(LiveGpuPolicy):
    """The live policy, recording what it is shown and checking its mix when it ranks."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, PodAsk]] = []

    def observe(self, ask: PodAsk) -> None:
        self.calls.append(("observe", ask))
        super().observe(ask)

    def rank(self, table: GpuTable, ask: PodAsk) -> DeviceRanking:
        self.calls.append(("rank", ask))
        assert TaskClass.of(ask) in self.mix().classes, "ranked before it was observed"
        return super().rank(table, ask)


def test_live_default_observes_each_pod_once_before_ranking_it(
    tmp_path: Path, nodes_csv: Path
) -> None:
    trace = load_trace(write_trace(tmp_path / "pods.csv", 24))
    nodes = parse_openb_csv(nodes_csv.read_text())
    spy = Spy()
    result = simulate(nodes, trace, "muster-default", 0, factory=lambda *_: spy)
    arrivals = arrival_order(trace, CAPACITY, 0)
    assert len(spy.calls) == 2 * len(arrivals) == 2 * (result.placed + result.failed)
    expected = [trace.ask(i) for i in arrivals.tolist()]
    assert [a for verb, a in spy.calls[0::2]] == expected  # every arrival observed ...
    assert {verb for verb, _ in spy.calls[0::2]} == {"observe"}
    assert spy.calls[1::2] == [("rank", a) for a in expected]  # ... then ranked, in turn


def test_muster_default_is_the_live_policy_and_oracle_knows_the_trace(
    tmp_path: Path, nodes_csv: Path
) -> None:
    trace = load_trace(write_trace(tmp_path / "pods.csv", 24))
    assert isinstance(make_policy("muster-default", trace, 0), LiveGpuPolicy)
    oracle = make_policy("muster-oracle", trace, 0)
    assert isinstance(oracle, MusterPolicy) and oracle.name == "muster-oracle"
    # the simulation's muster-default is default_policy() driven as the extender drives it
    nodes = parse_openb_csv(nodes_csv.read_text())
    got = simulate(nodes, trace, "muster-default", 2)
    table = GpuTable.from_nodes([nodes[i] for i in np.random.default_rng([2, 1]).permutation(6)])
    live, placed = default_policy(), 0
    for i in arrival_order(trace, CAPACITY, 2).tolist():
        ask = trace.ask(i)
        live.observe(ask)
        pick = choose(live, table, ask)
        if pick is not None:
            table.apply(pick.row, ask, pick.devices)
            placed += 1
    assert got.placed == placed
    assert got.at(130) == pytest.approx(100 * table.gpu_allocated / CAPACITY)


def openb_files(directory: Path, pods: int = 24) -> tuple[Path, Path]:
    """A small trace and node list named as the real ones (so the paper's column shows)."""
    directory.mkdir(exist_ok=True)
    nodes = directory / "openb_node_list_gpu_node.csv"
    nodes.write_text(NODES)
    return write_trace(directory / "openb_pod_list_default.csv", pods), nodes


def test_muster_simulate_openb_prints_the_table_and_draws_the_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    pods, nodes = openb_files(tmp_path / "openb")
    png = tmp_path / "openb.png"
    argv = ["simulate", "openb", "--trace", str(pods), "--nodes", str(nodes), "--seeds", "1",
            "--jobs", "1", "--plot", str(png)]  # fmt: skip
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0] == "openb_pod_list_default.csv: 24 pods; 6 nodes, 26 GPUs; 1 seeds"
    assert lines[1].split() == ["policy", "alloc", "@130%", "alloc", "@100%", "failed", "pods",
                                "paper", "s/run"]  # fmt: skip
    rows = {line.split()[0]: line.split() for line in lines[2:] if line.split()[0] in POLICIES}
    assert list(rows) == list(POLICIES)  # all six by default, muster-oracle included
    assert rows["fgd"][-2] == "95.39" and rows["muster-default"][-2] == "-"
    assert all(0 < float(row[1]) <= 100 for row in rows.values())
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"plot written to {png}" in captured.out
    assert "muster-default seed 0:" in captured.err  # progress


def test_muster_simulate_openb_finds_the_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pods, nodes = openb_files(tmp_path, pods=12)
    for other in ("openb_node_list_all_node.csv", "openb_pod_list_multigpu50.csv"):
        (tmp_path / other).write_text("")  # a folder counts when it holds all four files
    monkeypatch.setenv(tracedata.ENV_VAR, str(tmp_path))
    args = cli.build_parser().parse_args(["simulate", "openb", "--policies", "best-fit"])
    assert args.trace == str(tmp_path / "openb_pod_list_default.csv")
    assert args.nodes == str(tmp_path / "openb_node_list_gpu_node.csv")
    assert (args.seeds, args.policies, args.jobs) == (10, ["best-fit"], 2)
    assert cli.main(["simulate", "openb", "--seeds", "1", "--policies", "best-fit", "--quiet"]) == 0
    assert "best-fit" in capsys.readouterr().out
    # with the trace nowhere, --trace and --nodes must be given, and the help says how to fetch
    monkeypatch.setenv(tracedata.ENV_VAR, str(tmp_path / "missing"))
    monkeypatch.setattr(tracedata, "SIBLING", tmp_path / "missing")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "missing"))
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["simulate", "openb"])
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["simulate", "openb", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps the lines
    assert "not found: run `python scripts/fetch_openb.py`" in help_text
    # the gang simulation is still the default mode
    assert cli.build_parser().parse_args(["simulate", "--preset", "seed"]).experiment is None


def test_muster_simulate_openb_refuses_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods, nodes = openb_files(tmp_path)
    base = ["simulate", "openb", "--trace", str(pods), "--nodes", str(nodes), "--quiet"]
    assert cli.main([*base[:3], str(tmp_path / "none.csv"), *base[4:]]) == 2
    assert "none.csv" in capsys.readouterr().err
    assert cli.main([*base, "--seeds", "0"]) == 2
    with pytest.raises(SystemExit):
        cli.main([*base, "--policies", "fgd,nope"])
    assert "unknown policy nope" in capsys.readouterr().err
