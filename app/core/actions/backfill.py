"""backfill: a reservation for the head-of-line gang, and who may use reserved room meanwhile.

When the gang first in line cannot start, waiting for random capacity would let a stream of
smaller work starve it. Instead it gets a *reservation*: the nodes expected to free soonest
(running pods end at their start time plus ``muster.io/expected-runtime``, else a default),
chosen by placing the gang as if the earliest-ending pods were gone. Until then that room is
held: only work that declares a runtime ending before the reservation's expected start may use
it (backfill), so the big gang starts on time and the holes it leaves meanwhile still get used.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np

from app.core.actions.allocate import Allocation, FitBound, allocate
from app.core.gpu.ledger import Held
from app.core.model.runtime import declared_runtime, expected_end
from app.core.model.values import RESOURCE_NAMES, Pod, Resources
from app.core.state.diff import changed_pods
from app.core.state.releases import Releases
from app.core.state.view import Snapshot


@dataclass(frozen=True, slots=True)
class Reservation:
    """Room held for ``gang`` from ``start`` (wall-clock seconds) on: node -> amount."""

    gang: str
    start: float
    holds: dict[str, Resources]


@dataclass(frozen=True, slots=True)
class Ending:
    """The pods holding room on a view, soonest-ending first: when each is expected to end,
    and what each frees. ``timeless``: no pod's end depended on ``now`` (so the order may be
    kept as long as the snapshot is unchanged)."""

    ends: list[float]
    releases: Releases
    timeless: bool


#: What ``ending`` found for each pod (by uid), kept across calls: the pod object, its start,
#: node and held devices it was found for, then its expected end, row and release shape (an
#: index into ``EndingMemo``'s shapes: requests and GPU devices).
EndingEntry = tuple[Pod, float, str, "Held | None", float, int, int]


@dataclass(slots=True)
class EndingMemo:
    """``ending``'s per-pod entries, valid for one node table and default runtime (a pod's
    row and expected end depend on them): a new cache snapshot then costs a lookup per placed
    pod instead of reading each again. Pods release a handful of distinct shapes (requests,
    devices held, milli-GPU on each), numbered in ``shapes`` so releases are gathered from
    small tables at numpy speed."""

    table: object = None
    default_runtime: float = 0.0
    entries: dict[str, EndingEntry] = field(default_factory=dict)
    shapes: dict[tuple[Resources, tuple[int, ...], int], int] = field(default_factory=dict)
    #: Per shape: requests, device count, devices (padded with 0) and milli; None: stale.
    tables: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    #: Held by ``ending`` while it reads and updates the memo (explains run in parallel).
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: The last answer for all rows (``_Last``): a later snapshot whose changed pods all keep
    #: their entries (or stay out) gets that very answer (so what is kept by its identity
    #: stays valid); a few changed ones are taken out and put in again.
    last: _Last | None = None

    def shape(self, requests: Resources, devices: tuple[int, ...], milli: int) -> int:
        """The number of this release shape."""
        key = (requests, devices, milli)
        found = self.shapes.get(key)
        if found is None:
            found = self.shapes[key] = len(self.shapes)
            self.tables = None
        return found

    def shape_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Requests (rows), device counts, devices (padded rows) and milli, by shape."""
        if self.tables is None:
            keys = list(self.shapes)
            width = max((len(k[1]) for k in keys), default=0)
            devices = np.zeros((len(keys), width), np.intp)
            for i, k in enumerate(keys):
                devices[i, : len(k[1])] = k[1]
            self.tables = (
                np.asarray([k[0] for k in keys], np.int64).reshape(-1, len(RESOURCE_NAMES)),
                np.asarray([len(k[1]) for k in keys], np.intp),
                devices,
                np.asarray([k[2] for k in keys], np.int64),
            )
        return self.tables


