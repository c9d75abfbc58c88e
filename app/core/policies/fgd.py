"""Fragmentation Gradient Descent (FGD): place GPU pods where they fragment the least.

The idea is that of Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads
with Fragmentation Gradient Descent", USENIX ATC'23 (re-stated here, not ported):

* **Target workload.** A ``WorkloadMix``: task classes ``(GPU count, milli per GPU, cpu,
  memory, allowed models)`` with their popularity among recent asks (``RecentMix`` keeps a
  sliding window of them for a live scheduler; a simulator may use its whole trace). The
  paper's classes ignore memory (``WorkloadMix.of(..., memory=False)``).
* **Fragmentation of a node for one class**: the node's free milli-GPU that a task of that
  class could not use. All of it if the task cannot run there at all (cpu, memory, model,
  devices); otherwise the free milli of the devices too small for it (for whole GPUs: every
  partly used device).
* **Fragmentation of a node** is the expectation over the mix; **a placement's cost** is how
  much it increases the node's fragmentation; FGD takes the placement (node and device) with
  the smallest increase.

``FragTable`` makes this fast. A node's fragmentation is ``free_total - usable`` where
``usable = Σ_devices shares(free_d) + multi(full devices) + free_total × cpu_only``, each
term a table lookup indexed by the node's *cell* (GPU model, bucket of free cpu, bucket of
free memory; the buckets cut at the class sizes). Scoring a pod against all nodes (and every
device of each, for a share) is a handful of gathers over ``rows × devices`` integers.

``MusterPolicy`` (Muster's default) adds what FGD's one-task-ahead view misses: a node whose
cpu or memory will run out before its GPUs (at the mix's cpu and memory per GPU) strands
the difference, so placements that tilt a node that way pay for it; and among placements
that are otherwise equal it packs (fuller devices, fuller nodes).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from app.core.gpus import MILLI, GpuAsk, GpuTable, PodAsk, fits
from app.core.policies.gpushare import Ranking


class TaskClass(NamedTuple):
    """A class of asks in the target workload (``memory`` 0 when the mix ignores memory)."""

    count: int
    milli: int
    cpu: int
    memory: int = 0
    models: frozenset[str] = frozenset()

    def allows(self, model: str) -> bool:
        """Whether the class accepts GPUs of ``model``."""
        return not self.models or model in self.models

    @classmethod
    def of(cls, ask: PodAsk, *, memory: bool = True) -> TaskClass:
        """The class of ``ask``."""
        gpu = ask.gpu
        return cls(gpu.count, gpu.milli, ask.cpu, ask.memory if memory else 0, gpu.models)


@dataclass(frozen=True, slots=True)
class WorkloadMix:
    """Task classes and their popularity (weights sum to 1; empty = no target)."""

    classes: tuple[TaskClass, ...] = ()
    weights: tuple[float, ...] = ()

    @classmethod
    def of(
        cls, asks: Iterable[PodAsk | TaskClass], *, memory: bool = True, gpu_only: bool = False
    ) -> WorkloadMix:
        """The mix of ``asks``. ``memory``: classes tell memory sizes apart (otherwise a
        class's memory is 0, i.e. never short); ``gpu_only``: leave out asks without GPUs."""
        counts = Counter(
            (a if isinstance(a, TaskClass) else TaskClass.of(a, memory=memory)) for a in asks
        )
        if not memory:
            counts = Counter({c._replace(memory=0): n for c, n in counts.items()})
        if gpu_only:
            counts = Counter({c: n for c, n in counts.items() if c.count})
        total = sum(counts.values())
        ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0][:4]))
        return cls(tuple(c for c, _ in ordered), tuple(n / total for _, n in ordered))


class RecentMix:
    """The mix of the last ``window`` asks seen, for a scheduler that learns as it goes.

    Recomputed after every ``every`` new asks (compiling a mix for scoring takes a few
    milliseconds, so not on every pod), and at once while it is still empty.
    """

    def __init__(
        self, window: int = 2000, *, every: int = 100, memory: bool = True, gpu_only: bool = False
    ) -> None:
        self._seen: deque[TaskClass] = deque(maxlen=window)
        self._every = every
        self._pending = 0
        self._memory = memory
        self._gpu_only = gpu_only
        self._mix: WorkloadMix | None = WorkloadMix()

    def observe(self, ask: PodAsk) -> None:
        """Count an arriving ask."""
        self._seen.append(TaskClass.of(ask, memory=self._memory))
        self._pending += 1
        if self._mix is not None and (self._pending >= self._every or not self._mix.classes):
            self._mix = None

    def __call__(self) -> WorkloadMix:
        if self._mix is None:
            self._mix = WorkloadMix.of(self._seen, gpu_only=self._gpu_only)
            self._pending = 0
        return self._mix


