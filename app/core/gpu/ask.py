"""Per-device GPU accounting: whole GPUs, shares of one GPU, GPU models and NVLink groups.

Data model
----------
* A node's GPUs are devices ``0 .. N-1``; each has a capacity of ``MILLI`` (1000) milli-GPU.
  A node's GPU state is the **free milli-GPU per device** (``free[d]`` in ``0 .. 1000``).
* A pod's GPU ask (``GpuAsk``) is ``count`` devices of ``milli`` each:

  ========================  =========  ==========  ==========================================
  ask                       ``count``  ``milli``   needs
  ========================  =========  ==========  ==========================================
  no GPU                    0          0           nothing
  ``N`` whole GPUs          N >= 1     1000        ``N`` fully free devices
  a share of one GPU        1          1 .. 999    one device with at least ``milli`` free
  ========================  =========  ==========  ==========================================

  plus ``models``: the GPU models the pod accepts (openb's ``gpu_spec`` ``"A|B"``; empty = any).
* An allocation is the ask plus the tuple of device indices it took. Allocating subtracts
  ``milli`` from each chosen device, releasing adds it back; both refuse (``GpuOvercommit``)
  anything that would take a device below 0 or above 1000 free, or give a partly used device
  to a whole-GPU ask.
* NVLink groups (optional, per node) are sets of device indices joined by NVLink/NVSwitch;
  a whole-GPU ask gets the **best-connected free set** (``best_connected``), by default the
  lowest free indices.

Two containers share these rules: ``NodeGpus``, one node as an immutable value (what a
scheduler cache keeps), and ``GpuTable``, many nodes as mutable numpy arrays (one row per node,
with the node's free cpu and memory, the other constraints a placement must respect) for
policies that score every node at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from app.core.model.values import GPU_PRODUCT_LABEL, Node

MILLI = 1000
#: Bytes per MiB times the milli factor of ``Resources.memory``.
MIB_MILLI = 2**20 * 1000


class GpuOvercommit(AssertionError):
    """An allocation or release would break a device's 0..1000 bounds: a bug in the caller."""


def parse_gpu_spec(spec: str | None) -> frozenset[str]:
    """Allowed GPU models from openb's ``gpu_spec`` (``"A|B"``; empty or None = any)."""
    return frozenset(m.strip() for m in (spec or "").split("|") if m.strip())


@dataclass(frozen=True, slots=True)
class GpuAsk:
    """What a pod asks of one node's GPUs (see the module docstring for the three shapes)."""

    count: int = 0
    milli: int = 0
    models: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.count < 0 or (self.count == 0) != (self.milli == 0):
            raise ValueError(f"bad GPU ask: count={self.count} milli={self.milli}")
        if self.count and not 0 < self.milli <= MILLI:
            raise ValueError(f"bad GPU share: {self.milli} milli (1..{MILLI})")
        if self.count > 1 and self.milli != MILLI:
            raise ValueError("a multi-GPU ask takes whole devices")

    @classmethod
    def whole(cls, count: int, models: Iterable[str] = ()) -> GpuAsk:
        """``count`` whole GPUs (0 = none)."""
        return cls(count, MILLI if count else 0, frozenset(models))

    @classmethod
    def fraction(cls, milli: int, models: Iterable[str] = ()) -> GpuAsk:
        """A share of one GPU, in milli-GPU (1000 = one whole GPU)."""
        return cls(1, milli, frozenset(models))

    @classmethod
    def from_openb(cls, num_gpu: int, gpu_milli: int, gpu_spec: str | None = "") -> GpuAsk:
        """The ask of an openb pod row (``num_gpu``, ``gpu_milli``, ``gpu_spec``)."""
        models = parse_gpu_spec(gpu_spec)
        return cls(num_gpu, gpu_milli if num_gpu else 0, models)

    @property
    def shared(self) -> bool:
        """Whether this is a share of one device rather than whole devices."""
        return self.count == 1 and self.milli < MILLI

    @property
    def total(self) -> int:
        """Milli-GPU the ask takes in all."""
        return self.count * self.milli

    def allows(self, model: str) -> bool:
        """Whether a node whose GPUs are ``model`` is acceptable."""
        return not self.models or model in self.models


@dataclass(frozen=True, slots=True)
class PodAsk:
    """A pod's GPU ask with the cpu (milli) and memory it needs on the same node.

    Memory is in whatever unit the ``GpuTable`` uses (MiB for openb).
    """

    gpu: GpuAsk = GpuAsk()
    cpu: int = 0
    memory: int = 0


# -- rules on one node's free vector ---------------------------------------------------------


