"""GPU state as values and tables: one node (``NodeGpus``) and many nodes (``GpuTable``).

Both keep per-device free milli-GPU (``app.core.gpu.ask``), the node's GPU model and its
topology (``app.core.gpu.links``), and follow the one set of rules: ``fits`` to decide,
``links.choose`` for the default devices (NVLink and NUMA for whole GPUs, the tightest device
for a share), ``take``/``give`` to account. ``NodeGpus`` is one node as an immutable value;
``GpuTable`` is many nodes as mutable numpy arrays (one row per node, with the node's free
cpu and memory, the other constraints a placement must respect) for policies that score
every node at once and for the simulator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.core.gpu.ask import (
    MIB_MILLI,
    MILLI,
    GpuAsk,
    GpuOvercommit,
    PodAsk,
    fits,
    fits_rows,
    give,
    take,
)
from app.core.gpu.links import GpuTopology, default_topology, device_choices, topology_of
from app.core.model.values import GPU_PRODUCT_LABEL, Node

# -- one node as a value ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeGpus:
    """One node's GPUs: free milli per device, GPU model, topology. Never mutated.

    ``topology`` defaults to the product default of ``model`` (``links.default_topology``),
    what the live path assumes for a node without a topology annotation.
    """

    free: tuple[int, ...]
    model: str = ""
    topology: GpuTopology | None = None

    def __post_init__(self) -> None:
        if self.topology is None:
            object.__setattr__(self, "topology", default_topology(self.model, len(self.free)))

    @property
    def links(self) -> GpuTopology:
        """The node's topology (never None once built)."""
        assert self.topology is not None
        return self.topology

    @classmethod
    def idle(cls, count: int, model: str = "", topology: GpuTopology | None = None) -> NodeGpus:
        """A node with ``count`` unused devices."""
        return cls((MILLI,) * count, model, topology)

    def fits(self, ask: GpuAsk) -> bool:
        """Whether ``ask`` fits (model, and devices with room)."""
        return ask.allows(self.model) and fits(self.free, ask)

    def choices(self, ask: GpuAsk) -> list[tuple[int, ...]]:
        """Device sets ``ask`` could take, the default first (``links.device_choices``)."""
        if not ask.allows(self.model):
            return []
        return device_choices(self.free, ask, self.links)

    def apply(
        self, ask: GpuAsk, devices: tuple[int, ...] | None = None
    ) -> tuple[NodeGpus, tuple[int, ...]]:
        """The node with ``ask`` placed on ``devices`` (default choice if None), and them."""
        if devices is None:
            options = self.choices(ask)
            if not options:
                raise GpuOvercommit(f"{ask} does not fit {self}")
            devices = options[0]
        elif not ask.allows(self.model):
            raise GpuOvercommit(f"{ask} does not accept model {self.model!r}")
        free = np.array(self.free, dtype=np.int64)
        take(free, ask, devices)
        return NodeGpus(tuple(int(f) for f in free), self.model, self.topology), devices

    def release(self, ask: GpuAsk, devices: tuple[int, ...]) -> NodeGpus:
        """The node with an earlier ``apply`` of ``ask`` on ``devices`` undone."""
        free = np.array(self.free, dtype=np.int64)
        give(free, ask, devices)
        return NodeGpus(tuple(int(f) for f in free), self.model, self.topology)


# -- many nodes as arrays --------------------------------------------------------------------


