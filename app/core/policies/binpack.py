"""Bin-packing (the default): the fuller the node after placement, the higher the score.

Packing GPU pods onto partly used nodes keeps whole nodes free for large gangs.
"""

from __future__ import annotations

import numpy as np

from app.core.model.values import Resources
from app.core.policies.allocation import keeps_gpus_free, utilisation_after
from app.core.state.cache import NodeView


def score(view: NodeView, rows: np.ndarray, requests: Resources) -> np.ndarray:
    """Integer scores 0-10 for nodes ``rows``."""
    raw = utilisation_after(view, rows, requests) * keeps_gpus_free(view, rows, requests)
    return np.rint(raw * 10).astype(np.int64)
