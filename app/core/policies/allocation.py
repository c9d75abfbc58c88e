"""How full a node would be with the pod on it: the shared measure behind binpack and spread."""

from __future__ import annotations

import numpy as np

from app.core.model.values import Resources
from app.core.state.view import NodeView

_GPU, _CPU, _MEMORY = 0, 1, 2


def utilisation_after(view: NodeView, rows: np.ndarray, requests: Resources) -> np.ndarray:
    """Fraction (0-1) of each node's capacity in use once the pod is placed there.

    GPU pods are measured on GPUs alone (GPUs are the scarce resource worth packing); pods
    without GPUs on the mean of cpu and memory.
    """
    # Only the columns measured are divided. ``where`` leaves 1.0 for a resource the node
    # lacks, and divides only where it has some (no ``np.errstate``: entering it costs more
    # than the division on a few rows).
    if requests.gpu > 0:
        alloc = view.allocatable[rows, _GPU].astype(np.float64)
        used = view.used[rows, _GPU] + requests.gpu
        result: np.ndarray = np.divide(used, alloc, out=np.ones_like(alloc), where=alloc > 0)
    else:
        alloc = view.allocatable[rows, _CPU : _MEMORY + 1].astype(np.float64)
        used = view.used[rows, _CPU : _MEMORY + 1] + np.asarray(
            requests[_CPU : _MEMORY + 1], np.int64
        )
        ratio = np.divide(used, alloc, out=np.ones_like(alloc), where=alloc > 0)
        result = (ratio[:, 0] + ratio[:, 1]) / 2
    clipped: np.ndarray = np.clip(result, 0.0, 1.0)
    return clipped


def keeps_gpus_free(view: NodeView, rows: np.ndarray, requests: Resources) -> np.ndarray:
    """Score multiplier: pods without GPUs get half marks on GPU nodes, to keep GPUs usable."""
    if requests.gpu > 0:
        return np.ones(len(rows))
    return np.where(view.allocatable[rows, _GPU] > 0, 0.5, 1.0)
