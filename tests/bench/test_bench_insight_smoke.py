"""Keep scripts/bench_insight.py working: a tiny prefix of the openb cluster, a few calls in
process and over HTTP (no timing targets)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.scriptload import script_module


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    yield from script_module("bench_insight")


@pytest.mark.timeout(300)
def test_benchmark_measures_explain_and_whatif(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    report = bench.run(nodes=40, pods=300, bound=200, calls=6, warmup=1)

    out = capsys.readouterr().out
    assert "In process" in out and "Over HTTP" in out and "null p99" in out
    assert (report.nodes, report.pods) == (40, 300)
    assert 0 < report.bound <= 200 and report.gangs > 0 and report.waiting > 0
    assert sum(report.categories.values()) == report.gangs
    for name in ("baseline: look()", "explain gang", "explain pod", "what-if"):
        stat = report.in_process[name]
        assert stat.count == 6 and 0 < stat.p50 <= stat.p99
    for kind in ("cold", "running"):
        for name in (f"explain gang, {kind}", f"explain pod, {kind}", f"what-if, {kind}"):
            assert report.in_process[name].count == 3
    for server in ("muster", "null"):
        for name in ("explain gang", "explain pod", "what-if"):
            stat = report.http[server][name]
            assert stat.count == 6 and 0 < stat.p50 <= stat.p99