def fragmentation(
    free: Sequence[int], model: str, mix: WorkloadMix, *, cpu_free: int, memory_free: int
) -> float:
    """A node's expected fragmented milli-GPU for ``mix`` (the definition, unvectorised)."""
    total = sum(free)
    frag = 0.0
    for c, p in zip(mix.classes, mix.weights, strict=True):
        short = cpu_free < c.cpu or memory_free < c.memory
        if short or not fits(free, model, GpuAsk(c.count, c.milli, c.models)):
            frag += p * total
        elif c.count:
            frag += p * sum(f for f in free if f < c.milli)
    return frag


class FragTable:
    """A ``WorkloadMix`` compiled for the GPU models and device count of a ``GpuTable``.

    A *cell* is (GPU model, bucket of free cpu, bucket of free memory), the buckets cut at the
    class sizes, so the classes that fit a node's cpu and memory depend on its cell alone.
    Per cell: ``shares`` (weight of the one-device classes needing at most x milli, by bucket
    of x), ``multi`` (usable milli-GPU for the multi-GPU classes by count of fully free
    devices) and ``cpu_only`` (weight of the classes without GPUs).
    """

    def __init__(
        self,
        mix: WorkloadMix,
        model_names: Sequence[str],
        max_devices: int,
        *,
        sized: bool = False,
    ) -> None:
        self.mix = mix
        self.sized = sized
        self.model_names = tuple(model_names)
        classes = mix.classes
        gpu = sum(p * c.count * c.milli for c, p in zip(classes, mix.weights, strict=True))
        cpu = sum(p * c.cpu for c, p in zip(classes, mix.weights, strict=True))
        memory = sum(p * c.memory for c, p in zip(classes, mix.weights, strict=True))
        #: the mix's cpu and memory per milli-GPU (0 when the mix asks no GPU)
        self.per_gpu = (cpu / gpu, memory / gpu) if gpu else (0.0, 0.0)
        self.cpu_cuts = np.unique(np.array([c.cpu for c in classes], dtype=np.int64))
        self.mem_cuts = np.unique(np.array([c.memory for c in classes], dtype=np.int64))
        milli = np.unique(np.array([c.milli for c in classes if c.count == 1], dtype=np.int64))
        #: bucket of a device's free milli: how many one-device class sizes fit in it
        self.share_bucket = np.searchsorted(milli, np.arange(MILLI + 1), side="right")
        self._mem_buckets = len(self.mem_cuts) + 1
        self._cells_per_model = (len(self.cpu_cuts) + 1) * self._mem_buckets
        shape = (len(model_names), len(self.cpu_cuts) + 1, self._mem_buckets)
        shares = np.zeros((*shape, len(milli) + 1))
        multi = np.zeros((*shape, max_devices + 1))
        cpu_only = np.zeros(shape)
        for c, p in zip(classes, mix.weights, strict=True):
            # cpu bucket b counts the cuts <= free cpu: the class fits from its own cut + 1 on
            cb = int(np.searchsorted(self.cpu_cuts, c.cpu)) + 1
            mb = int(np.searchsorted(self.mem_cuts, c.memory)) + 1
            models = [i for i, m in enumerate(model_names) if c.count == 0 or c.allows(m)]
            region = (models, slice(cb, None), slice(mb, None))
            if c.count == 0:
                cpu_only[region] += 0.0 if sized else p
            elif c.count == 1:
                weight = p * (c.milli / MILLI if sized else 1)
                shares[(*region, self.share_bucket[c.milli])] += weight
            elif c.count <= max_devices:
                multi[(*region, slice(c.count, None))] += p * (c.count if sized else 1)
        self.shares = np.cumsum(shares, axis=-1).reshape(-1)  # [cell * (len(milli) + 1) + bucket]
        self._share_width = len(milli) + 1
        per_device = MILLI if sized else MILLI * np.arange(max_devices + 1)
        self.multi = (multi * per_device).reshape(-1, max_devices + 1)
        self.cpu_only = cpu_only.reshape(-1)

    def cell(self, model: np.ndarray, cpu_free: np.ndarray, mem_free: np.ndarray) -> np.ndarray:
        """Cell of each (model, free cpu, free memory)."""
        cb = np.searchsorted(self.cpu_cuts, cpu_free, side="right")
        mb = np.searchsorted(self.mem_cuts, mem_free, side="right")
        return model * self._cells_per_model + cb * self._mem_buckets + mb

    def device_values(self, cell: np.ndarray, free: np.ndarray) -> np.ndarray:
        """Expected usable milli of each device (``free``: rows x devices) for the shares."""
        weight = self.shares[cell[:, None] * self._share_width + self.share_bucket[free]]
        return MILLI * weight if self.sized else free * weight

    def whole_value(self, cell: np.ndarray) -> np.ndarray:
        """``device_values`` of one fully free device in each cell."""
        return MILLI * self.shares[cell * self._share_width + self.share_bucket[MILLI]]

    def usable(self, table: GpuTable) -> np.ndarray:
        """Expected usable milli-GPU per row of ``table``."""
        cell = self.cell(table.model, table.cpu_free, table.mem_free)
        return (
            self.device_values(cell, table.free).sum(axis=1)
            + self.multi[cell, table.full]
            + table.free_total * self.cpu_only[cell]
        )

    def fragmentation(self, table: GpuTable) -> np.ndarray:
        """Expected fragmented milli-GPU per row of ``table`` (see ``fragmentation``)."""
        return table.free_total * sum(self.mix.weights) - self.usable(table)


