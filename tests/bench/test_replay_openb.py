"""scripts/replay_openb.py on a prefix of the openb trace: a real ``muster serve`` child over
HTTP must place every pod where the simulator does, on the same devices, and over-commit
nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from app.sim.tracedata import openb_dir
from tests.scriptload import script_module

LIMIT = 400


def trace_and_nodes() -> tuple[Path, Path]:
    """The real openb pod list and node list; a test without them fails, saying how to fetch."""
    folder = openb_dir()
    return folder / "openb_pod_list_default.csv", folder / "openb_node_list_gpu_node.csv"


@pytest.fixture(scope="module")
def replay_openb() -> Iterator[ModuleType]:
    yield from script_module("replay_openb")


@pytest.fixture(scope="module")
def openb_pods() -> Iterator[ModuleType]:
    yield from script_module("openb_pods")


@pytest.mark.timeout(120)
def test_http_replay_matches_the_simulator(replay_openb: ModuleType) -> None:
    trace, nodes = trace_and_nodes()
    report = replay_openb.replay(trace, nodes, seed=0, limit=LIMIT)

    assert report.nodes == 1213
    assert report.arrivals == LIMIT
    assert report.mismatches == 0, report.first_mismatches
    assert report.placed_live == report.placed_sim > 0
    assert report.alloc_live_milli == report.alloc_sim_milli > 0
    assert report.nodes_differing == 0, report.first_node_differences
    # one device rule on both sides: the same device indices, not just the same usage
    assert report.other_device_indices == 0, report.first_other_device_indices
    assert report.nodes_permuted == 0
    assert report.overcommitted == []
    assert report.bind_errors == []
    assert report.gpu_ids_wrong == []
    assert report.ok
    for server in ("muster", "null"):
        filters = report.latency[server]["filter"]
        assert filters.count == LIMIT
        assert 0 < filters.p50 <= filters.p90 <= filters.p99 <= filters.max
        assert report.latency[server]["bind"].count == report.placed_live
    text = "\n".join(replay_openb.render(report))
    assert "RESULT: same allocation as the simulator" in text
    assert replay_openb.as_json(report)["ok"] is True


def test_pod_json_round_trips_the_trace_row(openb_pods: ModuleType) -> None:
    """Every trace row becomes a Pod whose ask is the simulator's (shares, whole GPUs, none)."""
    from app.core.gpu.ask import PodAsk
    from app.core.model.parse import pod_from_dict
    from app.sim.openb import load_trace

    trace = load_trace(trace_and_nodes()[0])
    for i in range(len(trace)):
        name, uid = openb_pods.arrival_identity(i, trace, i)
        pod = pod_from_dict(openb_pods.pod_json(trace, i, name, uid))
        assert PodAsk.of(pod) == trace.ask(i), trace.names[i]
        assert (pod.name, pod.uid) == (name, uid)


def test_fraction_text_is_exact(openb_pods: ModuleType) -> None:
    assert openb_pods.fraction_text(460) == "0.46"
    assert openb_pods.fraction_text(5) == "0.005"
    assert all(round(float(openb_pods.fraction_text(m)) * 1000) == m for m in range(1, 1000))


def test_gpu_spec_becomes_required_node_affinity_for_gpu_pods_only(
    openb_pods: ModuleType,
) -> None:
    import numpy as np

    from app.core.model.parse import pod_from_dict
    from app.sim.openb import Trace

    def column(*values: int) -> np.ndarray:
        return np.array(values, dtype=np.int64)

    trace = Trace(
        ("share", "whole", "cpu"),
        column(1000, 2000, 500),
        column(1024, 2048, 512),
        column(1, 2, 0),
        column(250, 1000, 0),
        ("V100M32|G2", "T4", "G2"),
    )
    pods = [pod_from_dict(openb_pods.pod_json(trace, i, f"p{i}", f"u{i}")) for i in range(3)]
    share, whole, cpu = pods
    assert share.gpu_fraction == 250 and share.annotations["muster.io/gpu-fraction"] == "0.25"
    assert whole.requests.gpu == 2000 and whole.gpu_fraction == 0
    assert cpu.requests.gpu == 0 and cpu.required_affinity is None
    (term,) = share.required_affinity or ()
    (requirement,) = term.match_expressions
    assert (requirement.key, requirement.operator) == ("nvidia.com/gpu.product", "In")
    assert sorted(requirement.values) == ["G2", "V100M32"]
    assert whole.required_affinity is not None
    assert (share.requests.cpu, share.requests.memory) == (1000, 1024 * 2**20 * 1000)
