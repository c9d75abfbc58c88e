"""prioritize: bin-packing by default, spread on request, every candidate ranked 0-10."""

from __future__ import annotations

import asyncio

import pytest

from app.core.state.cache import ClusterCache
from app.core.state.gateway import InMemoryGateway
from app.core.verbs.extender import Extender
from app.core.verbs.prioritize import prioritize
from app.settings import Settings
from app.wiring import build_graph
from tests.factories import node, pod


def cluster() -> ClusterCache:
    cache = ClusterCache()
    cache.upsert_nodes(
        [
            node("empty", gpus=8),
            node("half", gpus=8),
            node("almost", gpus=8),
            node("cpu-only", gpus=0, cpu="64"),
        ]
    )
    cache.upsert_pods([pod(gpu=4, node="half"), pod(gpu=7, node="almost")])
    return cache


CASES = [
    ("binpack", {"gpu": 1}, ["empty", "half", "almost"], [1, 6, 10]),
    ("spread", {"gpu": 1}, ["empty", "half", "almost"], [9, 4, 0]),
    ("binpack", {"gpu": 1}, ["almost", "ghost"], [10, 0]),
    # CPU-only pods: half marks on GPU nodes keep GPUs for GPU work.
    ("spread", {"cpu": "1"}, ["empty", "cpu-only"], [5, 10]),
]


@pytest.mark.parametrize(("strategy", "spec", "names", "scores"), CASES)
def test_scores(strategy: str, spec: dict, names: list[str], scores: list[int]) -> None:
    assert prioritize(cluster().view(), pod(**spec), names, strategy) == scores


def test_every_candidate_gets_a_score_in_range() -> None:
    cache = ClusterCache()
    cache.upsert_nodes(node(f"n{i}", gpus=8) for i in range(100))
    for i in range(100):
        cache.upsert_pod(pod(gpu=i % 9, node=f"n{i}"))
    names = [f"n{i}" for i in range(100)]
    for strategy in ("binpack", "spread"):
        scores = prioritize(cache.view(), pod(gpu=1), names, strategy)
        assert len(scores) == 100 and all(0 <= s <= 10 for s in scores)
        assert len(set(scores)) > 5  # a ranking, not one winner


def test_unknown_strategy_is_refused() -> None:
    with pytest.raises(KeyError):
        prioritize(cluster().view(), pod(), ["empty"], "random")


def _extender(cache: ClusterCache, *, sole_pick: bool = False) -> Extender:
    settings = Settings(sole_pick=sole_pick)
    return build_graph(settings, cache, InMemoryGateway(cache)).extender


def test_a_single_pod_is_held_on_the_one_top_node_until_its_bind() -> None:
    """kube-scheduler places the next pod before the last one's bind arrives: the node
    Muster ranks first for a pod on its own is held for it, so the next pod sees it full."""
    cache = ClusterCache()
    cache.upsert_nodes([node("a", gpus=8), node("b", gpus=8), node("c", gpus=8)])
    cache.upsert_pods([pod(gpu=7, node="a"), pod(gpu=7, node="b"), pod(gpu=8, node="c")])
    extender = _extender(cache)
    first, second = cache.learn_pod(pod("p1", gpu=1)), cache.learn_pod(pod("p2", gpu=1))
    names = ["a", "b", "c"]
    assert extender.filter(first, names).feasible == ["a", "b"]
    scores = dict(extender.prioritize(first, ["a", "b"]).pairs())
    assert sorted(scores.values())[-1] > sorted(scores.values())[-2]  # one winner
    chosen = max(scores, key=lambda n: scores[n])
    other = ({"a", "b"} - {chosen}).pop()
    # The next pod no longer sees the held GPU; its only node is held for it in turn.
    assert extender.filter(second, names).feasible == [other]
    assert extender.filter(cache.learn_pod(pod("p3", gpu=1)), names).feasible == []
    assert asyncio.run(extender.bind("default", "p2", second.uid, other)).error == ""
    assert asyncio.run(extender.bind("default", "p1", first.uid, chosen)).error == ""
    assert cache.view().free_of(chosen).gpu == cache.view().free_of(other).gpu == 0


def test_filtering_a_pod_again_drops_its_hold() -> None:
    cache = ClusterCache()
    cache.upsert_nodes([node("a", gpus=1), node("b", gpus=1)])
    extender = _extender(cache)
    single = cache.learn_pod(pod("p1", gpu=1))
    extender.prioritize(single, ["a", "b"])
    assert sum(cache.view().free_of(n).gpu for n in "ab") == 1000
    extender.filter(single, ["a", "b"])  # kube-scheduler tries it again: the hold is gone
    assert sum(cache.view().free_of(n).gpu for n in "ab") == 2000