class Increase(NamedTuple):
    """Fragmentation increase of placing a pod: per row (``inf`` = does not fit), and for a
    share per row and device (``by_device``, ``inf`` where the device has no room)."""

    by_row: np.ndarray
    by_device: np.ndarray | None


MixSource = WorkloadMix | Callable[[], WorkloadMix]


class FgdPolicy:
    """The placement with the smallest fragmentation increase; lowest device among equals."""

    name = "fgd"
    #: value a gap by the size of the task that would take it (``FragTable(sized=...)``)
    sized = False

    def __init__(self, mix: MixSource) -> None:
        self._source = mix
        self._compiled: FragTable | None = None

    def frag_table(self, table: GpuTable) -> FragTable:
        """The target mix compiled for ``table`` (cached while neither changes)."""
        mix = self._source() if callable(self._source) else self._source
        ft = self._compiled
        if (
            ft is None
            or ft.mix is not mix
            or ft.model_names != tuple(table.model_names)
            or ft.multi.shape[1] != table.free.shape[1] + 1
        ):
            ft = self._compiled = FragTable(
                mix, table.model_names, table.free.shape[1], sized=self.sized
            )
        return ft

    def increase(self, table: GpuTable, ask: PodAsk) -> Increase:
        """How much placing ``ask`` on each row (and device) increases fragmentation."""
        ft = self.frag_table(table)
        feasible = table.feasible(ask)
        free, gpu = table.free, ask.gpu
        total, full = table.free_total, table.full
        before = ft.usable(table)
        cell = ft.cell(table.model, table.cpu_free - ask.cpu, table.mem_free - ask.memory)
        values = ft.device_values(cell, free)
        summed = values.sum(axis=1)
        cpu_only = ft.cpu_only[cell]
        if gpu.shared:
            after_dev = ft.device_values(cell, np.maximum(free - gpu.milli, 0))
            was_full = (free == MILLI).astype(np.int64)
            after = (
                summed[:, None]
                - values
                + after_dev
                + ft.multi[cell[:, None], full[:, None] - was_full]
                + ((total - gpu.milli) * cpu_only)[:, None]
            )
            by_device = before[:, None] - after - gpu.milli
            by_device[(free < gpu.milli) | ~feasible[:, None]] = np.inf
            return Increase(by_device.min(axis=1), by_device)
        k = gpu.count
        after = (
            summed
            - k * ft.whole_value(cell)
            + ft.multi[cell, np.maximum(full - k, 0)]
            + (total - gpu.total) * cpu_only
        )
        return Increase(np.where(feasible, before - after - gpu.total, np.inf), None)

    def rank(self, table: GpuTable, ask: PodAsk) -> Ranking:
        """Fragmentation increase per row; for a share, the device with the least."""
        inc = self.increase(table, ask)
        if inc.by_device is None:
            return Ranking(inc.by_row)
        return Ranking(inc.by_row, np.argmin(inc.by_device, axis=1))