class GpuTable:
    """Mutable per-device state of many nodes, one row per node, for vectorised policies.

    ``free`` is ``int32[rows, D]`` (D = most devices on any node; a node's missing devices
    are columns with 0 free that nothing can take), ``devices[row]`` the node's GPU count,
    ``model[row]`` an index into ``model_names``, ``topology[row]`` its GPU topology (default:
    the product default of its model), ``cpu_free``/``mem_free`` what is left of the node's
    cpu (milli) and memory. Per-row summaries kept in step with ``free``: ``free_total``
    (milli), ``free_max`` (largest free device) and ``full`` (fully free devices). All arrays
    are read-only to callers: change state only through ``apply`` and ``release``. Rows keep
    the order given: policies break ties by the lowest row, so shuffle the nodes first for a
    random tie-break.
    """

    def __init__(
        self,
        names: Sequence[str],
        gpus: Sequence[int],
        models: Sequence[str],
        cpu: Sequence[int] | np.ndarray,
        memory: Sequence[int] | np.ndarray,
        topology: Sequence[GpuTopology] | None = None,
    ) -> None:
        n = len(names)
        if not n == len(gpus) == len(models) == len(cpu) == len(memory):
            raise ValueError("names, gpus, models, cpu and memory differ in length")
        self.names = list(names)
        self.devices = np.asarray(gpus, dtype=np.int64)
        self.free = np.zeros((n, max(1, int(self.devices.max(initial=0)))), dtype=np.int32)
        self.free[np.arange(self.free.shape[1]) < self.devices[:, None]] = MILLI
        self.model_names = sorted(set(models))
        lookup = {m: i for i, m in enumerate(self.model_names)}
        self.model = np.array([lookup[m] for m in models], dtype=np.int64)
        self.cpu_cap = np.asarray(cpu, dtype=np.int64).copy()
        self.mem_cap = np.asarray(memory, dtype=np.int64).copy()
        self.cpu_free = self.cpu_cap.copy()
        self.mem_free = self.mem_cap.copy()
        if topology is None:
            topology = [default_topology(m, int(g)) for m, g in zip(models, gpus, strict=True)]
        if len(topology) != n:
            raise ValueError("topology needs one entry per node")
        if any(t.devices != int(g) for t, g in zip(topology, gpus, strict=True)):
            raise ValueError("a node's topology must describe as many GPUs as it has")
        self.topology = list(topology)
        self.free_total = self.free.sum(axis=1, dtype=np.int64)
        self.free_max = self.free.max(axis=1).astype(np.int64)
        self.full = (self.free == MILLI).sum(axis=1)

    def _sync(self, row: int) -> None:
        free = self.free[row]
        self.free_total[row] = free.sum()
        self.free_max[row] = free.max()
        self.full[row] = (free == MILLI).sum()

    @classmethod
    def from_nodes(cls, nodes: Sequence[Node], memory_unit: int = MIB_MILLI) -> GpuTable:
        """Rows for ``app.core.model.values.Node`` values (e.g. ``clusterfile.parse_openb_csv``).

        GPU count and cpu come from ``allocatable``; memory is divided by ``memory_unit``
        (default: MiB); the model is the ``nvidia.com/gpu.product`` label; the topology is
        ``links.topology_of`` (the annotation, else the product default), as the live path's.
        """
        return cls(
            [n.name for n in nodes],
            [n.allocatable.gpu // MILLI for n in nodes],
            [n.labels.get(GPU_PRODUCT_LABEL, "") for n in nodes],
            [n.allocatable.cpu for n in nodes],
            [n.allocatable.memory // memory_unit for n in nodes],
            [topology_of(n) for n in nodes],
        )

    @classmethod
    def from_state(
        cls,
        nodes: Sequence[Node],
        free: np.ndarray,
        cpu: tuple[np.ndarray, np.ndarray],
        memory: tuple[np.ndarray, np.ndarray],
    ) -> GpuTable:
        """A table of ``nodes`` in use: per-device ``free`` milli (rows x devices, absent
        devices 0), ``cpu`` and ``memory`` as ``(capacity, free)`` per row (memory in the unit
        the policies use: MiB). GPU count, model and topology come from the nodes."""
        table = cls(
            [n.name for n in nodes],
            [max(n.allocatable.gpu // MILLI, 0) for n in nodes],
            [n.gpu_model for n in nodes],
            cpu[0],
            memory[0],
            [topology_of(n) for n in nodes],
        )
        return table.with_usage(free, cpu[1], memory[1])

    def with_usage(self, free: np.ndarray, cpu_free: np.ndarray, mem_free: np.ndarray) -> GpuTable:
        """A table of the same nodes with other usage (per-device ``free`` milli, free cpu and
        memory per row); the node facts are shared, the usage arrays are new."""
        other = object.__new__(GpuTable)
        other.__dict__.update(self.__dict__)
        width = self.free.shape[1]
        other.free = np.zeros_like(self.free)
        clipped = np.clip(free[:, :width], 0, MILLI)
        other.free[:, : clipped.shape[1]] = clipped
        other.cpu_free = np.asarray(cpu_free, dtype=np.int64).copy()
        other.mem_free = np.asarray(mem_free, dtype=np.int64).copy()
        other.free_total = other.free.sum(axis=1, dtype=np.int64)
        other.free_max = other.free.max(axis=1).astype(np.int64)
        other.full = (other.free == MILLI).sum(axis=1)
        return other

    def __len__(self) -> int:
        return len(self.names)

    #: The arrays with one entry per row (``take`` selects them).
    _PER_ROW = ("devices", "free", "model", "cpu_cap", "mem_cap", "cpu_free", "mem_free",
                "free_total", "free_max", "full")  # fmt: skip

    def take(self, rows: np.ndarray) -> GpuTable:
        """Only ``rows``, in that order, as a table of their own (the same models and device
        width, so a policy judges each row exactly as in this table)."""
        other = object.__new__(GpuTable)
        other.__dict__.update(self.__dict__)
        for attr in self._PER_ROW:
            setattr(other, attr, getattr(self, attr)[rows])
        picked = rows.tolist()
        other.names = [self.names[i] for i in picked]
        other.topology = [self.topology[i] for i in picked]
        return other

    def copy(self) -> GpuTable:
        """An independent copy (names and topologies are shared: they never change)."""
        other = object.__new__(GpuTable)
        other.__dict__.update(self.__dict__)
        for attr in ("free", "cpu_free", "mem_free", "free_total", "free_max", "full"):
            setattr(other, attr, getattr(self, attr).copy())
        return other

    @property
    def gpu_capacity(self) -> int:
        """Total milli-GPU of all nodes."""
        return int(self.devices.sum()) * MILLI

    @property
    def gpu_allocated(self) -> int:
        """Milli-GPU currently taken."""
        return self.gpu_capacity - int(self.free_total.sum())

    def node(self, row: int) -> NodeGpus:
        """Row ``row`` as a ``NodeGpus`` value."""
        free = tuple(int(f) for f in self.free[row, : self.devices[row]])
        return NodeGpus(free, self.model_names[self.model[row]], self.topology[row])

    def allowed(self, ask: GpuAsk) -> np.ndarray:
        """Rows whose GPU model the ask accepts."""
        if not ask.models or ask.count == 0:
            return np.ones(len(self), dtype=bool)
        ok = np.array([ask.allows(m) for m in self.model_names], dtype=bool)
        return ok[self.model]

    def feasible(self, ask: PodAsk) -> np.ndarray:
        """Rows where ``ask`` fits: cpu, memory, GPU model and devices (``ask.fits_rows``)."""
        mask: np.ndarray = (self.cpu_free >= ask.cpu) & (self.mem_free >= ask.memory)
        if ask.gpu.count == 0:
            return mask
        gpu = self.allowed(ask.gpu) & fits_rows(self.free_max, self.full, ask.gpu)
        return np.asarray(mask & gpu, dtype=bool)

    def choices(self, row: int, ask: GpuAsk) -> list[tuple[int, ...]]:
        """Device sets ``ask`` could take on ``row``, the default first (``NodeGpus.choices``)."""
        return self.node(row).choices(ask)

    def apply(
        self, row: int, ask: PodAsk, devices: tuple[int, ...] | None = None
    ) -> tuple[int, ...]:
        """Place ``ask`` on ``row`` (on ``devices``, or the default choice); returns the devices.

        Raises ``GpuOvercommit`` when it does not fit; nothing changes then.
        """
        if self.cpu_free[row] < ask.cpu or self.mem_free[row] < ask.memory:
            raise GpuOvercommit(f"{ask} does not fit the cpu/memory left on {self.names[row]}")
        if not self.allowed(ask.gpu)[row]:
            raise GpuOvercommit(f"{self.names[row]} has no GPU model in {set(ask.gpu.models)}")
        if devices is None:
            options = self.choices(row, ask.gpu)
            if not options:
                raise GpuOvercommit(f"{ask.gpu} does not fit the devices of {self.names[row]}")
            devices = options[0]
        devices = tuple(int(d) for d in devices)
        free = self.free[row, : self.devices[row]]  # a view: take() writes through
        take(free, ask.gpu, devices)
        self.cpu_free[row] -= ask.cpu
        self.mem_free[row] -= ask.memory
        self._sync(row)
        return devices

    def release(self, row: int, ask: PodAsk, devices: tuple[int, ...]) -> None:
        """Undo an ``apply`` of ``ask`` on ``row`` and ``devices``."""
        if self.cpu_free[row] + ask.cpu > self.cpu_cap[row]:
            raise GpuOvercommit(f"releasing {ask} frees more cpu than {self.names[row]} has")
        if self.mem_free[row] + ask.memory > self.mem_cap[row]:
            raise GpuOvercommit(f"releasing {ask} frees more memory than {self.names[row]} has")
        give(self.free[row, : self.devices[row]], ask.gpu, devices)
        self.cpu_free[row] += ask.cpu
        self.mem_free[row] += ask.memory
        self._sync(row)
