"""prioritize: bin-packing by default, spread on request, every candidate ranked 0-10."""

from __future__ import annotations

import pytest

from app.core.state.cache import ClusterCache
from app.core.verbs.prioritize import prioritize
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
