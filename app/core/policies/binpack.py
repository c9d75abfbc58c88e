"""Bin-packing (the default): the fuller the node after placement, the higher the score.

Packing GPU pods onto partly used nodes keeps whole nodes free for large gangs.
"""

from __future__ import annotations

import numpy as np

from app.core.model.values import Resources
from app.core.policies.allocation import keeps_gpus_free, utilisation_after
from app.core.policies.interfaces import MAX_NODE_SCORE
from app.core.state.view import NodeView


class BinPack:
    """A ``Scorer``: the fuller the node after placement, the better."""

    name = "binpack"
    packs = True  # fuller scores higher

    def score(self, view: NodeView, rows: np.ndarray, requests: Resources) -> np.ndarray:
        """Integer scores 0..``MAX_NODE_SCORE`` for nodes ``rows``."""
        raw = utilisation_after(view, rows, requests) * keeps_gpus_free(view, rows, requests)
        scores: np.ndarray = np.rint(raw * MAX_NODE_SCORE).astype(np.int64)
        return scores


POLICY = BinPack()
