"""Keep scripts/bench_e2e.py working: every scenario at a tiny size on both systems.

No timing assertions (the machine is shared); correctness only: through Muster every gang
runs whole, no GPU is over-committed, preemption breaks no victim gang.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.scriptload import script_module


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    yield from script_module("bench_e2e")


def test_every_scenario_runs_on_both_systems_and_muster_keeps_gangs_whole(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    sizes = bench.Sizes(
        nodes=3, singles=16, over=2, contention_nodes=2, contention_jobs=5,
        runtime=10.0, preempt_nodes=2, trials=1, singles_trials=2,
    )  # fmt: skip
    results = bench.run(sizes, time_scale=0.1, log=lambda _: None)
    muster, alone = results.figures["muster"], results.figures["alone"]
    # The null extender runs the singles only, taking turns with the others in every trial.
    null = results.figures["null"]
    assert set(null) == {"singles"}
    for figures in (muster, alone, null):
        singles = figures["singles"]
        assert len(singles["rates"]) == 2
        assert singles["rate"] == min(singles["rates"])  # the lower median of two
    for figures in (muster, alone):
        assert set(figures) == {"singles", "gangs", "gangs_over", "contention", "preemption"}
        assert figures["singles"]["overcommit"] == 0
        assert figures["contention"]["whole"] == 5  # the fake kubelet saw every job run
        assert figures["contention"]["overcommit"] == 0
    assert muster["gangs"]["whole"] == muster["gangs_over"]["whole"] == 3
    assert muster["gangs"]["partial"] == 0
    contention = muster["contention"]
    assert contention["partial"] == 0
    assert contention["reuse_n"] == 5 - 2  # one freeing per job started after the fill
    assert contention["makespan"] >= contention["bound"] * 0.99
    assert 0 <= contention["idle_pct"] <= 100
    preemption = muster["preemption"]
    assert preemption["broken"] == preemption["overcommit"] == 0
    assert len(preemption["times"]) == 1
    print(bench.report(results, sizes, 0.1))
    table = capsys.readouterr().out
    for target in ("1 singles", "null extender", "2a gangs", "2b gangs", "floor of any extender",
                   "3 makespan", "4 preemption"):  # fmt: skip
        assert target in table


def test_every_system_talks_to_the_api_at_the_shipped_rate(bench: ModuleType) -> None:
    """kube-scheduler alone, with Muster, and with the null extender: the same backoff and
    API client rate, the shipped profile's; and the e2e tests' configuration is the same."""
    from harness import SCHEDULER_CONFIG

    def timing(config: dict[str, Any]) -> tuple[object, ...]:
        connection = config["clientConnection"]
        return (config["podInitialBackoffSeconds"], config["podMaxBackoffSeconds"],
                float(connection["qps"]), connection["burst"])  # fmt: skip

    shipped = {
        name: yaml.safe_load((bench.ROOT / "scheduler-config" / name).read_text())
        for name in ("muster-profile.yaml", "muster-scheduler.yaml")
    }
    expected = timing(shipped["muster-profile.yaml"])
    assert expected[2] > 50 and expected[3] > 100  # above kube-scheduler's defaults
    for name, config in shipped.items():
        assert timing(config) == expected, name
        assert set(config["clientConnection"]) == {"qps", "burst"}, name  # kubeconfig: yours
    assert timing(yaml.safe_load(SCHEDULER_CONFIG)) == expected
    for system in ("alone", "muster", "null"):
        assert timing(yaml.safe_load(bench.scheduler_config(system, "http://x"))) == expected
