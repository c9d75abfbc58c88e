"""The prioritize verb's decision: a 0-10 score for every candidate node.

The strategy is a named scorer from ``STRATEGIES``; every candidate gets a score (never just a
winner), so kube-scheduler can still weigh its own plugins against Muster's ranking.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from app.core.cache import NodeView
from app.core.model import Pod, Resources
from app.core.policies import binpack, spread

Scorer = Callable[[NodeView, np.ndarray, Resources], np.ndarray]
STRATEGIES: dict[str, Scorer] = {"binpack": binpack.score, "spread": spread.score}
MAX_SCORE = 10


def prioritize(
    view: NodeView, pod: Pod, names: Sequence[str], strategy: str = "binpack"
) -> list[int]:
    """Scores for ``names`` in order; unknown nodes score 0."""
    scorer = STRATEGIES[strategy]
    if not names:
        return []
    get = view.index.get
    rows = np.fromiter((get(n, -1) for n in names), dtype=np.int64, count=len(names))
    known = rows >= 0
    if not len(view.nodes):
        return [0] * len(names)
    scores = scorer(view, np.where(known, rows, 0), pod.requests)
    scores = np.where(known, np.clip(scores, 0, MAX_SCORE), 0)
    return scores.tolist()