def fits(free: Sequence[int] | np.ndarray, model: str, ask: GpuAsk) -> bool:
    """Whether a node with per-device ``free`` milli and GPU ``model`` can take ``ask``."""
    if ask.count == 0:
        return True
    if not ask.allows(model):
        return False
    if ask.shared:
        return any(f >= ask.milli for f in free)
    return sum(1 for f in free if f == MILLI) >= ask.count


def best_connected(
    free: Sequence[int] | np.ndarray, count: int, nvlink: Sequence[Iterable[int]] = ()
) -> tuple[int, ...] | None:
    """The ``count`` fully free devices that are best connected, or None if too few are free.

    Devices outside every NVLink group are groups of their own. If one group can hold the
    whole ask, the group with the fewest fully free devices that can is used (best fit: big
    free groups stay whole for bigger asks); otherwise the groups with the most free devices
    are combined. Within a group and between equals, lower indices first. Without groups this
    is simply the lowest free indices.
    """
    idle = [d for d, f in enumerate(free) if f == MILLI]
    if len(idle) < count:
        return None
    if count == 0:
        return ()
    groups: list[list[int]] = []
    seen: set[int] = set()
    for group in nvlink:
        members = sorted(d for d in set(group) - seen if 0 <= d < len(free))
        seen.update(members)
        if members:
            groups.append(members)
    groups += [[d] for d in range(len(free)) if d not in seen]
    open_ = [[d for d in g if d in idle] for g in groups]
    open_ = sorted((g for g in open_ if g), key=lambda g: g[0])
    holding = [g for g in open_ if len(g) >= count]
    if holding:
        return tuple(min(holding, key=len)[:count])
    chosen: list[int] = []
    for g in sorted(open_, key=len, reverse=True):  # stable: ties keep the lower indices first
        chosen += g[: count - len(chosen)]
        if len(chosen) == count:
            break
    return tuple(sorted(chosen))


def device_choices(
    free: Sequence[int] | np.ndarray, model: str, ask: GpuAsk, nvlink: Sequence[Iterable[int]] = ()
) -> list[tuple[int, ...]]:
    """The device sets ``ask`` could take on this node, the default choice first.

    A share: each device with room, tightest fit first (then lower index). Whole GPUs: fully
    free devices are interchangeable except for their links, so the one best-connected set.
    No GPU: ``[()]``. Empty when the ask does not fit.
    """
    if not fits(free, model, ask):
        return []
    if ask.count == 0:
        return [()]
    if ask.shared:
        room = sorted((int(f), d) for d, f in enumerate(free) if f >= ask.milli)
        return [(d,) for _, d in room]
    chosen = best_connected(free, ask.count, nvlink)
    return [chosen] if chosen is not None else []


def _check(free: np.ndarray | Sequence[int], ask: GpuAsk, devices: tuple[int, ...]) -> None:
    if len(devices) != ask.count or len(set(devices)) != len(devices):
        raise GpuOvercommit(f"{ask} needs {ask.count} distinct devices, got {devices}")
    if any(not 0 <= d < len(free) for d in devices):
        raise GpuOvercommit(f"no such device in {devices} (node has {len(free)})")


def take(free: np.ndarray, ask: GpuAsk, devices: tuple[int, ...]) -> None:
    """Subtract ``ask`` from ``devices`` of ``free`` in place; ``GpuOvercommit`` if it can't."""
    _check(free, ask, devices)
    for d in devices:
        if ask.shared and free[d] < ask.milli:
            raise GpuOvercommit(f"device {d} has {free[d]} milli free, {ask.milli} asked")
        if not ask.shared and free[d] != MILLI:
            raise GpuOvercommit(f"device {d} is partly used ({free[d]} free): not whole")
    for d in devices:
        free[d] -= ask.milli


def give(free: np.ndarray, ask: GpuAsk, devices: tuple[int, ...]) -> None:
    """Add ``ask`` back to ``devices`` of ``free`` in place; ``GpuOvercommit`` past 1000."""
    _check(free, ask, devices)
    for d in devices:
        if free[d] + ask.milli > MILLI:
            raise GpuOvercommit(f"device {d} would have {free[d] + ask.milli} milli free")
    for d in devices:
        free[d] += ask.milli


# -- one node as a value ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeGpus:
    """One node's GPUs: free milli per device, GPU model, NVLink groups. Never mutated."""

    free: tuple[int, ...]
    model: str = ""
    nvlink: tuple[frozenset[int], ...] = field(default=())

    @classmethod
    def idle(cls, count: int, model: str = "", nvlink: Iterable[Iterable[int]] = ()) -> NodeGpus:
        """A node with ``count`` unused devices."""
        return cls((MILLI,) * count, model, tuple(frozenset(g) for g in nvlink))

    def fits(self, ask: GpuAsk) -> bool:
        """Whether ``ask`` fits (model, and devices with room)."""
        return fits(self.free, self.model, ask)

    def choices(self, ask: GpuAsk) -> list[tuple[int, ...]]:
        """Device sets ``ask`` could take, the default first (see ``device_choices``)."""
        return device_choices(self.free, self.model, ask, self.nvlink)

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
        return NodeGpus(tuple(int(f) for f in free), self.model, self.nvlink), devices

    def release(self, ask: GpuAsk, devices: tuple[int, ...]) -> NodeGpus:
        """The node with an earlier ``apply`` of ``ask`` on ``devices`` undone."""
        free = np.array(self.free, dtype=np.int64)
        give(free, ask, devices)
        return NodeGpus(tuple(int(f) for f in free), self.model, self.nvlink)


