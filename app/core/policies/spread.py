"""Spreading: the emptier the node after placement, the higher the score."""

from __future__ import annotations

import numpy as np

from app.core.model.values import Resources
from app.core.policies.allocation import keeps_gpus_free, utilisation_after
from app.core.policies.interfaces import MAX_NODE_SCORE
from app.core.state.view import NodeView


class Spread:
    """A ``Scorer``: the emptier the node after placement, the better."""

    name = "spread"
    packs = False  # fuller scores lower

    def score(self, view: NodeView, rows: np.ndarray, requests: Resources) -> np.ndarray:
        """Integer scores 0..``MAX_NODE_SCORE`` for nodes ``rows``."""
        raw = (1.0 - utilisation_after(view, rows, requests)) * keeps_gpus_free(
            view, rows, requests
        )
        scores: np.ndarray = np.rint(raw * MAX_NODE_SCORE).astype(np.int64)
        return scores


POLICY = Spread()
