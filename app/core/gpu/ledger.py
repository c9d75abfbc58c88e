"""Per-device GPU accounting for the cluster cache: which GPU indices each pod holds.

A node's GPUs are devices ``0 .. N-1`` (N = allocatable ``nvidia.com/gpu``), each worth 1000
milli-GPU. Every pod placed on a node (bound, binding or reserved by a plan) holds devices:
``n`` whole ones, or a share of one (``GpuAsk.of(pod)``). ``DeviceLedger`` keeps the free
milli per device in a ``rows x D`` matrix aligned with the cache's node rows, so views can
copy it and filters can check every node at once; it changes it only through the accounting
rules of ``app.core.gpu.ask`` (``take``/``give``), the ones the policies' ``GpuTable`` uses.

Which devices a pod holds, in order of authority:

1. the ``muster.io/gpu-ids`` annotation of a bound pod (what Muster wrote at bind, so a
   restarted Muster rebuilds exactly the same books);
2. the devices chosen when Muster assumed the bind or reserved the plan;
3. the devices it held before on the same node (an update of a placed pod);
4. the default choice (``default_choice``, i.e. ``app.core.gpu.links.choose``): the
   best-connected fully free devices for whole GPUs (NVLink, then NUMA), the tightest device
   with room for a share.

Muster's own decisions are checked before they are recorded (``take``) and never over-commit
a device. What the API reports is recorded as it is, even when it over-commits (a pod bound
by another scheduler): such a device shows less than nothing free and takes no more work.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from app.core.gpu.ask import MILLI, NO_GPU, GpuAsk, GpuOvercommit, give, take
from app.core.gpu.links import GpuTopology, choose, topology_of
from app.core.model.status import SUCCESS, Status
from app.core.model.values import Node, Pod


class Held(NamedTuple):
    """Devices one pod holds on one node, and the ask they were taken for."""

    node: str
    ask: GpuAsk
    devices: tuple[int, ...]

    @property
    def milli(self) -> int:
        """Milli-GPU held on each of ``devices``."""
        return self.ask.milli


def device_count(node: Node) -> int:
    """How many GPUs ``node`` has (allocatable ``nvidia.com/gpu``)."""
    return max(node.allocatable.gpu // MILLI, 0)


def default_choice(node: Node, free: Sequence[int], ask: GpuAsk) -> tuple[int, ...] | None:
    """Muster's default devices for ``ask`` on ``node`` given per-device ``free`` milli (None:
    it does not fit): ``links.choose`` with the node's topology (``links.topology_of``)."""
    return choose(free, ask, topology_of(node))


def default_choices(
    node: Node, free: Sequence[int], ask: GpuAsk, count: int
) -> tuple[tuple[int, ...], ...] | None:
    """``default_choice`` for ``count`` pods of ``ask`` placed on ``node`` one after another,
    each taking its devices before the next chooses (None: they do not all fit). Remembered
    per (free milli per device, ask, topology, count): alike gangs fill alike nodes."""
    return _in_turn(tuple(free), ask, topology_of(node), count)


@functools.lru_cache(maxsize=1024)
def _in_turn(
    free: tuple[int, ...], ask: GpuAsk, topology: GpuTopology, count: int
) -> tuple[tuple[int, ...], ...] | None:
    left = list(free)
    out = []
    for _ in range(count):
        chosen = choose(left, ask, topology)
        if chosen is None:
            return None
        for d in chosen:
            left[d] -= ask.milli
        out.append(chosen)
    return tuple(out)


def device_shortfall(ask: GpuAsk, free: Sequence[int]) -> str:
    """Why ``ask`` finds no devices in ``free``: ``"needs 2 whole nvidia.com/gpu,
    1 fully free"`` or ``"needs 0.25 of one nvidia.com/gpu, at most 0.1 free on one GPU"``."""
    if ask.shared:
        best = max(free, default=0)
        return (
            f"needs {ask.milli / 1000:g} of one nvidia.com/gpu, "
            f"at most {max(best, 0) / 1000:g} free on one GPU"
        )
    whole = sum(1 for f in free if f >= 1000)
    partly = sum(1 for f in free if 0 < f < 1000)
    extra = f" ({partly} partly used)" if partly else ""
    return f"needs {ask.count} whole nvidia.com/gpu, {whole} fully free{extra}"


