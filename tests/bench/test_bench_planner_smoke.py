"""Keep scripts/bench_planner.py working (tiny sizes; no timing targets)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.scriptload import script_module


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    yield from script_module("bench_planner")


def _printed(
    bench: ModuleType, capsys: pytest.CaptureFixture[str], *, nodes: int, filter_calls: int
) -> str:
    """What the benchmark prints for 12 gangs of 4 on ``nodes`` nodes (one repeat)."""
    argv = ["--nodes", str(nodes), "--gangs", "12", "--size", "4", "--repeat", "1"]
    assert bench.main([*argv, "--filter-calls", str(filter_calls)]) == 0
    return capsys.readouterr().out


def test_planner_benchmark_prints_cycles_and_filter_waits(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _printed(bench, capsys, nodes=40, filter_calls=5)
    assert "12 gangs planned" in out and "full cycle" in out and "baseline" in out
    assert "full cycle, CPU time" in out
    assert re.search(r"machine reference \d+ ms", out)
    assert "filter while cycles run" in out
    for kind in ("pod on its own", "planned member", "unplanned gang"):
        assert kind in out
    assert "cycle after one arrival" in out and "the same, forced" in out


def test_planner_benchmark_with_gangs_waiting(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cluster smaller than the demand: 4 nodes of 8 GPUs take 8 of 12 gangs of 4."""
    out = _printed(bench, capsys, nodes=4, filter_calls=0)
    assert "8 gangs planned" in out
    assert "every plan bound, 5 gangs waiting" in out


def test_planner_benchmark_against_another_checkout(
    bench: ModuleType, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--against``: this checkout against itself (tiny sizes, one pair), then a directory
    without the benchmark (refused, saying so)."""
    argv = ["--nodes", "40", "--gangs", "12", "--size", "4", "--repeat", "1", "--pairs", "1"]
    assert bench.main([*argv, "--against", str(bench.ROOT)]) == 0
    out = capsys.readouterr().out
    assert "1 alternating pairs" in out
    assert "full cycle: median of the pairs' medians" in out and "ratio" in out
    assert bench.main([*argv, "--against", str(tmp_path)]) == 2
    assert "no scripts/bench_planner.py there" in capsys.readouterr().err
