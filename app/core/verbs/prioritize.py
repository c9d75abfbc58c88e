"""The prioritize verb's decision: a 0-10 score for every candidate node.

The strategy names a scorer of ``app.core.policies.registry.STRATEGIES``; every candidate gets
a score (never just a winner), so kube-scheduler can still weigh its own plugins against
Muster's ranking.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from app.core.model.values import Pod
from app.core.policies.interfaces import MAX_NODE_SCORE
from app.core.policies.registry import STRATEGIES, scorer
from app.core.state.nodetable import NodeTable
from app.core.state.view import NodeView

#: ``STRATEGIES`` is re-exported for the verbs' callers; the policy registry defines it.
__all__ = ["STRATEGIES", "Ranking", "prioritize", "rank"]


@dataclass(frozen=True, slots=True)
class Ranking:
    """Scores for candidate ``names`` (in request order); ``rows`` are their rows in
    ``table`` (``-1``: unknown node, score 0)."""

    names: list[str]
    rows: np.ndarray
    scores: np.ndarray
    table: NodeTable

    def pairs(self) -> list[tuple[str, int]]:
        """``(node, score)`` pairs."""
        return list(zip(self.names, self.scores.tolist(), strict=True))

    def __iter__(self) -> Iterator[tuple[str, int]]:
        return iter(self.pairs())


def rank(
    view: NodeView,
    pod: Pod,
    names: Sequence[str],
    strategy: str = "binpack",
    score: Callable[[np.ndarray], np.ndarray] | None = None,
) -> Ranking:
    """Score every candidate 0-10 with ``strategy`` (or ``score``, given the candidates'
    rows); unknown nodes score 0."""
    names = list(names)
    rows = view.table.rows(names)
    if not names or not len(view.nodes):
        return Ranking(names, rows, np.zeros(len(names), dtype=np.int64), view.table)
    known = rows >= 0
    safe = np.where(known, rows, 0)
    scores = scorer(strategy).score(view, safe, pod.requests) if score is None else score(safe)
    scores = np.where(known, np.clip(scores, 0, MAX_NODE_SCORE), 0)
    return Ranking(names, rows, scores, view.table)


def prioritize(
    view: NodeView, pod: Pod, names: Sequence[str], strategy: str = "binpack"
) -> list[int]:
    """Scores for ``names`` in order; unknown nodes score 0."""
    scores: list[int] = rank(view, pod, names, strategy).scores.tolist()
    return scores