class DeviceLedger:
    """Free milli-GPU per device of every node, and what each pod holds; see the module
    docstring. All accounting goes through ``app.core.gpu.ask.take``/``give``.

    Not thread-safe on its own: the cache calls it under its lock.
    """

    def __init__(self) -> None:
        self._nodes: list[Node] = []
        self._index: dict[str, int] = {}
        self._counts: list[int] = []
        self._count_array = np.zeros(0, dtype=np.int64)  # ``_counts`` as an array
        self._free = np.zeros((0, 1), dtype=np.int64)
        self._held: dict[str, Held] = {}

    # -- node set -------------------------------------------------------------------------

    def set_nodes(self, nodes: Sequence[Node], pods: dict[str, Pod]) -> None:
        """Re-align with a new node list (rows as the cache's); re-place every holding pod.

        Pods keep their devices where they still exist; pods of a node not (yet) known keep
        their record and are placed when it arrives.
        """
        self._nodes, self._index, self._counts = [], {}, []
        self._free = np.zeros((0, 1), dtype=np.int64)
        self._grow(nodes)
        held, self._held = self._held, {}
        self._place_held(list(held.items()), pods)

    def renew_nodes(self, nodes: Sequence[Node], rows: Iterable[int]) -> bool:
        """Take the new versions of the nodes at ``rows`` (the same names on the same rows)
        if none of them has another number of devices now: a node's devices do not change
        with its labels, taints or cordon, so every device stays as free as it is and every
        pod keeps its devices (the new topology, if any, guides the next choices). False
        (nothing done) otherwise: ``set_nodes`` re-aligns then."""
        rows = list(rows)
        if len(nodes) != len(self._nodes) or any(
            nodes[r].name != self._nodes[r].name or device_count(nodes[r]) != self._counts[r]
            for r in rows
        ):
            return False
        for r in rows:
            self._nodes[r] = nodes[r]
        return True

    def add_nodes(self, nodes: Sequence[Node], pods: dict[str, Pod]) -> None:
        """Rows for new ``nodes`` after the known ones (as the cache appends them), all their
        devices free; then the pods already recorded on them (listed before their node) are
        placed there as ``set_nodes`` places them. Every other row and record stays as it
        is."""
        if not nodes:
            return
        self._grow(nodes)
        names = {n.name for n in nodes}
        waiting = [(uid, h) for uid, h in self._held.items() if h.node in names]
        for uid, _ in waiting:
            del self._held[uid]  # never taken on a row: nothing to give back
        self._place_held(waiting, pods)

    def _grow(self, nodes: Sequence[Node]) -> None:
        """Rows for ``nodes`` after the known ones, every device free."""
        start = len(self._nodes)
        self._nodes.extend(nodes)
        for j, node in enumerate(nodes):
            self._index[node.name] = start + j
        self._counts.extend(device_count(n) for n in nodes)
        self._count_array = np.asarray(self._counts, dtype=np.int64)
        width = max(self._counts, default=0) or 1
        free = np.zeros((len(self._counts), width), dtype=np.int64)
        kept = min(width, self._free.shape[1])
        free[:start, :kept] = self._free[:start, :kept]
        for j, count in enumerate(self._counts[start:]):
            free[start + j, :count] = MILLI
        self._free = free

    def _place_held(self, records: list[tuple[str, Held]], pods: dict[str, Pod]) -> None:
        """Place ``records`` (out of the ledger) again, for the pods still there."""
        # Pods that say which devices they hold go first, so guesses fit around them.
        for uid, h in sorted(records, key=lambda item: not _declared(pods.get(item[0]))):
            pod = pods.get(uid)
            if pod is not None:
                self.place(uid, h.node, pod, h.devices)

    def drop_node(self, name: str) -> None:
        """Forget node ``name``'s row (the node is gone): the other rows and every record stay
        as they are; records on it are kept, with their devices, until their pods go or the
        node comes back (as ``set_nodes`` leaves them for a node it does not know)."""
        i = self._index.get(name)
        if i is None:
            return
        del self._nodes[i]
        del self._counts[i]
        self._index = {n.name: j for j, n in enumerate(self._nodes)}
        self._count_array = np.asarray(self._counts, dtype=np.int64)
        width = max(self._counts, default=0) or 1
        self._free = np.delete(self._free, i, axis=0)[:, :width]

    def _row(self, i: int) -> np.ndarray:
        """Row ``i``'s devices (a view: ``take``/``give`` write through)."""
        return self._free[i, : self._counts[i]]

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
        ask = GpuAsk.of(pod)
        if ask.count == 0:
            return ()
        i = self._index.get(node)
        if i is None:
            self._held[uid] = Held(node, ask, tuple(wanted or pod.gpu_ids))
            return self._held[uid].devices
        free = self._row(i)
        for option in (pod.gpu_ids if pod.node_name else (), wanted or ()):
            if option and _took(free, ask, tuple(option)):
                devices = tuple(option)
                break
        else:
            chosen = default_choice(self._nodes[i], free.tolist(), ask)
            if chosen is not None:
                devices = chosen
                take(free, ask, devices)
            else:
                ask, devices = _overcommitted(free.tolist(), ask, pod.gpu_ids or wanted or ())
                take(free, ask, devices, reported=True)
        self._held[uid] = Held(node, ask, devices)
        return devices

    def release(self, uid: str) -> Held | None:
        """Give back what pod ``uid`` holds; returns the record (None if it held nothing)."""
        held = self._held.pop(uid, None)
        if held is not None:
            i = self._index.get(held.node)
            if i is not None:
                give(self._row(i), held.ask, held.devices)
        return held

    def held(self, uid: str) -> Held | None:
        """What pod ``uid`` holds, if anything."""
        return self._held.get(uid)

    def choose(self, node: str, pod: Pod) -> tuple[int, ...] | None:
        """Muster's default devices for ``pod`` on ``node`` now (None: it does not fit)."""
        i = self._index.get(node)
        if i is None:
            return None
        return default_choice(self._nodes[i], self._row(i).tolist(), GpuAsk.of(pod))

    def check_all(
        self, node: str, pods: Sequence[Pod], planned: Mapping[str, Sequence[int]] | None = None
    ) -> Status:
        """Whether ``pods`` would all get devices on ``node`` now (``UNSCHEDULABLE``: why not):
        the ``planned`` devices of the pods that have some, the default choice for the rest."""
        i = self._index[node]
        free = self._row(i).copy()
        planned = planned or {}
        for pod in pods:
            devices = planned.get(pod.uid)
            if devices is not None:
                try:
                    take(free, GpuAsk.of(pod), devices)  # checks first, changes nothing if not
                except GpuOvercommit as refused:
                    return Status.unschedulable(f"{pod.key}: {refused}")
        asks = [GpuAsk.of(p) for p in pods if p.uid not in planned]
        for ask in sorted(asks, key=lambda a: (-a.milli, -a.count)):
            if not ask.count:
                continue
            chosen = default_choice(self._nodes[i], free.tolist(), ask)
            if chosen is None:
                return Status.unschedulable(device_shortfall(ask, free.tolist()))
            take(free, ask, chosen)
        return SUCCESS

    def check_planned(
        self, node: str, pods: Sequence[Pod], planned: Mapping[str, Sequence[int]]
    ) -> tuple[np.ndarray, list[tuple[str, Held]]] | None:
        """``pods`` (holding nothing yet) placed on ``node`` one after another, each on its
        ``planned`` devices: the row's free milli afterwards and their records, for
        ``place_checked`` (None: a GPU pod has no planned devices, or they are not all free
        in turn; ``check_all`` then ``place`` pod by pod say why)."""
        i = self._index.get(node)
        if i is None:
            return None
        free = self._row(i).copy()
        records: list[tuple[str, Held]] = []
        whole: list[int] = []  # devices of one-GPU whole asks: checked together below
        for pod in pods:
            ask = GpuAsk.of(pod)
            if not ask.count:
                if pod.uid in planned:
                    return None  # devices for a pod that asks for none: ``check_all`` says
                continue
            devices = planned.get(pod.uid)
            if devices is None:
                return None
            if ask.count == 1 and ask.milli == MILLI and len(devices) == 1:
                whole.append(devices[0])
            else:
                try:
                    take(free, ask, devices)
                except GpuOvercommit:
                    return None
            records.append((pod.uid, Held(node, ask, tuple(devices))))
        if whole:
            # Each is taken whole in its turn: every one a different device, fully free now
            # (and not taken by the other asks above, which ``free`` shows).
            if len(set(whole)) != len(whole) or not all(0 <= d < len(free) for d in whole):
                return None
            at = np.asarray(whole, dtype=np.int64)
            if not (free[at] == MILLI).all():
                return None
            free[at] = 0
        return free, records

    def check_run(
        self, groups: Sequence[tuple[str, Sequence[Pod]]], planned: Mapping[str, Sequence[int]]
    ) -> RunCheck | None:
        """``check_planned`` for each ``(node, pods)`` of ``groups`` (distinct nodes), the
        usual one-GPU whole asks of all of them checked in one step; for ``place_run``."""
        index, counts = self._index, self._counts
        rows: list[int] = []
        devices: list[int] = []
        records: list[tuple[str, Held]] = []
        rest: list[tuple[str, tuple[np.ndarray, list[tuple[str, Held]]]]] = []
        for node, pods in groups:
            i = index.get(node)
            if i is None:
                return None
            mark = (len(rows), len(records))
            limit = counts[i]
            for pod, ask in zip(pods, GpuAsk.of_each(pods), strict=True):
                if not ask.count:
                    if pod.uid in planned:
                        return None  # devices for a pod that asks for none: ``check_all`` says
                    continue
                chosen = planned.get(pod.uid)
                if chosen is None:
                    return None
                if ask.count == 1 and ask.milli == MILLI and len(chosen) == 1:
                    d = chosen[0]
                    if not 0 <= d < limit:
                        return None
                    rows.append(i)
                    devices.append(d)
                    records.append((pod.uid, Held(node, ask, (d,))))
                else:
                    break
            else:
                continue
            # Another kind of ask on this node: its pods are checked one after another.
            del rows[mark[0] :], devices[mark[0] :], records[mark[1] :]
            fit = self.check_planned(node, pods, planned)
            if fit is None:
                return None
            rest.append((node, fit))
        if rows:
            at, on = np.asarray(rows, dtype=np.int64), np.asarray(devices, dtype=np.int64)
            if self.whole_cells(at, on) is None:
                return None  # a device taken twice, or not fully free
        return RunCheck(rows, devices, records, rest)

    def whole_cells(self, rows: np.ndarray, devices: np.ndarray) -> np.ndarray | None:
        """Where in the free matrix device ``devices[k]`` of node row ``rows[k]`` is, for
        pods each taking one whole device in turn (None: a device that does not exist,
        named twice, or not fully free now); for ``place_whole``."""
        counts = self._count_array[rows]
        if (devices < 0).any() or (devices >= counts).any():
            return None
        cells: np.ndarray = rows * self._free.shape[1] + devices
        if len(np.unique(cells)) != len(cells) or (self._free.flat[cells] != MILLI).any():
            return None
        return cells

    def place_whole(self, cells: np.ndarray, records: Iterable[tuple[str, Held]]) -> None:
        """Carry out ``whole_cells``' answer (nothing changed those devices since) with the
        pods' ``records`` (in the order ``place`` would make them)."""
        self._free.flat[cells] = 0
        self._held.update(records)

    def place_run(self, checked: RunCheck) -> None:
        """Carry out ``check_run``'s answer (nothing else changed those nodes since); the
        records are written by ``place_checked`` (in the order ``place`` would make them)."""
        if checked.rows:
            self._free[checked.rows, checked.devices] = 0
        for node, (free, _) in checked.rest:
            self._row(self._index[node])[:] = free

    def place_checked(
        self, node: str | None, free: np.ndarray | None, records: Iterable[tuple[str, Held]]
    ) -> None:
        """Carry out ``check_planned``'s answers (nothing else changed those rows since):
        ``node``'s free milli afterwards (None: no row to change), and records of pods (in
        the order ``place`` would have made them, pod by pod, with the planned devices)."""
        if node is not None and free is not None:
            self._row(self._index[node])[:] = free
        self._held.update(records)

    def holds_any(self, uids: Iterable[str]) -> bool:
        """Whether any of pods ``uids`` holds devices."""
        return not self._held.keys().isdisjoint(uids)

    def free_row(self, node: str) -> list[int]:
        """Free milli per device of ``node`` (empty for an unknown node)."""
        i = self._index.get(node)
        if i is None:
            return []
        row: list[int] = self._row(i).tolist()
        return row

    def free(self) -> np.ndarray:
        """Free milli per node row and device (a copy; absent devices show 0)."""
        return self._free.copy()

    def holders(self) -> dict[str, Held]:
        """Every pod's record, by uid (a copy)."""
        return dict(self._held)


