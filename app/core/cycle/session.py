"""A planning session: one cycle's working copy of the cache, committed or discarded whole.

A cycle never writes the live cache while it runs. It reads a snapshot, and every decision it
takes (reserve room for a plan, release a plan's room, hold room for the head of the line,
evict whole gangs) changes only the session: its node views show the decisions taken so far,
so later gangs in the same cycle see the room earlier ones took, and its ``Statement`` records
them. ``commit`` hands the statement to ``ClusterCache.apply``, one step under the cache lock
that re-checks every reservation against whatever changed meanwhile; ``discard`` drops it all.
What-if questions run the same way and are always discarded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import chain, repeat
from operator import attrgetter, itemgetter

import numpy as np

from app.core.cycle.plans import Eviction, Plan
from app.core.gpu.ask import MILLI, GpuAsk, GpuOvercommit, asks_known, give, take
from app.core.gpu.ledger import device_count
from app.core.model.values import Pod, Resources
from app.core.state.cache import ClusterCache, QueueKey
from app.core.state.statement import Applied, Hold, Release, Reserve, Statement
from app.core.state.view import NodeView, Snapshot, vector

_FIRST = itemgetter(0)
_REQUESTS = attrgetter("requests")


class SessionClosed(RuntimeError):
    """A session was used after ``commit`` or ``discard``."""


class Session:
    """One cycle's view of the cluster and plans, with its decisions applied (see module).

    ``plans`` is the session's copy of the plan store; the planner adopts it on commit.
    """

    def __init__(self, cache: ClusterCache, plans: Mapping[str, Plan]) -> None:
        self._cache = cache
        base = cache.base()
        #: The cache as the session found it (pods, placements, devices, holds in force).
        self.snapshot: Snapshot = base.snapshot
        self._base_free = base.backfill
        self._used: np.ndarray | None = None
        self._gpu_free: np.ndarray | None = None
        self._holds = base.holds
        self._view: NodeView | None = None
        self._backfill: NodeView | None = base.backfill
        #: uid -> (node, devices) of the reservations this session made.
        self._reserved: dict[str, tuple[str, tuple[int, ...]]] = {}
        self._released: set[str] = set()
        self.plans: dict[str, Plan] = {k: p.copy() for k, p in plans.items()}
        self.evictions: list[Eviction] = []
        self.statement = Statement(base=self.snapshot.generation)
        #: Increases with every decision (keys memos that depend on the session's views).
        self.version = 0
        self._open = True

    # -- reading -----------------------------------------------------------------------------

    def view(self) -> NodeView:
        """Nodes as the session sees them: its reservations taken, held room counted as used."""
        if self._view is None:
            backfill = self.backfill_view()
            owner, holds, _ = self._holds
            if not holds:
                self._view = backfill
            else:
                used = backfill.used.copy()
                for node, amount in holds.items():
                    row = backfill.index.get(node)
                    if row is not None:
                        used[row] += np.asarray(amount, np.int64)
                self._view = replace(backfill, used=used)
        return self._view

    def backfill_view(self) -> NodeView:
        """``view`` without the head-of-line holds (for work that ends before they start)."""
        if self._backfill is None:
            if self._used is None or self._gpu_free is None:
                self._backfill = self._base_free
            else:
                self._backfill = replace(self._base_free, used=self._used, gpu_free=self._gpu_free)
        return self._backfill

    @property
    def holds(self) -> tuple[str, dict[str, Resources], float]:
        """``(owner, node -> held amount, until)`` of the holds in force in this session."""
        return self._holds

    def queue_usage(self) -> dict[QueueKey, np.ndarray]:
        """Resources held per queue key, without the reservations this session released
        (its own reservations are counted by the caller as it makes them)."""
        return self._cache.queue_usage(self._released)

    # -- deciding ----------------------------------------------------------------------------

    def reserve(
        self,
        gang: str,
        placements: Mapping[str, str],
        devices: Mapping[str, tuple[int, ...]],
        *,
        force: bool = False,
    ) -> None:
        """Take room for ``gang``'s pods (uid -> node, with their planned GPU devices).

        The caller placed them on this session's view, so they fit unless ``force`` (room
        still held by victims being evicted for this very gang).
        """
        self.reserve_all([(gang, placements, devices)], force=force)

    def reserve_all(
        self,
        reservations: Sequence[tuple[str, Mapping[str, str], Mapping[str, tuple[int, ...]]]],
        *,
        force: bool = False,
    ) -> None:
        """``reserve`` each of ``reservations`` (gang, placements, devices) in turn, with the
        views' usage summed per node row once for all of them.

        Whole single-GPU picks (the usual ask) are checked and taken together at the end:
        each must be a distinct existing device, fully free then (``GpuOvercommit``
        otherwise, as ``take`` one by one would raise)."""
        self._check_open()
        pods, placement = self.snapshot.pods, self.snapshot.placement
        assumed, reserved, released = self.snapshot.assumed, self._reserved, self._released
        index, nodes = self._base_free.index, self._base_free.nodes
        # Per row: the pods reserved there and the row's devices (sliced once per row).
        rows: dict[int, tuple[list[Pod], np.ndarray | None]] = {}
        # Whole single-GPU picks, taken together below: row, device.
        whole_rows: list[int] = []
        whole_devices: list[int] = []
        ask_of, known, ops = GpuAsk.of, asks_known(), self.statement.ops
        last, row, here = "", -1, []  # the node of the pod before (a gang's run on a node)
        first: Resources | None = None  # the requests of every pod so far (None: they differ)
        alike = True
        for gang, placements, devices in reservations:
            for uid, node in placements.items():
                pod = pods[uid]
                if pod.node_name or uid in assumed:
                    continue  # it holds its node
                if pod.requests != first:
                    alike, first = first is None, pod.requests
                if uid in reserved or (uid in placement and uid not in released):
                    if self._node_of(uid) == node:
                        continue
                    self._take_back(uid)  # (usage sums commute: added once at the end)
                if node != last:
                    row = index[node]
                    found = rows.get(row)
                    if found is None:
                        found = rows[row] = ([], None)
                    last, here = node, found[0]
                here.append(pod)
                chosen = devices.get(uid)
                if chosen:
                    hit = known(uid)  # ``GpuAsk.of``'s memo read in line
                    ask = hit[1] if hit is not None and hit[0] is pod else ask_of(pod)
                    if len(chosen) == 1 == ask.count and ask.milli == MILLI and not force:
                        whole_rows.append(row)
                        whole_devices.append(chosen[0])
                    else:
                        free = rows[row][1]
                        if free is None:
                            free = self._writable()[1][row, : device_count(nodes[row])]
                            rows[row] = (here, free)
                        take(free, ask, chosen, reported=force)
                    reserved[uid] = (node, tuple(chosen))
                else:
                    reserved[uid] = (node, ())
                if released:
                    released.discard(uid)
            ops.append(Reserve(gang, dict(placements), dict(devices), force))
        if whole_rows:
            self._take_whole(whole_rows, whole_devices)
        if rows:
            used = self._writable()[0]
            if alike and first is not None:  # every pod of one requests: one step for all rows
                at = np.fromiter(rows, np.int64, len(rows))
                many = np.fromiter((len(m) for m, _ in rows.values()), np.int64, len(rows))
                used[at] += many[:, None] * vector(first)
            else:
                for row, (members, _) in rows.items():
                    here_first = members[0].requests
                    if all(p.requests == here_first for p in members):
                        used[row] += vector(here_first) * len(members)
                    else:
                        for p in members:
                            used[row] += vector(p.requests)
        self._changed()
        self.version += len(reservations) - 1  # one per decision, as one by one

    def reserve_alike(
        self,
        reservations: Sequence[tuple[str, Mapping[str, str], Mapping[str, tuple[int, ...]]]],
        requests: Resources,
        ask: GpuAsk,
    ) -> None:
        """``reserve_all`` of ``reservations`` whose pods all have GPU ask ``ask`` (the caller's
        word: gangs of alike members) and ``requests`` (checked), with whole-list steps instead
        of a Python step per pod when the usual case holds: each pod asks one whole GPU with
        one planned device, or none with none, and no pod named holds a node or room yet (in
        the cache or this session). Anything else is ``reserve_all``'s, with the same outcome
        (the commit checks every pod's own ask again, as for any reservation)."""
        self._check_open()
        uids = list(chain.from_iterable(p.keys() for _, p, _ in reservations))
        whole = ask.count == 1 and ask.milli == MILLI
        snapshot = self.snapshot
        if (
            not (whole or ask.count == 0)
            or not uids
            or len(set(uids)) != len(uids)
            or not all(map(snapshot.pods.__contains__, uids))
            or list(map(_REQUESTS, map(snapshot.pods.__getitem__, uids))).count(requests)
            != len(uids)
            or not snapshot.placement.keys().isdisjoint(uids)  # bound, binding or reserved
            or not snapshot.assumed.isdisjoint(uids)
            or not self._reserved.keys().isdisjoint(uids)
            or any((p.keys() != d.keys()) if whole else bool(d) for _, p, d in reservations)
        ):
            self.reserve_all(reservations)
            return
        names = list(chain.from_iterable(p.values() for _, p, _ in reservations))
        index = self._base_free.index
        at = np.fromiter(map(index.__getitem__, names), np.int64, len(names))
        if whole:
            chosen = list(chain.from_iterable(map(d.__getitem__, p) for _, p, d in reservations))
            if list(map(len, chosen)).count(1) != len(chosen):
                self.reserve_all(reservations)  # (not one device each: it says what then)
                return
            self._take_whole(at, np.fromiter(map(_FIRST, chosen), np.int64, len(chosen)))
            self._reserved.update(zip(uids, zip(names, chosen, strict=True), strict=True))
        else:
            self._reserved.update(zip(uids, zip(names, repeat(())), strict=True))
        if self._released:
            self._released.difference_update(uids)
        used = self._writable()[0]
        many = np.bincount(at, minlength=len(used))
        rows = np.flatnonzero(many)
        used[rows] += many[rows, None] * vector(requests)
        self.statement.ops.extend(
            Reserve(gang, dict(placements), dict(devices), False)
            for gang, placements, devices in reservations
        )
        self._changed()
        self.version += len(reservations) - 1  # one per decision, as one by one

    def release(self, uids: Iterable[str]) -> None:
        """Give back the room reserved for ``uids`` (pods bound or binding keep their node)."""
        self._check_open()
        uids = tuple(uids)
        for uid in uids:
            self._take_back(uid)
        self.statement.ops.append(Release(uids))
        self._changed()

    def hold(self, owner: str, holds: Mapping[str, Resources], until: float) -> None:
        """Promise room to head-of-line gang ``owner`` from ``until`` on (empty: lift)."""
        self._check_open()
        new = (owner, dict(holds), until)
        if new == self._holds:
            return
        self._holds = new
        self.statement.ops.append(Hold(owner, dict(holds), until))
        self._view = None
        self.version += 1

    def evict(self, eviction: Eviction) -> None:
        """Queue ``eviction``; it is carried out only if the preemptor's room is committed."""
        self._check_open()
        self.evictions.append(eviction)

    # -- ending ------------------------------------------------------------------------------

    def commit(self) -> Applied:
        """Apply the statement to the cache in one step (see ``ClusterCache.apply``)."""
        self._check_open()
        self._open = False
        return self._cache.apply(self.statement)

    def discard(self) -> None:
        """Drop every decision: the cache and the planner's plans stay as they were."""
        self._open = False

    # -- helpers -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        if not self._open:
            raise SessionClosed("the planning session was already committed or discarded")

    def _node_of(self, uid: str) -> str | None:
        if uid in self._reserved:
            return self._reserved[uid][0]
        if uid in self._released:
            return None
        return self.snapshot.placement.get(uid)

    def _take_back(self, uid: str) -> None:
        """Undo the plan reservation of ``uid`` in the session's views, if it has one."""
        pod = self.snapshot.pods.get(uid)
        if pod is None or self.snapshot.holds_node(pod):
            return
        mine = self._reserved.pop(uid, None)
        if mine is not None:
            node, devices = mine
        elif uid in self.snapshot.reserved and uid not in self._released:
            node = self.snapshot.placement.get(uid, "")
            held = self.snapshot.devices.get(uid)
            devices = held.devices if held is not None and held.node == node else ()
        else:
            return
        self._released.add(uid)
        row = self._base_free.index.get(node)
        if row is None:
            return
        used, gpu_free = self._writable()
        used[row] -= vector(pod.requests)
        if devices:
            count = device_count(self._base_free.nodes[row])
            ask = GpuAsk.of(pod)
            held = self.snapshot.devices.get(uid)
            if mine is None and held is not None:
                ask = held.ask
            give(gpu_free[row, :count], ask, devices)

    def _take_whole(self, rows: list[int] | np.ndarray, devices: list[int] | np.ndarray) -> None:
        """Take whole device ``devices[k]`` of node row ``rows[k]`` for each ``k``: distinct
        existing devices, each fully free; ``GpuOvercommit`` (nothing taken) otherwise."""
        free = self._writable()[1]
        at = np.asarray(rows, dtype=np.int64)
        on = np.asarray(devices, dtype=np.int64)
        cells = at * free.shape[1] + on
        ordered = np.sort(cells)
        # A device past a node's own count is a cell of the matrix's padding, which shows
        # nothing free (``DeviceLedger``): checking the width and the free milli suffices.
        if (
            (on < 0).any()
            or (on >= free.shape[1]).any()
            or (ordered[1:] == ordered[:-1]).any()
            or (free.flat[cells] != MILLI).any()
        ):
            picks = list(zip(at.tolist(), on.tolist(), strict=True))[:8]
            raise GpuOvercommit(f"whole GPUs (node row, device) not all free: {picks}")
        free.flat[cells] = 0

    def _writable(self) -> tuple[np.ndarray, np.ndarray]:
        if self._used is None or self._gpu_free is None:
            self._used = self._base_free.used.copy()
            self._gpu_free = self._base_free.gpu_free.copy()
        return self._used, self._gpu_free

    def _changed(self) -> None:
        self._view = None
        self._backfill = None
        self.version += 1
