"""filter decisions as a scenario table: cluster, pod, expected feasible set and reasons."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from app.core.state.cache import ClusterCache
from app.core.verbs.filter import FilterMemo, filter_nodes
from tests.factories import node, pod

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATE_GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@dataclass
class Case:
    name: str
    nodes: list[dict[str, Any]]
    pod: dict[str, Any]
    feasible: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    running: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    candidates: list[str] | None = None


CASES = [
    Case(
        "gpu fit against what is free",
        nodes=[{"name": "a", "gpus": 8}, {"name": "b", "gpus": 8}],
        running=[("a", {"gpu": 6})],
        pod={"gpu": 4},
        feasible=["b"],
        failed={"a": "needs 4 nvidia.com/gpu, 2 free"},
    ),
    Case(
        "request larger than any node is unresolvable",
        nodes=[{"name": "a", "gpus": 8}],
        pod={"gpu": 16},
        feasible=[],
        unresolvable={"a": "needs 16 nvidia.com/gpu, node has 8"},
    ),
    Case(
        "cpu and memory are checked too",
        nodes=[{"name": "a", "gpus": 8, "cpu": "4", "memory": "8Gi"}],
        running=[("a", {"cpu": "3", "memory": "6Gi"})],
        pod={"cpu": "2", "memory": "4Gi"},
        feasible=[],
        failed={"a": "needs 2 cpu, 1 free; needs 4Gi memory, 2Gi free"},
    ),
    Case(
        "pod slots",
        nodes=[{"name": "a", "pods": 1}],
        running=[("a", {})],
        pod={},
        feasible=[],
        failed={"a": "needs 1 pods, 0 free"},
    ),
    Case(
        "unknown node",
        nodes=[{"name": "a"}],
        pod={"gpu": 1},
        candidates=["a", "ghost"],
        feasible=["a"],
        unresolvable={"ghost": "unknown node"},
    ),
    Case(
        "untolerated taint",
        nodes=[{"name": "a", "taints": [GPU_TAINT]}, {"name": "b"}],
        pod={"gpu": 1},
        feasible=["b"],
        unresolvable={"a": "untolerated taint {nvidia.com/gpu=present:NoSchedule}"},
    ),
    Case(
        "tolerated taint",
        nodes=[{"name": "a", "taints": [GPU_TAINT]}],
        pod={"gpu": 1, "tolerations": [TOLERATE_GPU]},
        feasible=["a"],
    ),
    Case(
        "PreferNoSchedule does not block",
        nodes=[{"name": "a", "taints": [{"key": "k", "effect": "PreferNoSchedule"}]}],
        pod={},
        feasible=["a"],
    ),
    Case(
        "cordoned node",
        nodes=[{"name": "a", "unschedulable": True}, {"name": "b"}],
        pod={},
        feasible=["b"],
        unresolvable={"a": "node is unschedulable (cordoned)"},
    ),
    Case(
        "cordon tolerated",
        nodes=[{"name": "a", "unschedulable": True}],
        pod={"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]},
        feasible=["a"],
    ),
    Case(
        "nodeSelector",
        nodes=[{"name": "a", "labels": {"gpu": "h100"}}, {"name": "b", "labels": {"gpu": "a100"}}],
        pod={"node_selector": {"gpu": "h100"}},
        feasible=["a"],
        unresolvable={"b": "nodeSelector gpu=h100 not matched"},
    ),
    Case(
        "required affinity In / NotIn / Exists / Gt",
        nodes=[
            {"name": "a", "labels": {"zone": "z1", "gen": "9"}},
            {"name": "b", "labels": {"zone": "z2", "gen": "9"}},
            {"name": "c", "labels": {"zone": "z1", "gen": "7"}},
            {"name": "d", "labels": {"zone": "z1", "gen": "9", "bad": ""}},
        ],
        pod={
            "affinity_terms": [
                {
                    "matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["z1"]},
                        {"key": "gen", "operator": "Gt", "values": ["8"]},
                        {"key": "bad", "operator": "DoesNotExist"},
                    ]
                }
            ]
        },
        feasible=["a"],
        unresolvable={
            "b": "required node affinity not matched",
            "c": "required node affinity not matched",
            "d": "required node affinity not matched",
        },
    ),
    Case(
        "affinity terms are ORed; matchFields on the name",
        nodes=[{"name": "a"}, {"name": "b"}, {"name": "c", "labels": {"x": "1"}}],
        pod={
            "affinity_terms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]},
                {"matchExpressions": [{"key": "x", "operator": "Exists"}]},
            ]
        },
        feasible=["a", "c"],
        unresolvable={"b": "required node affinity not matched"},
    ),
    Case(
        "empty affinity term matches nothing",
        nodes=[{"name": "a"}],
        pod={"affinity_terms": [{}]},
        feasible=[],
        unresolvable={"a": "required node affinity not matched"},
    ),
    Case(
        "cpu-only pod fits on a full GPU node",
        nodes=[{"name": "a", "gpus": 2}],
        running=[("a", {"gpu": 2})],
        pod={"gpu": 0},
        feasible=["a"],
    ),
    Case(
        "finished pods free their GPUs",
        nodes=[{"name": "a", "gpus": 2}],
        running=[("a", {"gpu": 2, "phase": "Succeeded"})],
        pod={"gpu": 2},
        feasible=["a"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_filter(case: Case) -> None:
    cache = ClusterCache()
    cache.upsert_nodes(node(**spec) for spec in case.nodes)
    for where, spec in case.running:
        cache.upsert_pod(pod(node=where, **spec))
    names = case.candidates or [spec["name"] for spec in case.nodes]
    result = filter_nodes(cache.view(), pod("candidate", **case.pod), names)
    assert result.feasible == case.feasible
    assert result.failed == case.failed
    assert result.unresolvable == case.unresolvable


def test_all_feasible_fast_path_keeps_order() -> None:
    cache = ClusterCache()
    cache.upsert_nodes(node(f"n{i}") for i in range(50))
    names = [f"n{i}" for i in reversed(range(50))]
    assert filter_nodes(cache.view(), pod(gpu=1), names).feasible == names


def test_empty_candidates_and_empty_cache() -> None:
    assert filter_nodes(ClusterCache().view(), pod(), []).feasible == []
    result = filter_nodes(ClusterCache().view(), pod(), ["x"])
    assert result.unresolvable == {"x": "unknown node"}


def test_memo_reuses_the_answer_only_for_the_same_question() -> None:
    cache = ClusterCache()
    cache.upsert_nodes([node("a", gpus=8), node("b", gpus=8, taints=[GPU_TAINT])])
    memo = FilterMemo()
    names = ["a", "b"]
    first = memo.filter(cache.view(), pod("p1", gpu=4), names)
    assert first.feasible == ["a"] and set(first.unresolvable) == {"b"}
    # Another pod of the same shape, same view and candidates: the same answer object.
    assert memo.filter(cache.view(), pod("p2", gpu=4), list(names)) is first
    # A different shape (tolerates the taint, or asks more) is judged on its own.
    tolerant = memo.filter(cache.view(), pod("p3", gpu=4, tolerations=[TOLERATE_GPU]), names)
    assert tolerant.feasible == ["a", "b"]
    assert memo.filter(cache.view(), pod("p4", gpu=4), ["a"]).unresolvable == {}
    # Usage changes (a bind): a new view, a fresh answer.
    cache.upsert_pod(pod("busy", gpu=6, node="a", phase="Running"))
    after = memo.filter(cache.view(), pod("p5", gpu=4), names)
    assert after is not first
    assert after.feasible == [] and after.failed == {"a": "needs 4 nvidia.com/gpu, 2 free"}


# (pod shape, what changes between questions: pods placed or removed on a node or two)
SHAPES = [
    {"gpu": 1},
    {"gpu": 4},
    {"gpu": 2, "tolerations": [TOLERATE_GPU]},
    {"cpu": "60"},
    {"annotations": {"muster.io/gpu-fraction": "0.5"}},
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_a_patched_answer_is_the_answer_computed_afresh(
    shape: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pod after pod, a bind or a departure changes a node or two: the memo decides only those
    candidates again, and its answer equals ``filter_nodes`` on the whole list."""
    import random

    from app.core.verbs import filter as filter_module

    asked: list[int] = []
    real = filter_module.filter_nodes
    monkeypatch.setattr(
        filter_module, "filter_nodes", lambda v, p, n: asked.append(len(n)) or real(v, p, n)
    )
    rng = random.Random(7)
    cache = ClusterCache()
    cache.upsert_nodes(
        [node(f"n{i}", gpus=(8, 4, 0)[i % 3], taints=[GPU_TAINT] if i % 7 == 0 else None)
         for i in range(48)]
    )  # fmt: skip
    names = [f"n{i}" for i in range(48)] + ["ghost"]
    memo = FilterMemo()
    running: list[Any] = []
    for step in range(80):
        if running and rng.random() < 0.3:
            cache.delete_pod(running.pop(rng.randrange(len(running))).uid)
        else:
            target = f"n{rng.randrange(48)}"
            placed = pod(f"r{step}", gpu=rng.choice([1, 2, 4]), cpu="8", node=target,
                         phase="Running")  # fmt: skip
            cache.upsert_pod(placed)
            running.append(placed)
        view = cache.view()
        asking = pod(f"p{step}", **shape)
        got = memo.filter(view, asking, names)
        want = real(view, asking, names)
        assert (got.feasible, got.failed, got.unresolvable) == (
            want.feasible,
            want.failed,
            want.unresolvable,
        ), step
    # After the first question, each was answered by deciding a node or two again.
    assert asked[0] == len(names) and max(asked[1:]) <= 2


@pytest.mark.parametrize(("busy", "patched"), [(1, True), (2, True), (3, False), (8, False)])
def test_the_memo_patches_only_while_few_nodes_changed(busy: int, patched: bool) -> None:
    """16 nodes: up to 2 changed (an eighth) are decided again alone; more, and filter starts
    afresh (the answer is the same either way)."""
    cache = ClusterCache()
    cache.upsert_nodes([node(f"n{i}", gpus=8) for i in range(16)])
    names = [f"n{i}" for i in range(16)]
    memo = FilterMemo()
    memo.filter(cache.view(), pod("p0", gpu=4), names)
    before = cache.view()
    cache.upsert_pods([pod(f"r{i}", gpu=6, node=f"n{i}", phase="Running") for i in range(busy)])
    changed = cache.view().changed_rows(before)
    assert (changed is not None) == patched
    if changed is not None:
        assert changed.tolist() == list(range(busy))
    got = memo.filter(cache.view(), pod("p1", gpu=4), names)
    assert got.feasible == names[busy:]
    assert got.failed == {f"n{i}": "needs 4 nvidia.com/gpu, 2 free" for i in range(busy)}