class RunCheck(NamedTuple):
    """``DeviceLedger.check_run``'s answer: one-GPU whole asks by (row, device), every
    record made, and the nodes checked one pod after another (``check_planned``)."""

    rows: list[int]
    devices: list[int]
    records: list[tuple[str, Held]]
    rest: list[tuple[str, tuple[np.ndarray, list[tuple[str, Held]]]]]

    def all_records(self) -> list[tuple[str, Held]]:
        """Every record, those of ``rest`` too."""
        out = list(self.records)
        for _, (_, kept) in self.rest:
            out.extend(kept)
        return out


def _declared(pod: Pod | None) -> bool:
    return pod is not None and bool(pod.node_name) and bool(pod.gpu_ids)


def _overcommitted(
    free: Sequence[int], ask: GpuAsk, hint: Sequence[int]
) -> tuple[GpuAsk, tuple[int, ...]]:
    """What to record for a pod that does not fit (reality over-commits the node): the
    devices (``hint`` if it names the right number of existing ones, else the least used),
    and the ask as recorded on them (fewer devices than asked where the node has fewer)."""
    if len(set(hint)) == len(hint) == ask.count and all(0 <= d < len(free) for d in hint):
        return ask, tuple(hint)
    count = min(ask.count, len(free))
    devices = tuple(sorted(sorted(range(len(free)), key=lambda d: -free[d])[:count]))
    if count == ask.count:
        return ask, devices
    return (GpuAsk(count, ask.milli, ask.models) if count else NO_GPU), devices


def _took(free: np.ndarray, ask: GpuAsk, devices: tuple[int, ...]) -> bool:
    """``take`` ``devices`` if they are usable (one check instead of ``usable`` then ``take``)."""
    try:
        take(free, ask, devices)
    except GpuOvercommit:
        return False
    return True
