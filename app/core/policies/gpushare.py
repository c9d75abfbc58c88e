"""GPU-sharing placement: the policy interface and the baseline policies.

A policy ranks every row of a ``GpuTable`` for one pod: a cost per row (lower is better,
``inf`` where the pod does not fit) and, for a share of one GPU, the device each row would
use. ``choose`` takes the cheapest row, ties going to the lowest row (shuffle the table's
rows for a random tie-break); ``place`` also applies the choice to the table.

Baselines (the comparison points of the FGD paper, re-stated, not ported):

* ``RandomPolicy`` -- any node that fits, any device that fits.
* ``BestFitPolicy`` -- least leftover: mean of the node's free cpu and free GPU after
  placement, each relative to the largest node; tightest device.
* ``GpuPackingPolicy`` -- a share goes to an already shared device if one fits (the fullest),
  else to a partly used node, else to an idle node with the fewest GPUs; whole GPUs go to
  partly used nodes first (fewest free devices), then to the smallest idle nodes.

The fragmentation-aware policies are in ``app.core.policies.fgd``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np

from app.core.gpu.ask import MILLI, PodAsk
from app.core.gpu.table import GpuTable


@dataclass(frozen=True, slots=True)
class DeviceRanking:
    """A policy's verdict on every row for one pod.

    ``cost[row]``: lower is better, ``inf`` = the pod does not fit. ``device[row]``: for a
    share of one GPU, the device it would take on that row (-1 where none); None for other
    asks, whose devices the table chooses (best-connected whole devices).
    """

    cost: np.ndarray
    device: np.ndarray | None = None


class Pick(NamedTuple):
    """A chosen row and the devices to take there (None: the table's default choice)."""

    row: int
    devices: tuple[int, ...] | None


class PlacementPolicy(Protocol):
    """Ranks the rows of a table for a pod; see the module docstring."""

    name: str

    def rank(self, table: GpuTable, ask: PodAsk) -> DeviceRanking:
        """Cost per row (and device per row for shares) of placing ``ask``."""
        ...


def choose(policy: PlacementPolicy, table: GpuTable, ask: PodAsk) -> Pick | None:
    """The cheapest row for ``ask`` (lowest row among equals), or None if no row fits."""
    ranking = policy.rank(table, ask)
    row = int(np.argmin(ranking.cost))
    if not np.isfinite(ranking.cost[row]):
        return None
    if ranking.device is not None and ask.gpu.shared:
        return Pick(row, (int(ranking.device[row]),))
    return Pick(row, None)


def place(policy: PlacementPolicy, table: GpuTable, ask: PodAsk) -> Pick | None:
    """``choose`` and apply the choice to ``table``; the pick has the devices taken."""
    pick = choose(policy, table, ask)
    if pick is None:
        return None
    return Pick(pick.row, table.apply(pick.row, ask, pick.devices))


def masked(cost: np.ndarray, feasible: np.ndarray) -> np.ndarray:
    """``cost`` as float with ``inf`` where not ``feasible``."""
    return np.where(feasible, cost, np.inf).astype(np.float64, copy=False)


def tightest_device(table: GpuTable, milli: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the device with the least free milli that still holds ``milli`` (-1: none),
    and that device's free milli (``MILLI + 1`` where none)."""
    room = np.where(table.free >= milli, table.free, MILLI + 1)
    device = np.argmin(room, axis=1)
    left = room[np.arange(len(table)), device]
    return np.where(left <= MILLI, device, -1), left


class RandomPolicy:
    """Uniformly random among the rows that fit, and among the devices that fit."""

    name = "random"

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def rank(self, table: GpuTable, ask: PodAsk) -> DeviceRanking:
        """Random costs on feasible rows."""
        cost = masked(self.rng.random(len(table)), table.feasible(ask))
        if not ask.gpu.shared:
            return DeviceRanking(cost)
        keys = np.where(table.free >= ask.gpu.milli, self.rng.random(table.free.shape), 2.0)
        return DeviceRanking(cost, np.argmin(keys, axis=1))


class BestFitPolicy:
    """Least leftover cpu and GPU after placement, each relative to the largest node."""

    name = "best-fit"

    def rank(self, table: GpuTable, ask: PodAsk) -> DeviceRanking:
        """Leftover cost on feasible rows; tightest device for shares."""
        gpu_left = table.free_total - ask.gpu.total
        cpu_left = table.cpu_free - ask.cpu
        max_gpu = max(1, int(table.devices.max(initial=0)) * MILLI)
        max_cpu = max(1, int(table.cpu_cap.max(initial=0)))
        cost = masked(0.5 * cpu_left / max_cpu + 0.5 * gpu_left / max_gpu, table.feasible(ask))
        if not ask.gpu.shared:
            return DeviceRanking(cost)
        device, _ = tightest_device(table, ask.gpu.milli)
        return DeviceRanking(cost, device)


class GpuPackingPolicy:
    """Shared devices first, then partly used nodes, then the smallest idle nodes."""

    name = "gpu-packing"

    def rank(self, table: GpuTable, ask: PodAsk) -> DeviceRanking:
        """Tiered packing cost on feasible rows (tier x 10_000 + within-tier cost)."""
        feasible = table.feasible(ask)
        gpu = ask.gpu
        if gpu.count == 0:
            return DeviceRanking(masked(np.zeros(len(table)), feasible))
        full = table.full
        idle = full == table.devices
        if gpu.shared:
            device, left = tightest_device(table, gpu.milli)
            tier = np.where(left < MILLI, 0, np.where(idle, 2, 1))
            within = np.where(tier == 0, left, np.where(idle, table.devices, full))
            return DeviceRanking(masked(tier * 10_000.0 + within, feasible), device)
        within = np.where(idle, table.devices, full)
        return DeviceRanking(masked(np.where(idle, 2, 1) * 10_000.0 + within, feasible))
