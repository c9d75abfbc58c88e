"""topology: place a gang's core inside one network-topology domain (``app.core.state.domains``).

A gang asks ``muster.io/topology-required: <level>`` (one domain of that level, or wait) or
``muster.io/topology-preferred: <level>`` (one domain of that level if any fits, else one of
the narrowest broader level that fits, else anywhere). A gang that asks nothing is treated as
preferring the **lowest** level: training jobs want locality, so a gang goes to one node if
one fits, else one block, else one spine, and so on.

**Which domain.** Within a level, every domain that could take the whole gang is a candidate,
and the chosen one is the one whose **leftover is least useful** to later work, compared in
this order:

1. fewest free GPUs left in the domain after placement (best fit: keeps the emptier domains
   whole for the next big gang);
2. the smallest largest-free-GPU-count on any one of its nodes afterwards (of two domains
   left with 8 free GPUs, the one left with 4+4 is less useful than the one left with a whole
   free 8-GPU node, so the gang goes to the former and the whole node survives elsewhere);
3. least free CPU, then memory, left; then the domain seen first (deterministic).

**Cost.** Placing a gang in a domain is ``actions.allocate`` with every member's nodes narrowed
to that domain. Before any such call, domains are pruned by arithmetic over the free room
(``allocatable - used``) on nodes the members may use: the domain's total must cover the
gang's summed requests, and for each kind of member (same requests, same node constraints)
its nodes must have enough whole slots (``min(free // request)`` per node). Key 1 and 3 are
exact before placement and key 2 has a lower bound (the average), so candidates are tried best
bound first and the search stops as soon as no untried candidate can beat the best found, or
after ``MAX_TRIES`` candidates per level. Before placing in a candidate, key 2 gets a tighter
bound (the members touch at most one node each, so the ``members + 1``-th freest node keeps
its room): a candidate that cannot beat the best found even so is passed over unplaced — of
many empty blocks alike, only the first is tried. On 1000 nodes in 100 blocks a cycle thus
costs a few vectorised sums per level and usually one ``allocate``.

Running members (a gang that lost some and is planned again) pin the domain: only a domain
holding every running member is a candidate. Within the chosen domain members are placed by
the ordinary strategy (no nested packing into sub-domains).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from app.core.actions.allocate import Allocation, allocate, fill_alike, rows_all, rows_of
from app.core.gpu.ask import GpuAsk
from app.core.model import labels
from app.core.model.quantity import format_milli
from app.core.model.values import RESOURCE_NAMES, Pod, Resources
from app.core.policies.registry import Constraint, constraint_of, eligible, scorer
from app.core.state.domains import Ask, Domain, Tree
from app.core.state.view import NodeView, vector

#: At most this many placements are tried per level (the pruning usually makes it one).
MAX_TRIES = 16

_GPU, _CPU, _MEMORY = 0, 1, 2

#: Where members go: (node row, how many).
Places = list[tuple[int, int]]


@dataclass(slots=True)
class TopologyAllocation(Allocation):
    """An ``Allocation`` plus where it went and, when the ask (not capacity) keeps the gang
    waiting, why (``reason``, said to the user as is)."""

    reason: str = ""
    #: ``"block b7"``: the domain the gang was placed in (``""``: anywhere, or not placed).
    domain: str = ""


Kinds = dict[tuple[Resources, Constraint], int]


@dataclass(slots=True)
class _Demand:
    """What the gang needs and what each node offers it, computed once per gang and view."""

    total: np.ndarray  # summed requests (R,)
    counts: np.ndarray  # members per kind
    pinned: np.ndarray  # rows of running members
    masks: dict[Constraint, np.ndarray]  # ``eligible`` per node constraint of the members
    kinds: Kinds  # members per kind (requests, constraint)
    #: Makes ``(columns, level sums)`` when first needed (a gang placed where the last one
    #: went needs neither): ``columns`` is rows x (2R + kinds), summed per domain in one pass:
    #: free room (never below zero), free room on rows some member may use, whole slots per
    #: kind of member (same requests, same node constraints) on rows that kind may use; the
    #: level sums (level -> ``columns`` summed per domain) are computed when first asked.
    source: Callable[[], tuple[np.ndarray, dict[int, np.ndarray]]]
    made: tuple[np.ndarray, dict[int, np.ndarray]] | None = None

    def sums(self, tree: Tree, level: int) -> np.ndarray:
        """``columns`` summed per domain of ``level``."""
        if self.made is None:
            self.made = self.source()
        columns, level_sums = self.made
        found = level_sums.get(level)
        if found is None:
            found = level_sums[level] = tree.sums(level, columns)
        return found


class DemandMemo:
    """The last gang shape's ``_Demand`` columns and domain sums, brought up to date row by
    row: a cycle reserves gang after gang, so the next gang of the same shape sees a view
    that differs in a few rows, and pays for those rows instead of every node. Exact: the
    rows whose usage differs are found by comparing usage itself. Not thread-safe (one per
    planner, used under its lock)."""

    #: Beyond this share of changed rows, everything is computed afresh.
    REBUILD = 0.125

    def __init__(self) -> None:
        self._key: tuple[object, ...] | None = None
        self._used = np.zeros((0, 0), dtype=np.int64)
        #: The columns for ``_used`` and their level sums (None: nothing kept yet).
        self._kept: tuple[np.ndarray, dict[int, np.ndarray]] | None = None
        #: Rows the last ``columns`` brought up to date (None: it computed afresh), and
        #: whether their usage only grew.
        self._changed: np.ndarray | None = None
        self._grew = False
        #: The view and key ``peek`` last compared (its answer is ``_changed``).
        self._peeked: tuple[NodeView, tuple[object, ...]] | None = None
        #: ``(level, domain, what else decides)`` of the last placement of this shape, when
        #: that domain came first in the search by strictly the fewest GPUs left (``_best``).
        self.winner: tuple[int, int, object] | None = None
        #: ``(level, domain, what else decides)`` of the last placement into one domain
        #: (None: the last call placed nothing, or not inside one domain).
        self.last: tuple[int, int, object] | None = None
        #: What the last domain search that placed a gang saw and did (``next_domain``).
        self.trace: SearchTrace | None = None

    def repeat(self, tree: Tree, decides: object) -> tuple[int, int] | None:
        """``(level, domain)`` where this gang goes if it fits there at all: the last gang of
        this shape (same ``decides``) went there, first by strictly the fewest GPUs left, and
        since then only that domain's rows changed, by taking room. Its key only fell, every
        other domain's is as it was, so the search would try it first again and, once the
        gang fits there, stop at the next domain (more GPUs left) without placing there."""
        winner, changed = self.winner, self._changed
        if winner is None or changed is None or not self._grew or winner[2] != decides:
            return None
        level, domain = winner[0], winner[1]
        if len(changed) and not (tree.ids[level, changed] == domain).all():
            return None
        return level, domain

    def peek(self, view: NodeView, tree: Tree, kinds: Kinds) -> np.ndarray | None:
        """The rows whose usage differs from the kept columns' for ``kinds`` on ``view`` (None:
        the kept columns are for something else, or too much changed: computed afresh then);
        ``repeat`` answers from them."""
        key = (view.table, tree, tuple(kinds.items()))
        if self._peeked is not None and self._peeked[0] is view and self._peeked[1] == key:
            # Asked again about the same view (the search after the gang's first look): a
            # session makes a new view for every change (its arrays are written in place).
            return self._changed
        self._changed, self._peeked = None, None
        if self._kept is None or self._used.shape != view.used.shape:
            return None
        if key != self._key:
            return None
        changed = np.flatnonzero(~rows_all(view.used == self._used))
        if len(changed) > self.REBUILD * len(view.nodes):
            return None
        self._changed = changed
        self._grew = bool((view.used[changed] >= self._used[changed]).all())
        self._peeked = (view, key)
        return changed

    def columns(
        self, view: NodeView, tree: Tree, masks: dict[Constraint, np.ndarray], kinds: Kinds
    ) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """The columns for ``kinds`` on ``view`` and the (shared, updated) level sums."""
        changed = self.peek(view, tree, kinds)
        if changed is not None and self._kept is not None:
            columns, level_sums = self._kept
            if len(changed):
                fresh = _columns(view, masks, kinds, changed)
                delta = fresh - columns[changed]
                columns[changed] = fresh
                self._used[changed] = view.used[changed]
                for level, sums in level_sums.items():
                    np.add.at(sums, tree.ids[level, changed], delta)
                self._peeked = None  # the kept usage is the view's now
            return columns, level_sums
        columns = _columns(view, masks, kinds, None)
        self.winner, self._peeked = None, None
        self._key, self._used = (view.table, tree, tuple(kinds.items())), view.used.copy()
        self._kept = (columns, {})
        return self._kept


def allocate_topology(
    view: NodeView,
    members: Sequence[Pod],
    *,
    tree: Tree,
    ask: Ask | None = None,
    strategy: str = "binpack",
    pinned: Collection[str] = (),
    memo: DemandMemo | None = None,
) -> TopologyAllocation:
    """Place ``members`` (a gang's core) together inside one domain of ``tree`` per ``ask``.

    ``ask`` ``None`` prefers the lowest level. ``pinned``: nodes of members already running;
    the domain must hold them. A required ask that no domain can meet leaves every member
    unplaced with ``reason`` set; otherwise an incomplete result is a capacity shortage, as
    with ``allocate``. ``memo`` carries the free-room sums over from the previous call.
    """
    members = list(members)
    if not members:
        return TopologyAllocation()
    if ask is None:
        start, required = tree.depth - 1, False
    else:
        level = tree.level(ask.level)
        if level is None:
            key = labels.TOPOLOGY_REQUIRED if ask.required else labels.TOPOLOGY_PREFERRED
            known = ", ".join(tree.names) or "none configured"
            return TopologyAllocation(
                unplaced=members,
                reason=f"unknown topology level {ask.level!r} in {key}; known levels: {known}",
            )
        start, required = level, ask.required
    demand = _demand(view, members, pinned, tree, memo)
    decides = (ask, strategy)
    repeat = None
    if memo is not None:
        repeat = None if len(demand.pinned) else memo.repeat(tree, decides)
        memo.winner = memo.last = None
        if len(demand.pinned):
            memo.trace = None
    for level in [start] if required else range(start, -1, -1):
        if tree.spans_all(level):
            break  # one domain of every node: the same as anywhere
        if not required and (demand.total > tree.largest(level, view.allocatable)).any():
            continue  # no domain of this level could hold the gang even empty
        if repeat is not None and repeat[0] == level:
            again = _in_domain(view, members, tree, level, repeat[1], strategy)
            if again is not None:
                assert memo is not None
                memo.winner = memo.last = (level, repeat[1], decides)
                return again
        seen = _Seen() if memo is not None and not len(demand.pinned) else None
        found, free, first, index = _best(view, members, tree, level, demand, strategy, seen)
        if found is not None:
            if memo is not None and seen is not None:
                memo.last = (level, index, decides)
                if first is not None:
                    memo.winner = memo.last
                memo.trace = seen.trace(view, members, tree, level, demand, decides, index)
            return found
        if required:
            return TopologyAllocation(
                unplaced=members, reason=_no_room(tree, level, demand, free, len(members))
            )
    placed = allocate(view, members, strategy=strategy)
    return TopologyAllocation(
        placed=placed.placed, devices=placed.devices, unplaced=placed.unplaced
    )


def _demand(
    view: NodeView,
    members: Sequence[Pod],
    pinned: Collection[str],
    tree: Tree,
    memo: DemandMemo | None,
) -> _Demand:
    masks: dict[Constraint, np.ndarray] = {}
    kinds: Kinds = {}
    total = Resources()
    for pod in members:
        constraint = constraint_of(pod)
        if constraint not in masks:
            masks[constraint] = eligible(view, pod)
        kind = (pod.requests, constraint)
        kinds[kind] = kinds.get(kind, 0) + 1
        total = total + pod.requests
    source: Callable[[], tuple[np.ndarray, dict[int, np.ndarray]]]
    if memo is None:
        source = lambda: (_columns(view, masks, kinds, None), {})  # noqa: E731
    else:
        memo.peek(view, tree, kinds)  # what changed since (for ``DemandMemo.repeat``)
        source = lambda: memo.columns(view, tree, masks, kinds)  # noqa: E731
    rows = [view.index[n] for n in pinned if n in view.index]
    return _Demand(
        total=vector(total),
        counts=np.array(list(kinds.values()), dtype=np.int64),
        pinned=np.array(rows, dtype=np.int64),
        masks=masks,
        kinds=kinds,
        source=source,
    )


def _columns(
    view: NodeView, masks: dict[Constraint, np.ndarray], kinds: Kinds, rows: np.ndarray | None
) -> np.ndarray:
    """``_Demand.columns`` for ``rows`` (``None``: every row)."""
    every = slice(None) if rows is None else rows
    free = np.maximum(view.allocatable[every] - view.used[every], 0)
    usable = np.zeros(len(free), dtype=bool)
    for mask in masks.values():
        usable |= mask[every]
    slots = []
    for (requests, constraint), count in kinds.items():
        need = np.asarray(requests, dtype=np.int64)
        positive = need > 0
        if positive.any():
            fits = (free[:, positive] // need[positive]).min(axis=1)
        else:
            fits = np.full(len(free), count, dtype=np.int64)
        slots.append(np.where(masks[constraint][every], fits, 0))
    columns: np.ndarray = np.column_stack([free, free * usable[:, None], *slots]).astype(
        np.int64, copy=False
    )
    return columns


def _best(
    view: NodeView,
    members: list[Pod],
    tree: Tree,
    level: int,
    demand: _Demand,
    strategy: str,
    seen: _Seen | None = None,
) -> tuple[TopologyAllocation | None, np.ndarray, int | None, int]:
    """The best placement inside one domain of ``level`` (``None``: none fits), the free
    room per domain on rows the members may use (for the reason when none fits), the
    domain placed in when it came first by strictly the fewest GPUs left (see
    ``DemandMemo.repeat``; else ``None``), and the domain placed in (-1: none). ``seen``
    (if given) gets the candidates' order, tighter bounds and placements (``SearchTrace``)."""
    r = len(RESOURCE_NAMES)
    sums = demand.sums(tree, level)
    total, free, slots = sums[:, :r], sums[:, r : 2 * r], sums[:, 2 * r :]
    ok = rows_all(free >= demand.total) & rows_all(slots >= demand.counts)
    if len(demand.pinned):
        homes = np.unique(tree.ids[level, demand.pinned])
        ok &= np.isin(np.arange(len(ok)), homes) if len(homes) == 1 else False
    candidates = np.flatnonzero(ok)
    if not len(candidates):
        return None, free, None, -1
    left = total[candidates] - demand.total
    # The largest free GPU count left on one node is at least the average.
    bound = -(-left[:, _GPU] // tree.sizes[level][candidates])
    keys = np.column_stack([left[:, _GPU], bound, left[:, _CPU], left[:, _MEMORY], candidates])
    best: tuple[tuple[int, ...], TopologyAllocation, int] | None = None
    order = np.lexsort(keys.T[::-1])
    kept: list[int] | None = None  # ``_kept`` of the domains tried from ``since`` on
    since = 0
    for tried, k in enumerate(order):
        lower = tuple(keys[k].tolist())
        if tried >= MAX_TRIES or (best is not None and lower >= best[0]):
            break
        if best is not None:
            # The members touch at most len(members) nodes, so one of the len(members) + 1
            # freest is left as it is: a tighter bound than the average, which skips domains
            # (empty blocks alike) that could not beat the best one without placing there.
            if kept is None:
                since = tried
                # (When tracing, the bounds of the candidates a later ``next_domain`` may look
                # at too: one call for all.)
                stop = MAX_TRIES if seen is None else _KEEP
                kept = _kept(view, tree, level, candidates[order[tried:stop]], len(members))
                if seen is not None:
                    seen.kept.update(zip(candidates[order[tried:stop]].tolist(), kept, strict=True))
            bound = kept[tried - since]
            if bound >= 0 and (lower[0], max(lower[1], bound), *lower[2:]) >= best[0]:
                continue
        domain = tree.domains[level][int(candidates[k])]
        gpus = np.maximum(view.allocatable[domain.rows, _GPU] - view.used[domain.rows, _GPU], 0)
        placed = _place_in(view, members, tree, level, domain.index, strategy)
        if not placed.complete:
            if seen is not None:
                seen.placed[lower[-1]] = None
            continue
        taken: dict[str, int] = {}
        for pod in members:
            node = placed.placed[pod.uid]
            taken[node] = taken.get(node, 0) + pod.requests.gpu
        for node, amount in taken.items():  # domain.rows ascend
            gpus[int(np.searchsorted(domain.rows, view.index[node]))] -= amount
        actual = (lower[0], int(gpus.max(initial=0)), *lower[2:])
        if seen is not None:
            seen.placed[lower[-1]] = actual
        if best is None or actual < best[0]:
            best = (actual, _named(placed, tree, domain), domain.index)
    if best is None:
        return None, free, None, -1
    if seen is not None:
        seen.order = [(tuple(keys[k].tolist()), int(candidates[k])) for k in order[:_KEEP]]
        seen.count, seen.actual = len(order), best[0]
    head = int(order[0])
    alone = len(order) == 1 or keys[int(order[1]), 0] > keys[head, 0]
    first = int(candidates[head]) if alone and best[0][-1] == keys[head, -1] else None
    return best[1], free, first, best[2]


def _kept(view: NodeView, tree: Tree, level: int, domains: np.ndarray, members: int) -> list[int]:
    """Per domain of ``level`` in ``domains``: the free GPUs of its ``members + 1``-th freest
    node (one node a gang of ``members`` pods leaves as it is); ``-1`` for a domain of at
    most ``members`` nodes (no such bound). All at once when the tree's levels allow."""
    padded = tree.padded(level)
    if padded is not None and padded.shape[1] > members:
        rows = padded[domains]
        gpus = np.maximum(view.allocatable[rows, _GPU] - view.used[rows, _GPU], 0)
        gpus[rows < 0] = -1  # padding: below every node
        found = np.partition(gpus, -members - 1, axis=1)[:, -members - 1]
        found[tree.sizes[level][domains] <= members] = -1
        out: list[int] = found.tolist()
        return out
    out = []
    for index in domains.tolist():
        at = tree.domains[level][index].rows
        if len(at) <= members:
            out.append(-1)
            continue
        gpus = np.maximum(view.allocatable[at, _GPU] - view.used[at, _GPU], 0)
        out.append(int(np.partition(gpus, -members - 1)[-members - 1]))
    return out


#: Candidates a ``SearchTrace`` keeps in order: a search looks at ``MAX_TRIES`` at most,
#: and ``next_domain`` one further for each domain that left the list since.
_KEEP = 4 * MAX_TRIES

#: One key of a candidate domain: GPUs left, a bound on the most left on one node, CPU and
#: memory left, the domain.
Key = tuple[int, ...]


@dataclass(slots=True)
class _Seen:
    """What ``_best`` saw while it searched (for ``SearchTrace``)."""

    order: list[tuple[Key, int]] = field(default_factory=list)
    count: int = 0
    kept: dict[int, int] = field(default_factory=dict)
    placed: dict[int, Key | None] = field(default_factory=dict)
    actual: Key = ()

    def trace(
        self,
        view: NodeView,
        members: Sequence[Pod],
        tree: Tree,
        level: int,
        demand: _Demand,
        decides: object,
        winner: int,
    ) -> SearchTrace:
        """The search's ``SearchTrace``, its winner ``winner`` (a domain of ``level``)."""
        rows = tree.domains[level][winner].rows
        mask = eligible(view, members[0])
        return SearchTrace(
            key=(view.table, tree, tuple(demand.kinds.items()), _asks(members), level, decides),
            used=view.used.copy(),
            gpu_free=view.gpu_free.copy(),
            order=self.order,
            count=self.count,
            kept=self.kept,
            placed=self.placed,
            winner=winner,
            lower=next(key for key, domain in self.order if domain == winner),
            actual=self.actual,
            twin=_rows_state(view, rows, mask),
        )


def _asks(members: Sequence[Pod]) -> tuple[GpuAsk, ...]:
    """The members' GPU asks (they decide devices, which the kinds do not say)."""
    return tuple(map(GpuAsk.of, members))


def _rows_state(view: NodeView, rows: np.ndarray, mask: np.ndarray) -> tuple[bytes, ...]:
    """What placing alike members in a domain of ``rows`` reads of them to decide where
    they go (``fill_alike`` under binpack): per row in order, allocatable, usage, free GPU
    devices and whether the members may use it. (Which devices they get also depends on
    the nodes' GPU links, but where they go, and so the domain's actual key, does not.)"""
    return (
        view.allocatable[rows].tobytes(),
        view.used[rows].tobytes(),
        view.gpu_free[rows].tobytes(),
        mask[rows].tobytes(),
    )


@dataclass(slots=True)
class SearchTrace:
    """What one domain search (``_best``, for gangs of one shape, none running) saw and did:
    the view's usage and free devices then, the candidates best key first (the first
    ``_KEEP`` of ``count``), the tighter bound of those it computed one for, the outcome of
    those it placed in (their actual key, ``None``: the gang did not fit), the domain it
    chose with its key and actual key, and that domain's rows then (``_rows_state``).
    ``next_domain`` answers the next search from it."""

    key: tuple[object, ...]
    used: np.ndarray
    gpu_free: np.ndarray
    order: list[tuple[Key, int]]
    count: int
    kept: dict[int, int]
    placed: dict[int, Key | None]
    winner: int
    lower: Key
    actual: Key
    twin: tuple[bytes, ...]


def next_domain(
    view: NodeView,
    members: list[Pod],
    tree: Tree,
    at: tuple[int, int],
    decides: object,
    memo: DemandMemo,
) -> tuple[int, bool] | None:
    """Where ``allocate_topology`` (binpack) places ``members`` (a gang's core, alike, none
    running) at level ``at[0]`` (which it comes to without trying a narrower one, see
    ``reaches``) when the last search (``memo.trace``, same members' kinds, GPU asks and
    ``decides``) chose domain ``D`` = ``at[1]`` of that level and gangs filled it so that
    no more of them fits there (the caller knows it: ``fill_domain``);
    ``(domain, whether it came first by strictly the fewest GPUs left)``, None: not known
    without searching. Updates ``memo`` as that search would (``winner``, ``last``, trace).

    The answer is the search's own: since the trace, only ``D``'s rows changed (compared
    value by value), so every other domain has the key, bound and placement it had then;
    ``D``'s key is made afresh and placing there fails. Going through the candidates in
    key order as the search does (``MAX_TRIES``, stop at a key not below the best, pass
    over a domain whose tighter bound is not below it), each outcome is one the trace
    knows, but for the first domain not placed in then: its rows are, value by value, what
    ``D``'s were when the trace placed the first gang there (a twin), so the gang lands on
    the same rows in turn with the same devices, and its actual key is ``D``'s then but for
    the domain. Anything else (another unknown domain, a domain that would now beat it) is
    left to the search."""
    trace = memo.trace
    level, filled = at
    if trace is None or not members or trace.winner != filled:
        return None
    masks = {constraint_of(members[0]): eligible(view, members[0])}
    kinds: Kinds = {}
    for pod in members:
        kind = (pod.requests, constraint_of(pod))
        kinds[kind] = kinds.get(kind, 0) + 1
    if len(kinds) != 1:
        return None
    if trace.key != (view.table, tree, tuple(kinds.items()), _asks(members), level, decides):
        return None
    changed = np.flatnonzero(
        ~rows_all(view.used == trace.used) | ~rows_all(view.gpu_free == trace.gpu_free)
    )
    if (tree.ids[level, changed] != filled).any():
        return None
    # ``D`` afresh: its sums decide whether it is still a candidate, and its key.
    domain = tree.domains[level][filled]
    sums = _columns(view, masks, kinds, domain.rows).sum(axis=0)
    r = len(RESOURCE_NAMES)
    need = vector(members[0].requests) * len(members)
    order = [(key, d) for key, d in trace.order if d != filled]
    count = trace.count - 1
    truncated = trace.count > len(trace.order)
    if (sums[r : 2 * r] >= need).all() and sums[2 * r] >= len(members):
        left = sums[:r] - need
        mine = (int(left[_GPU]), -(-int(left[_GPU]) // len(domain.rows)), int(left[_CPU]),
                int(left[_MEMORY]), filled)  # fmt: skip
        if not truncated or (order and mine < order[-1][0]):
            bisect.insort(order, (mine, filled))
        count += 1
    if truncated and len(order) < MAX_TRIES:
        return None
    kept = {d: b for d, b in trace.kept.items() if d != filled}
    placed = {d: a for d, a in trace.placed.items() if d != filled}
    placed[filled] = None  # no more of the gangs fits there (the caller's word)
    best: Key | None = None
    twin: int | None = None
    for tried, (lower, d) in enumerate(order):
        if tried >= MAX_TRIES or (best is not None and lower >= best):
            break
        if best is not None:
            bound = kept.get(d)
            if bound is None:
                bound = kept[d] = _kept(view, tree, level, np.array([d]), len(members))[0]
            if bound >= 0 and (lower[0], max(lower[1], bound), *lower[2:]) >= best:
                continue
        if d in placed:
            actual = placed[d]
        elif (
            twin is None
            and lower[:-1] == trace.lower[:-1]
            and _is_twin(view, tree, level, d, masks, trace)
        ):
            twin, actual = d, (*trace.actual[:-1], d)
            placed[d] = actual
        else:
            return None  # a placement the trace does not know
        if actual is not None and (best is None or actual < best):
            best = actual
    if best is None or twin is None or best[-1] != twin:
        return None
    head = order[0][0]
    first = best[-1] == head[-1] and (count == 1 or order[1][0][0] > head[0])
    memo.last = (level, twin, decides)
    memo.winner = memo.last if first else None
    # The view differs from the trace's copies in ``changed`` alone: those copies, brought up
    # to date there, are the new trace's (the old trace is dropped), instead of new copies.
    used, gpu_free = trace.used, trace.gpu_free
    used[changed] = view.used[changed]
    gpu_free[changed] = view.gpu_free[changed]
    memo.trace = SearchTrace(
        key=trace.key,
        used=used,
        gpu_free=gpu_free,
        order=order[:_KEEP],
        count=count,
        kept=kept,
        placed=placed,
        winner=twin,
        lower=next(key for key, d in order if d == twin),
        actual=best,
        twin=trace.twin,
    )
    return twin, first


def _is_twin(
    view: NodeView,
    tree: Tree,
    level: int,
    index: int,
    masks: dict[Constraint, np.ndarray],
    trace: SearchTrace,
) -> bool:
    """Whether domain ``index``'s rows now read, value by value and in order, what the
    trace's chosen domain's read when the trace placed there (``_rows_state``)."""
    rows = tree.domains[level][index].rows
    return _rows_state(view, rows, next(iter(masks.values()))) == trace.twin


def _place_in(
    view: NodeView, members: list[Pod], tree: Tree, level: int, index: int, strategy: str
) -> Allocation:
    """``allocate`` with every member narrowed to domain ``index`` of ``level``."""
    allowed = dict.fromkeys((p.uid for p in members), tree.mask(level, index))
    return allocate(view, members, strategy=strategy, allowed=allowed)


def _named(placed: Allocation, tree: Tree, domain: Domain) -> TopologyAllocation:
    name = f"{tree.names[domain.level]} {domain.label(tree)}"
    return TopologyAllocation(placed=placed.placed, devices=placed.devices, domain=name)


def _in_domain(
    view: NodeView, members: list[Pod], tree: Tree, level: int, index: int, strategy: str
) -> TopologyAllocation | None:
    """The placement in domain ``index`` of ``level`` (None: the gang does not fit there)."""
    placed = _place_in(view, members, tree, level, index, strategy)
    return _named(placed, tree, tree.domains[level][index]) if placed.complete else None


def _no_room(tree: Tree, level: int, demand: _Demand, free: np.ndarray, count: int) -> str:
    """``no single block has room for 16 nvidia.com/gpu (largest free: 8)``."""
    name = tree.names[level]
    column = next((c for c in (_GPU, _CPU, _MEMORY) if demand.total[c] > 0), _GPU)
    resource = RESOURCE_NAMES[column]
    need = f"{format_milli(resource, int(demand.total[column]))} {resource}"
    if len(demand.pinned):
        homes = np.unique(tree.ids[level, demand.pinned])
        if len(homes) > 1:
            return f"running members already span more than one {name}; cannot keep to one"
        home = tree.domains[level][int(homes[0])]
        have = format_milli(resource, int(free[home.index, column]))
        return (
            f"the {name} of the running members ({home.label(tree)}) has no room for "
            f"{need} (free: {have})"
        )
    largest = int(free[:, column].max(initial=0))
    text = f"no single {name} has room for {need} (largest free: {format_milli(resource, largest)}"
    if largest >= demand.total[column]:
        text += f", but not on nodes that can hold all {count} members"
    return text + ")"


def reaches(tree: Tree, view: NodeView, ask: Ask | None, total: np.ndarray, level: int) -> bool:
    """Whether ``allocate_topology`` for a gang of summed requests ``total`` and ``ask`` comes
    to ``level`` without trying any narrower one first (each is too small for the gang even
    empty): the domain it then takes at ``level`` decides the placement alone."""
    if ask is None:
        start, required = tree.depth - 1, False
    else:
        found = tree.level(ask.level)
        if found is None:
            return False
        start, required = found, ask.required
    for at in [start] if required else range(start, -1, -1):
        if at == level:
            return True
        if tree.spans_all(at) or required:
            return False
        if not (total > tree.largest(at, view.allocatable)).any():
            return False
    return False


class DomainFills:
    """``fill_domain``'s answers, kept by what they read: the domain's rows in order (their
    allocatable, usage, free GPU devices and whether the members may use them:
    ``_rows_state``), the members' requests and GPU ask, and the strategy. A packing scorer
    scores a row by its own allocatable and usage (``Scorer.packs``), so a domain whose rows
    read, value by value, what another's did is filled the same way, row for row. A cycle
    fills domain after domain of one level with gangs of one shape, and the untouched
    domains of a level are mostly alike: each such fill is then a lookup. Kept for one cycle
    (the planner makes a new one per cycle)."""

    def __init__(self, strategy: str) -> None:
        self._strategy = strategy
        self._kept: dict[tuple[object, ...], tuple[int, Places]] = {}

    def fill(self, view: NodeView, pod: Pod, tree: Tree, at: tuple[int, int], limit: int) -> Places:
        """``fill_domain(view, pod, tree, level, index, strategy, limit)`` of the domain ``at``
        (``(level, index)``) with the strategy this memo was made for."""
        level, index = at
        strategy = self._strategy
        within = rows_of(tree.mask(level, index))
        state = _rows_state(view, within, eligible(view, pod))
        key = (strategy, pod.requests, GpuAsk.of(pod), state)
        hit = self._kept.get(key)
        if hit is not None:
            made, places = hit
            # A fill of fewer members than ``made`` asked for took every room there: any
            # limit gets it. Otherwise a smaller limit gets its first ``limit`` members
            # (``fill_alike``: the first k members go where k alone would).
            if limit <= made or sum(count for _, count in places) < made:
                return _first(within, places, limit)
        out = fill_domain(view, pod, tree, level, index, strategy, limit)
        # ``within`` ascends (``rows_of``), so a row's position is where it sorts in.
        positions = np.searchsorted(within, [row for row, _ in out]).tolist()
        self._kept[key] = (
            limit,
            [(at, count) for at, (_, count) in zip(positions, out, strict=True)],
        )
        return out


def _first(within: np.ndarray, places: Places, limit: int) -> Places:
    """The first ``limit`` members of a fill of ``places`` (position in ``within``, count)."""
    out: list[tuple[int, int]] = []
    left = limit
    for at, count in places:
        if left <= 0:
            break
        count = min(count, left)
        out.append((int(within[at]), count))
        left -= count
    return out


def fill_domain(
    view: NodeView,
    pod: Pod,
    tree: Tree,
    level: int,
    index: int,
    strategy: str,
    limit: int,
) -> list[tuple[int, int]]:
    """``fill_alike`` of up to ``limit`` members alike ``pod`` (whole GPUs or none, a
    packing ``strategy``) on the rows of domain ``index`` of ``level`` they may use: where
    gangs of such members placed in that domain one after another go (``allocate`` with
    every member narrowed to the domain places them so)."""
    within = rows_of(tree.mask(level, index))
    rows = within[eligible(view, pod)[within]]
    return fill_alike(view, pod.requests, GpuAsk.of(pod), scorer(strategy), rows, limit)