def ending(
    snapshot: Snapshot,
    *,
    now: float,
    default_runtime: float,
    within: np.ndarray | None = None,
    planned_start_now: bool = False,
    memo: EndingMemo | None = None,
) -> Ending:
    """``reserve_for``'s order of the pods on ``snapshot.view`` (``within``: those rows).
    ``memo``: entries kept from earlier calls (updated here); the answer is the same."""
    memo = EndingMemo(snapshot.view.table, default_runtime) if memo is None else memo
    with memo.lock:
        return _ending(snapshot, now, default_runtime, within, planned_start_now, memo)


def _ending(snapshot: Snapshot, now: float, default_runtime: float, within: np.ndarray | None,
            planned_start_now: bool, memo: EndingMemo) -> Ending:  # fmt: skip
    view = snapshot.view
    if memo.table is not view.table or memo.default_runtime != default_runtime:
        memo.table, memo.default_runtime, memo.entries = view.table, default_runtime, {}
        memo.last = None
    kept = memo.entries
    if len(kept) > 2 * len(snapshot.pods) + 1024 or len(memo.shapes) > 4096:
        kept.clear()  # uids of gone pods pile up
        memo.shapes, memo.tables, memo.last = {}, None, None
    last = memo.last
    if within is None and last is not None and last.planned == planned_start_now:
        updated = _updated(last, snapshot, now, memo)
        if updated is not None:
            return updated
    placement, index, devices = snapshot.placement, view.index, snapshot.devices
    bound_at, reserved = snapshot.bound_at, snapshot.reserved
    found: list[EndingEntry] = []
    timeless = True
    for uid, pod in snapshot.pods.items():
        node = placement.get(uid)
        if not node or pod.terminal:
            continue
        if not (snapshot.holds_node(pod) or (planned_start_now and uid in reserved)):
            continue
        row = index.get(node)
        if row is None or (within is not None and not within[row]):
            continue
        started = pod.started or bound_at.get(uid)
        if started is None:
            started, timeless = now, False
        held = devices.get(uid)
        entry = kept.get(uid)
        if (entry is None or entry[0] is not pod or entry[1] != started or entry[2] != node
                or entry[3] is not held):  # fmt: skip
            ids = held.devices if held is not None and held.node == node else ()
            shape = memo.shape(pod.requests, ids, held.ask.milli if ids and held else 0)
            end = expected_end(pod, started, default_runtime)
            entry = kept[uid] = (pod, started, node, held, end, row, shape)
        found.append(entry)
    found.sort(key=itemgetter(4))
    n = len(found)
    rows = np.fromiter(map(itemgetter(5), found), np.intp, n)
    shapes = np.fromiter(map(itemgetter(6), found), np.intp, n)
    out = Ending([e[4] for e in found], _releases(rows, shapes, memo), timeless)
    if within is None:
        uids = {e[0].uid for e in found}
        memo.last = _Last(snapshot, planned_start_now, out, found, uids, rows, shapes)
    return out


def _same_order(old: Snapshot, new: Snapshot, changed: frozenset[str]) -> bool:
    """Whether the pods in both snapshots are in the same order in both (pods that came
    since are after them all; one that went and came back is not where it was), where
    ``changed`` holds every pod that came or went (``changed_pods``; one missing there
    only makes the answer False)."""
    before, after = list(old.pods), list(new.pods)
    if before == after:
        return True
    for uid in changed:  # the pods in both, in each one's order
        if uid not in new.pods and uid in old.pods:
            before.remove(uid)
        elif uid not in old.pods and uid in new.pods:
            after.remove(uid)
    return before == after


@dataclass(slots=True)
class _Last:
    """``ending``'s last answer for all rows: the snapshot, ``planned_start_now``, the answer,
    its entries in order and the uids in them."""

    snapshot: Snapshot
    planned: bool
    ending: Ending
    found: list[EndingEntry]
    uids: set[str]
    #: Per entry of ``found``: its row and release shape (what ``_releases`` reads).
    rows: np.ndarray
    shapes: np.ndarray


#: Changed pods beyond this many: ``ending`` reads every pod again.
_FEW_CHANGES = 1024