class MusterPolicy(FgdPolicy):
    """Muster's default: FGD + stranding + packing.

    cost = fragmentation increase (FGD, classes with memory)
    + ``balance`` x increase of the node's *stranded* milli-GPU
    + ``pack`` x milli left on the chosen device (shares) + ``node_pack`` x milli left on the node

    where stranded = max(0, free GPU - free cpu / cpu-per-GPU, free GPU - free memory /
    memory-per-GPU), cpu- and memory-per-GPU being the mix's totals over its GPU total: the
    GPU that the node's cpu or memory cannot feed if the workload keeps its shape. FGD alone
    looks one task ahead and lets cpu-hungry pods (and pods without GPUs) drain the cpu of
    GPU-dense nodes, whose last GPUs then stay idle. The packing weights are small: they only
    order placements that are otherwise (nearly) equal.
    """

    name = "muster-default"

    def __init__(
        self,
        mix: MixSource,
        *,
        balance: float = 1.0,
        pack: float = 0.01,
        node_pack: float = 0.001,
        sized: bool = False,
        name: str | None = None,
    ) -> None:
        super().__init__(mix)
        self.sized = sized
        if name is not None:
            self.name = name
        self.balance = balance
        self.pack = pack
        self.node_pack = node_pack

    def stranded(
        self, ft: FragTable, gpu: np.ndarray, cpu: np.ndarray, memory: np.ndarray
    ) -> np.ndarray:
        """Milli-GPU that ``cpu`` and ``memory`` cannot feed at the mix's ratios."""
        cpu_rate, memory_rate = ft.per_gpu
        out = np.zeros(len(gpu))
        if cpu_rate > 0:
            out = np.maximum(out, gpu - cpu / cpu_rate)
        if memory_rate > 0:
            out = np.maximum(out, gpu - memory / memory_rate)
        return out

    def rank(self, table: GpuTable, ask: PodAsk) -> Ranking:
        """FGD's increase plus stranding and packing."""
        ft = self.frag_table(table)
        inc = self.increase(table, ask)
        total = table.free_total
        left = total - ask.gpu.total
        extra = self.node_pack * left
        if self.balance:
            before = self.stranded(ft, total, table.cpu_free, table.mem_free)
            after = self.stranded(ft, left, table.cpu_free - ask.cpu, table.mem_free - ask.memory)
            extra = extra + self.balance * (after - before)
        if inc.by_device is None:
            return Ranking(inc.by_row + extra)
        by_device = inc.by_device + self.pack * (table.free - ask.gpu.milli)
        device = np.argmin(by_device, axis=1)
        cost = by_device[np.arange(len(table)), device] + extra
        return Ranking(cost, device)


class LiveGpuPolicy:
    """Muster's default GPU placement as the live extender runs it: ``MusterPolicy`` over a
    ``RecentMix`` it learns itself.

    The caller shows it every pod once, when the pod is first seen, with ``observe`` and
    BEFORE ranking the pod with ``rank``: the pod being placed is then part of the target
    workload, so the first pods of a class are never scored against a mix that lacks it.
    """

    name = "muster-default"

    def __init__(self, mix: RecentMix | None = None, **weights: float) -> None:
        self.mix = mix if mix is not None else RecentMix()
        self.policy = MusterPolicy(self.mix, **weights)

    def observe(self, ask: PodAsk) -> None:
        """Count a newly seen pod's ask in the learned mix."""
        self.mix.observe(ask)

    def rank(self, table: GpuTable, ask: PodAsk) -> Ranking:
        """``MusterPolicy.rank`` against the mix learned so far."""
        return self.policy.rank(table, ask)


def default_policy() -> LiveGpuPolicy:
    """The one construction of Muster's default GPU placement (the extender and the openb
    simulation both use it)."""
    return LiveGpuPolicy(RecentMix())
