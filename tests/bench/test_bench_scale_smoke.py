"""Keep the scale benchmarks working at tiny sizes (figures only; no timing targets)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from types import ModuleType

import pytest

from app.core.model.parse import node_from_dict, pod_from_dict
from tests.scriptload import script_module


@pytest.fixture(scope="module")
def memory() -> Iterator[ModuleType]:
    yield from script_module("bench_memory")


@pytest.fixture(scope="module")
def events() -> Iterator[ModuleType]:
    yield from script_module("bench_events")


def test_generated_objects_parse_and_fill_the_nodes_exactly(memory: ModuleType) -> None:
    nodes = [node_from_dict(memory.node_json(i)) for i in range(4)]
    pods = [pod_from_dict(memory.pod_json(i, 4, fill=0.5)) for i in range(48)]
    assert {n.allocatable.gpu for n in nodes} == {8000}
    bound = [p for p in pods if p.node_name]
    assert len(bound) == 16  # gangs 0 and 1 run, on nodes 0 and 1, 8 GPUs each
    assert {p.node_name for p in bound} == {"gpu-node-00000", "gpu-node-00001"}
    assert all(p.labels["muster.io/pod-group"] for p in pods)


def test_paged_api_serves_pages_with_continue_tokens(memory: ModuleType) -> None:
    api = memory.PagedApi(3, 7, threading.Event())
    first = json.loads(api.list_pod_for_all_namespaces(limit=5).data)
    assert len(first["items"]) == 5 and first["metadata"]["continue"] == "5"
    rest = json.loads(api.list_pod_for_all_namespaces(limit=5, _continue="5").data)
    assert len(rest["items"]) == 2 and "continue" not in rest["metadata"]


def test_memory_benchmark_prints_its_figures(
    memory: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    figures = memory.run(20, 200)
    out = capsys.readouterr().out
    assert "baseline RSS, idle server" in out and "RSS with the cluster cached" in out
    assert 0 < figures["baseline_mb"] <= figures["loaded_mb"] <= figures["peak_mb"]
    assert (figures["nodes"], figures["pods"]) == (20, 200)


def test_events_benchmark_streams_and_prints_both_series(
    events: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    result = events.run(20, 200, requests=10, phase=0.3, rate=100.0, warmup=2)
    out = capsys.readouterr().out
    assert "no pod events (baseline)" in out and "ratio streaming/baseline" in out
    assert result.quiet.count >= 10 and result.streaming.count >= 10
    assert result.events_per_second > 0


@pytest.fixture(scope="module")
def startup() -> Iterator[ModuleType]:
    yield from script_module("bench_startup")


def test_startup_benchmark_times_a_real_replica(
    startup: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real control plane (kube-apiserver 1.20), a few objects, one run each."""
    baseline, loaded = startup.run(nodes=5, pods=40, runs=1, workers=4)
    out = capsys.readouterr().out
    assert "created 5 nodes and 40 pods" in out and "empty API server (baseline)" in out
    assert baseline > 0 and loaded > 0
