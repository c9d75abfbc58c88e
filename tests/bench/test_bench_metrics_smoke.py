"""Keep scripts/bench_metrics.py (and the table it shares with bench_planner.py) working."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.scriptload import script_module


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    yield from script_module("bench_metrics")


def test_the_metrics_benchmark_prints_its_table(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench.main(["--nodes", "4", "--gangs", "20", "--size", "2", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "4 nodes x 8 GPUs, 20 gangs x 2 pods; 16 planned, 4 waiting" in out
    for row in ("first scrape (cold)", "scrape, nothing changed", "baseline (forced cycle)"):
        assert row in out
    assert "0 unjudged, 0 stale" in out
