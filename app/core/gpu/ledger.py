"""Per-device GPU accounting for the cluster cache: which GPU indices each pod holds.

A node's GPUs are devices ``0 .. N-1`` (N = allocatable ``nvidia.com/gpu``), each worth 1000
milli-GPU. Every pod placed on a node (bound, binding or reserved by a plan) holds devices:
``n`` whole ones, or a share of one (``Pod.gpu_shape``). ``DeviceLedger`` keeps the used
milli per device in a ``rows x D`` matrix aligned with the cache's node rows, so views can
copy it and filters can check every node at once.

Which devices a pod holds, in order of authority:

1. the ``muster.io/gpu-ids`` annotation of a bound pod (what Muster wrote at bind, so a
   restarted Muster rebuilds exactly the same books);
2. the devices chosen when Muster assumed the bind or reserved the plan;
3. the devices it held before on the same node (an update of a placed pod);
4. the default choice: the best-connected fully free devices for whole GPUs
   (``app.core.gpu.links``), the tightest device with room for a share
   (``app.core.gpu.ask.device_choices``).

Muster's own decisions are checked before they are recorded (``fits``) and never over-commit
a device. What the API reports is recorded as it is, even when it over-commits (a pod bound
by another scheduler): such a device shows less than nothing free and takes no more work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from app.core.gpu.ask import MILLI, GpuAsk, device_choices
from app.core.gpu.links import choose_devices, topology_of
from app.core.model.status import SUCCESS, Status
from app.core.model.values import Node, Pod


class Held(NamedTuple):
    """Devices one pod holds on one node."""

    node: str
    milli: int
    devices: tuple[int, ...]


def device_count(node: Node) -> int:
    """How many GPUs ``node`` has (allocatable ``nvidia.com/gpu``)."""
    return max(node.allocatable.gpu // MILLI, 0)


def whole_choice(node: Node, free: Sequence[int], count: int) -> tuple[int, ...] | None:
    """The best-connected ``count`` fully free devices of ``node`` (None if too few)."""
    return choose_devices(free, count, topology_of(node))


def default_choice(
    node: Node, free: Sequence[int], shape: tuple[int, int]
) -> tuple[int, ...] | None:
    """Muster's default devices for a pod of ``shape`` (see ``Pod.gpu_shape``) on ``node``."""
    count, milli = shape
    if count == 0:
        return ()
    if milli < MILLI:
        options = device_choices(free, "", GpuAsk.fraction(milli))  # tightest device first
        return options[0] if options else None
    return whole_choice(node, free, count)


def usable(free: Sequence[int], shape: tuple[int, int], devices: Sequence[int]) -> bool:
    """Whether ``devices`` can take a pod of ``shape`` given per-device ``free`` milli."""
    count, milli = shape
    if len(devices) != count or len(set(devices)) != count:
        return False
    if any(not 0 <= d < len(free) for d in devices):
        return False
    if milli < MILLI:
        return all(free[d] >= milli for d in devices)
    return all(free[d] == MILLI for d in devices)


