"""Resource fit: GPUs, cpu, memory and pod slots, judged for many nodes at once.

Reasons are formatted from rows where resources that are not short hold ``PLENTY``, so that
nodes in the same situation share one (cached) text.
"""

from __future__ import annotations

import numpy as np

from app.core.model.quantity import format_milli
from app.core.model.values import RESOURCE_NAMES, Resources
from app.core.state.view import shortfall

#: Stands in for a resource that is not short, so rows group by what is short only.
PLENTY = 2**62


def short_only(amounts: np.ndarray, need: np.ndarray) -> np.ndarray:
    """``amounts`` with every entry that covers ``need`` replaced by ``PLENTY``."""
    return np.where(amounts < need, amounts, PLENTY)


def too_big(requests: Resources, alloc: np.ndarray) -> str:
    """Why a node's whole allocatable cannot hold ``requests`` (preemption cannot help)."""
    return "; ".join(
        f"needs {format_milli(name, need)} {name}, node has {format_milli(name, int(have))}"
        for name, need, have in zip(RESOURCE_NAMES, requests, alloc, strict=True)
        if need > have
    )


def lacking(requests: Resources, free: np.ndarray) -> str:
    """Why ``requests`` do not fit in ``free`` now: ``"needs 4 nvidia.com/gpu, 2 free"``."""
    return shortfall(requests, free)