def _updated(last: _Last, new: Snapshot, now: float, memo: EndingMemo) -> Ending | None:
    """``ending`` of ``new`` from ``last`` when few pods changed and none reads the clock:
    the very same answer when each changed pod has the same end, row and release shape as
    before (or counts in neither); else ``last``'s entries with the changed ones taken out
    and put in where a sort of all of them would put them (None: that place is not known
    without one, as when other pods end at the same instant; then all are read again)."""
    old = last.snapshot
    if not last.ending.timeless:
        return None
    changed = changed_pods(old, new)
    if changed is None or len(changed) > _FEW_CHANGES:
        return None
    gone: list[EndingEntry] = []
    came: list[EndingEntry] = []
    for uid in changed:
        # From ``old`` itself: the memo's entry may be newer (calls for some rows only).
        before = _entry(old, uid, now, None, last.planned, memo)[0] if uid in last.uids else None
        after, stamped = _entry(new, uid, now, None, last.planned, memo)
        if stamped:
            return None
        if before is not None and after is not None and before[4:] == after[4:]:
            continue
        if before is not None:
            gone.append(before)
        if after is not None:
            came.append(after)
    if not _same_order(old, new, changed):
        return None  # a pod went and came back: it is now after every other
    if not gone and not came:
        last.snapshot = new
        return last.ending
    found, ends = list(last.found), list(last.ending.ends)
    rows, shapes = last.rows, last.shapes
    for entry in gone:
        uid, end = entry[0].uid, entry[4]
        i = bisect.bisect_left(ends, end)
        while found[i][0].uid != uid:
            i += 1
        del found[i], ends[i]
        rows, shapes = np.delete(rows, i), np.delete(shapes, i)
    # Pods new to the cache come after every other, in the order they came.
    appended = {e[0].uid: e for e in came if e[0].uid not in old.pods}
    came = [e for e in came if e[0].uid in old.pods]
    if appended:
        keys = list(new.pods)
        newest = list(itertools.takewhile(lambda u: u not in old.pods, reversed(keys)))
        came += [appended[u] for u in reversed(newest) if u in appended]
    for entry in came:
        end = entry[4]
        i, j = bisect.bisect_left(ends, end), bisect.bisect_right(ends, end)
        if i != j and entry[0].uid in old.pods:
            return None  # ties are in the pods' order, and this pod sits among the others
        found.insert(j, entry)
        ends.insert(j, end)
        rows, shapes = np.insert(rows, j, entry[5]), np.insert(shapes, j, entry[6])
    uids = (last.uids - {e[0].uid for e in gone}) | {e[0].uid for e in came}
    out = Ending(ends, _releases(rows, shapes, memo), True)
    memo.last = _Last(new, last.planned, out, found, uids, rows, shapes)
    return out


def _entry(
    snapshot: Snapshot,
    uid: str,
    now: float,
    within: np.ndarray | None,
    planned_start_now: bool,
    memo: EndingMemo,
) -> tuple[EndingEntry | None, bool]:
    """Pod ``uid``'s entry in ``ending``'s order (None: it holds no room there), and whether
    its start is ``now`` (it has none yet: its end reads the clock)."""
    pod = snapshot.pods.get(uid)
    node = snapshot.placement.get(uid)
    if pod is None or not node or pod.terminal:
        return None, False
    if not (snapshot.holds_node(pod) or (planned_start_now and uid in snapshot.reserved)):
        return None, False
    row = snapshot.view.index.get(node)
    if row is None or (within is not None and not within[row]):
        return None, False
    started = pod.started or snapshot.bound_at.get(uid)
    stamped = started is None
    if started is None:
        started = now
    held = snapshot.devices.get(uid)
    entry = memo.entries.get(uid)
    if (entry is None or entry[0] is not pod or entry[1] != started or entry[2] != node
            or entry[3] is not held):  # fmt: skip
        ids = held.devices if held is not None and held.node == node else ()
        shape = memo.shape(pod.requests, ids, held.ask.milli if ids and held else 0)
        end = expected_end(pod, started, memo.default_runtime)
        entry = memo.entries[uid] = (pod, started, node, held, end, row, shape)
    return entry, stamped