# -- many nodes as arrays --------------------------------------------------------------------


class GpuTable:
    """Mutable per-device state of many nodes, one row per node, for vectorised policies.

    ``free`` is ``int32[rows, D]`` (D = most devices on any node; a node's missing devices
    are columns with 0 free that nothing can take), ``devices[row]`` the node's GPU count,
    ``model[row]`` an index into ``model_names``, ``cpu_free``/``mem_free`` what is left of
    the node's cpu (milli) and memory. Per-row summaries kept in step with ``free``:
    ``free_total`` (milli), ``free_max`` (largest free device) and ``full`` (fully free
    devices). All arrays are read-only to callers: change state only through ``apply`` and
    ``release``. Rows keep the order given: policies break ties by the lowest row, so shuffle
    the nodes first for a random tie-break.
    """

    def __init__(
        self,
        names: Sequence[str],
        gpus: Sequence[int],
        models: Sequence[str],
        cpu: Sequence[int],
        memory: Sequence[int],
        nvlink: Sequence[Sequence[Iterable[int]]] | None = None,
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
        groups = nvlink or [()] * n
        if len(groups) != n:
            raise ValueError("nvlink needs one list of groups per node")
        self.nvlink = [tuple(frozenset(g) for g in row) for row in groups]
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
        (default: MiB); the model is the ``nvidia.com/gpu.product`` label.
        """
        return cls(
            [n.name for n in nodes],
            [n.allocatable.gpu // MILLI for n in nodes],
            [n.labels.get(GPU_PRODUCT_LABEL, "") for n in nodes],
            [n.allocatable.cpu for n in nodes],
            [n.allocatable.memory // memory_unit for n in nodes],
        )

    @classmethod
    def from_state(
        cls,
        names: Sequence[str],
        devices: np.ndarray,
        models: Sequence[str],
        free: np.ndarray,
        cpu: tuple[np.ndarray, np.ndarray],
        memory: tuple[np.ndarray, np.ndarray],
    ) -> GpuTable:
        """A table of nodes in use: per-device ``free`` milli (rows x devices, absent devices
        0), ``cpu`` and ``memory`` as ``(capacity, free)`` per row (memory in the unit the
        policies use: MiB)."""
        return cls(names, devices, models, cpu[0], memory[0]).with_usage(free, cpu[1], memory[1])

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

    def copy(self) -> GpuTable:
        """An independent copy (names and NVLink groups are shared: they never change)."""
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
        return NodeGpus(free, self.model_names[self.model[row]], self.nvlink[row])

    def allowed(self, ask: GpuAsk) -> np.ndarray:
        """Rows whose GPU model the ask accepts."""
        if not ask.models or ask.count == 0:
            return np.ones(len(self), dtype=bool)
        ok = np.array([m in ask.models for m in self.model_names], dtype=bool)
        return ok[self.model]

    def feasible(self, ask: PodAsk) -> np.ndarray:
        """Rows where ``ask`` fits: cpu, memory, GPU model and devices."""
        mask = (self.cpu_free >= ask.cpu) & (self.mem_free >= ask.memory)
        gpu = ask.gpu
        if gpu.count == 0:
            return mask
        mask &= self.allowed(gpu)
        if gpu.shared:
            return mask & (self.free_max >= gpu.milli)
        return mask & (self.full >= gpu.count)

    def choices(self, row: int, ask: GpuAsk) -> list[tuple[int, ...]]:
        """Device sets ``ask`` could take on ``row`` (see ``device_choices``)."""
        node = self.node(row)
        return device_choices(node.free, node.model, ask, node.nvlink)

    def apply(
        self, row: int, ask: PodAsk, devices: tuple[int, ...] | None = None
    ) -> tuple[int, ...]:
        """Place ``ask`` on ``row`` (on ``devices``, or the default choice); returns the devices.

        Raises ``GpuOvercommit`` when it does not fit; nothing changes then.
        """
        if self.cpu_free[row] < ask.cpu or self.mem_free[row] < ask.memory:
            raise GpuOvercommit(f"{ask} does not fit the cpu/memory left on {self.names[row]}")
        if ask.gpu.count and not self.allowed(ask.gpu)[row]:
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
