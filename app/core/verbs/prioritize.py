"""The prioritize verb's decision: a 0-10 score for every candidate node.

The strategy is a named scorer from ``STRATEGIES``; every candidate gets a score (never just a
winner), so kube-scheduler can still weigh its own plugins against Muster's ranking.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from app.core.model.values import Pod, Resources
from app.core.policies import binpack, spread
from app.core.state.cache import NodeView
from app.core.state.nodetable import NodeTable

Scorer = Callable[[NodeView, np.ndarray, Resources], np.ndarray]
#: ``muster`` (the default) ranks GPU pods with the live GPU placement policy
#: (``app.core.policies.gpuplacement``) in the extender; everywhere else it packs like ``binpack``.
STRATEGIES: dict[str, Scorer] = {
    "muster": binpack.score,
    "binpack": binpack.score,
    "spread": spread.score,
}
MAX_SCORE = 10


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
    scores = STRATEGIES[strategy](view, safe, pod.requests) if score is None else score(safe)
    scores = np.where(known, np.clip(scores, 0, MAX_SCORE), 0)
    return Ranking(names, rows, scores, view.table)


def prioritize(
    view: NodeView, pod: Pod, names: Sequence[str], strategy: str = "binpack"
) -> list[int]:
    """Scores for ``names`` in order; unknown nodes score 0."""
    return rank(view, pod, names, strategy).scores.tolist()