def _releases(rows: np.ndarray, shapes: np.ndarray, memo: EndingMemo) -> Releases:
    """``Releases`` of ``ending``'s entries, in their order, from each one's row and release
    shape."""
    n = len(rows)
    requests, counts, devices, milli = memo.shape_tables()
    held = counts[shapes] if n else np.zeros(0, np.intp)
    device_end = np.zeros(n + 1, dtype=np.intp)
    np.cumsum(held, out=device_end[1:])
    picked = devices[shapes] if n else np.zeros((0, 0), np.intp)
    return Releases(
        rows,
        requests[shapes] if n else np.zeros((0, len(RESOURCE_NAMES)), np.int64),
        np.repeat(rows, held),
        picked[np.arange(picked.shape[1]) < held[:, None]],
        np.repeat(milli[shapes] if n else np.zeros(0, np.int64), held),
        device_end,
    )


def reserve_for(
    snapshot: Snapshot,
    gang: str,
    members: Sequence[Pod],
    *,
    now: float,
    default_runtime: float,
    strategy: str = "binpack",
    within: np.ndarray | None = None,
    planned_start_now: bool = False,
    order: Ending | None = None,
    memo: EndingMemo | None = None,
) -> Reservation | None:
    """Where and when ``members`` could start once the earliest-ending pods are gone.

    ``snapshot.view`` must not count existing holds. ``within``: a row mask the gang must stay
    in (one topology domain). ``planned_start_now``: pods reserved by plans count as starting
    now (so their room frees after their runtime too). ``order``: ``ending`` of the same
    arguments, if the caller has it; else it is worked out (``memo``: kept from earlier calls,
    see ``ending``). ``None`` if the gang would not fit even with every running pod (there)
    gone.
    """
    view = snapshot.view
    allowed = None if within is None else {p.uid: within for p in members}
    if order is None:
        order = ending(snapshot, now=now, default_runtime=default_runtime, within=within,
                       planned_start_now=planned_start_now, memo=memo)  # fmt: skip
    bound = FitBound(view, members)

    def attempt(k: int) -> Allocation:
        freed = order.releases.freed(view, k)
        if not bound.possible(freed):
            return Allocation(unplaced=list(members))
        return allocate(freed, members, strategy=strategy, allowed=allowed)

    count = len(order.ends)
    if not attempt(count).complete:
        return None
    # The smallest k whose releases let the gang fit: first the smallest k that the quick
    # bound does not rule out (no allocation), then allocations from there on.
    low, high = 0, count
    while low < high:
        mid = (low + high) // 2
        if bound.possible(order.releases.freed(view, mid)):
            high = mid
        else:
            low = mid + 1
    high = count
    if attempt(low).complete:
        high = low  # the common case: the bound was tight, one allocation
    else:
        low += 1
    while low < high:
        mid = (low + high) // 2
        if attempt(mid).complete:
            high = mid
        else:
            low = mid + 1
    allocation = attempt(low)
    start = max(now, order.ends[low - 1]) if low else now
    holds: dict[str, Resources] = {}
    by_uid = {p.uid: p for p in members}
    for uid, node in allocation.placed.items():
        holds[node] = holds.get(node, Resources()) + by_uid[uid].requests
    return Reservation(gang, start, holds)


def may_backfill(pods: Sequence[Pod], now: float, reservation_start: float) -> bool:
    """Whether ``pods`` all declare runtimes that end before the reservation starts."""
    return ends_before([declared_runtime(p) for p in pods], now, reservation_start)


def ends_before(runtimes: Iterable[float | None], now: float, reservation_start: float) -> bool:
    """Whether every one of ``runtimes`` (declared, None: not) started ``now`` ends before the
    reservation starts (``may_backfill`` of pods whose runtimes they are)."""
    return all(r is not None and now + r <= reservation_start for r in runtimes)
