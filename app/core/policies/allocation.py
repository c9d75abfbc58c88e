"""How full a node would be with the pod on it: the shared measure behind binpack and spread."""

from __future__ import annotations

import numpy as np

from app.core.model.values import Resources
from app.core.state.cache import NodeView

_GPU, _CPU, _MEMORY = 0, 1, 2


def utilisation_after(view: NodeView, rows: np.ndarray, requests: Resources) -> np.ndarray:
    """Fraction (0-1) of each node's capacity in use once the pod is placed there.

    GPU pods are measured on GPUs alone (GPUs are the scarce resource worth packing); pods
    without GPUs on the mean of cpu and memory.
    """
    alloc = view.allocatable[rows].astype(np.float64)
    used = view.used[rows] + np.asarray(requests, dtype=np.int64)
    # ``where`` leaves 1.0 for a resource the node lacks, and divides only where it has some
    # (no ``np.errstate``: entering it costs more than the division on a few rows).
    ratio: np.ndarray = np.divide(used, alloc, out=np.ones_like(alloc), where=alloc > 0)
    if requests.gpu > 0:
        result = ratio[:, _GPU]
    else:
        result = (ratio[:, _CPU] + ratio[:, _MEMORY]) / 2
    clipped: np.ndarray = np.clip(result, 0.0, 1.0)
    return clipped


def keeps_gpus_free(view: NodeView, rows: np.ndarray, requests: Resources) -> np.ndarray:
    """Score multiplier: pods without GPUs get half marks on GPU nodes, to keep GPUs usable."""
    if requests.gpu > 0:
        return np.ones(len(rows))
    return np.where(view.allocatable[rows, _GPU] > 0, 0.5, 1.0)
