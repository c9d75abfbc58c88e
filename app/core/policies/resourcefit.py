"""Resource fit: GPUs, cpu, memory and pod slots left on each node, vectorised over nodes."""

from __future__ import annotations

import numpy as np

from app.core.cache import NodeView, shortfall
from app.core.model import RESOURCE_NAMES, Resources
from app.core.quantity import format_milli


def fits(view: NodeView, rows: np.ndarray, requests: Resources) -> np.ndarray:
    """Boolean per entry of ``rows`` (node indices): do ``requests`` fit in what is free?"""
    need = np.asarray(requests, dtype=np.int64)
    return ((view.allocatable[rows] - view.used[rows]) >= need).all(axis=1)


def never_fits(view: NodeView, row: int, requests: Resources) -> str | None:
    """Why ``requests`` exceed node ``row``'s whole allocatable (preemption cannot help)."""
    alloc = view.allocatable[row]
    parts = [
        f"needs {format_milli(name, need)} {name}, node has {format_milli(name, int(have))}"
        for name, need, have in zip(RESOURCE_NAMES, requests, alloc, strict=True)
        if need > have
    ]
    return "; ".join(parts) or None


def reason(view: NodeView, row: int, requests: Resources) -> str:
    """Why ``requests`` do not fit node ``row`` now: ``"needs 4 nvidia.com/gpu, 2 free"``."""
    return shortfall(requests, view.allocatable[row] - view.used[row])
