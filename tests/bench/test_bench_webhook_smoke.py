"""Keep scripts/bench_webhook.py working (tiny run; no timing targets)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from tests.scriptload import script_module


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    yield from script_module("bench_webhook")


def test_benchmark_measures_both_servers_and_prints_the_table(bench: ModuleType) -> None:
    lines: list[str] = []
    stats = bench.run(requests=15, warmup=2, pods=64, out=lines.append)
    payloads = list(bench.payloads())
    assert set(stats) == {"muster", "null", "in-process"}
    for server in ("muster", "null"):
        assert set(stats[server]) == {*payloads, "all /mutate"}
        assert all(stats[server][name].count == 15 for name in payloads)
        assert all(0 < s.p50 <= s.p99 for s in stats[server].values())
        mutating = sum(1 for path, _ in bench.payloads().values() if path == "/mutate")
        assert stats[server]["all /mutate"].count == 15 * mutating
    assert set(stats["in-process"]) == set(payloads)
    text = "\n".join(lines)
    assert "muster p50" in text and "null p50" in text
    assert all(name in text for name in payloads)
    assert text.splitlines()[-1].startswith("target: /mutate p99 <= 5 ms")