def fits_mask(free: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Per row of ``free`` (rows x devices, free milli): can a pod of ``shape`` fit?"""
    count, milli = shape
    if count == 0:
        return np.ones(len(free), dtype=bool)
    if milli < MILLI:
        return free.max(axis=1, initial=0) >= milli
    return (free == MILLI).sum(axis=1) >= count


def device_shortfall(shape: tuple[int, int], free: Sequence[int]) -> str:
    """Why a pod of ``shape`` finds no devices in ``free``: ``"needs 2 whole nvidia.com/gpu,
    1 fully free"`` or ``"needs 0.25 of one nvidia.com/gpu, at most 0.1 free on one GPU"``."""
    count, milli = shape
    if milli < 1000:
        best = max(free, default=0)
        return (
            f"needs {milli / 1000:g} of one nvidia.com/gpu, "
            f"at most {max(best, 0) / 1000:g} free on one GPU"
        )
    whole = sum(1 for f in free if f >= 1000)
    partly = sum(1 for f in free if 0 < f < 1000)
    extra = f" ({partly} partly used)" if partly else ""
    return f"needs {count} whole nvidia.com/gpu, {whole} fully free{extra}"


class DeviceLedger:
    """Used milli-GPU per device of every node; see the module docstring.

    Not thread-safe on its own: the cache calls it under its lock.
    """

    def __init__(self) -> None:
        self._nodes: list[Node] = []
        self._index: dict[str, int] = {}
        self._cap = np.zeros((0, 1), dtype=np.int64)
        self._used = np.zeros((0, 1), dtype=np.int64)
        self._held: dict[str, Held] = {}

    # -- node set -------------------------------------------------------------------------

    def set_nodes(self, nodes: Sequence[Node], pods: dict[str, Pod]) -> None:
        """Re-align with a new node list (rows as the cache's); re-place every holding pod.

        Pods keep their devices where they still exist; pods of a node not (yet) known keep
        their record and are placed when it arrives.
        """
        self._nodes = list(nodes)
        self._index = {n.name: i for i, n in enumerate(self._nodes)}
        counts = [device_count(n) for n in self._nodes]
        width = max(counts, default=0) or 1
        self._cap = np.zeros((len(counts), width), dtype=np.int64)
        for i, c in enumerate(counts):
            self._cap[i, :c] = MILLI
        self._used = np.zeros_like(self._cap)
        held, self._held = self._held, {}
        # Pods that say which devices they hold go first, so guesses fit around them.
        order = sorted(held.items(), key=lambda item: not _declared(pods.get(item[0])))
        for uid, h in order:
            pod = pods.get(uid)
            if pod is not None:
                self.place(uid, h.node, pod, h.devices)

    # -- pods -----------------------------------------------------------------------------

    def place(
        self, uid: str, node: str, pod: Pod, wanted: Sequence[int] | None = None
    ) -> tuple[int, ...]:
        """Record that ``pod`` holds devices on ``node``; returns the devices.

        ``wanted`` (Muster's choice) is used if it is usable; otherwise the pod's
        ``gpu_ids``, otherwise the default choice; when nothing fits (the API reports an
        over-commit) the record is kept anyway on the least used devices.
        """
        self.release(uid)
        shape = pod.gpu_shape
        if shape[0] == 0:
            return ()
        i = self._index.get(node)
        if i is None:
            self._held[uid] = Held(node, shape[1], tuple(wanted or pod.gpu_ids))
            return self._held[uid].devices
        free = (self._cap[i] - self._used[i]).tolist()[: device_count(self._nodes[i])]
        devices: tuple[int, ...] | None = None
        for option in (pod.gpu_ids if pod.node_name else (), wanted or ()):
            if option and usable(free, shape, option):
                devices = tuple(option)
                break
        if devices is None:
            devices = default_choice(self._nodes[i], free, shape)
        if devices is None:
            devices = _overcommitted(free, shape, pod.gpu_ids or wanted or ())
        for d in devices:
            self._used[i, d] += shape[1]
        self._held[uid] = Held(node, shape[1], devices)
        return devices

    def release(self, uid: str) -> Held | None:
        """Give back what pod ``uid`` holds; returns the record (None if it held nothing)."""
        held = self._held.pop(uid, None)
        if held is not None:
            i = self._index.get(held.node)
            if i is not None:
                for d in held.devices:
                    if d < self._used.shape[1]:
                        self._used[i, d] -= held.milli
        return held

    def held(self, uid: str) -> Held | None:
        """What pod ``uid`` holds, if anything."""
        return self._held.get(uid)

    def choose(self, node: str, pod: Pod) -> tuple[int, ...] | None:
        """Muster's default devices for ``pod`` on ``node`` now (None: it does not fit)."""
        i = self._index.get(node)
        if i is None:
            return None
        free = (self._cap[i] - self._used[i]).tolist()[: device_count(self._nodes[i])]
        return default_choice(self._nodes[i], free, pod.gpu_shape)

    def check_all(self, node: str, pods: Sequence[Pod]) -> Status:
        """Whether ``pods`` would all get devices on ``node`` now (``UNSCHEDULABLE``: why not)."""
        free = self.free_row(node)
        for pod in sorted(pods, key=lambda p: (-p.gpu_shape[1], -p.gpu_shape[0])):
            shape = pod.gpu_shape
            if not shape[0]:
                continue
            i = self._index[node]
            chosen = default_choice(self._nodes[i], free, shape)
            if chosen is None:
                return Status.unschedulable(device_shortfall(shape, free))
            for d in chosen:
                free[d] -= shape[1]
        return SUCCESS

    def free_row(self, node: str) -> list[int]:
        """Free milli per device of ``node`` (empty for an unknown node)."""
        i = self._index.get(node)
        if i is None:
            return []
        return (self._cap[i] - self._used[i]).tolist()[: device_count(self._nodes[i])]

    def free(self) -> np.ndarray:
        """Free milli per node row and device (a copy; absent devices show 0)."""
        return self._cap - self._used

    def holders(self) -> dict[str, Held]:
        """Every pod's record, by uid (a copy)."""
        return dict(self._held)


def _declared(pod: Pod | None) -> bool:
    return pod is not None and bool(pod.node_name) and bool(pod.gpu_ids)


def _overcommitted(
    free: Sequence[int], shape: tuple[int, int], hint: Sequence[int]
) -> tuple[int, ...]:
    """Devices to record for a pod that does not fit (reality over-commits the node)."""
    count = min(shape[0], len(free))
    if len(hint) == shape[0] and all(0 <= d < len(free) for d in hint):
        return tuple(hint)
    return tuple(sorted(sorted(range(len(free)), key=lambda d: -free[d])[:count]))
