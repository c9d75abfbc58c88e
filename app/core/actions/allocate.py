"""allocate: place a whole gang at once on a node view, or say why it cannot be placed.

Members are placed largest first, each on the eligible node that scores best under the
packing strategy, with nodes already chosen for this gang preferred on ties (fewer nodes per
gang). Everything filter checks applies: resources against what is free (reservations
included), cordons, taints, node selectors and affinity.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from app.core.gpu.ask import MILLI, GpuAsk, fits_mask, take
from app.core.gpu.ask import fits as gpu_fits
from app.core.gpu.ledger import default_choice, default_choices, device_count
from app.core.model.values import Pod, Resources
from app.core.policies.interfaces import Scorer
from app.core.policies.registry import Constraint, constraint_of, eligible, scorer
from app.core.state.nodetable import NodeTable
from app.core.state.view import NodeView, shortfall, vector

#: Tie-breaker weight for nodes the gang already uses (below one score point).
_LOCALITY = 0.5


@dataclass(slots=True)
class Allocation:
    """Where each placed member goes (``uid -> node``), the GPU devices chosen for it there
    (GPU members only), and which members found no room."""

    placed: dict[str, str] = field(default_factory=dict)
    devices: dict[str, tuple[int, ...]] = field(default_factory=dict)
    unplaced: list[Pod] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether every member found a node."""
        return not self.unplaced

    def copy(self) -> Allocation:
        """A copy of its own (the mappings and list are new)."""
        return Allocation(dict(self.placed), dict(self.devices), list(self.unplaced))


def allocate(
    view: NodeView,
    members: Sequence[Pod],
    *,
    strategy: str = "binpack",
    allowed: Mapping[str, np.ndarray] | None = None,
    within: np.ndarray | None = None,
) -> Allocation:
    """Place ``members`` together on ``view``; ``allowed[uid]`` may narrow a member's nodes.

    ``within`` (ascending rows): only those nodes are considered at all. The answer is the
    one narrowing every member to them with ``allowed`` gives, at the cost of those rows alone.
    Members all narrowed by one ``allowed`` mask (a gang placed inside one topology domain)
    take that path by themselves.

    Members alike (same requests, GPU ask, node constraints and ``allowed`` rows) share one
    list of candidate rows with their fit and score, computed once; after each placement only
    the row that changed is judged again (a row's score depends on that row alone).
    """
    if within is None and allowed is not None and members:
        shared = allowed.get(members[0].uid)
        if shared is not None and all(allowed.get(p.uid) is shared for p in members):
            within, allowed = rows_of(shared), None
    policy = scorer(strategy)
    ordered = _ordered(members)
    if ordered and policy.packs and _alike(ordered, allowed):
        fits = eligible(view, ordered[0])
        mask = allowed.get(ordered[0].uid) if allowed is not None else None
        if mask is not None:
            fits = fits & mask
        rows = np.flatnonzero(fits) if within is None else within[fits[within]]
        return _fill(view, ordered, policy, rows)
    if within is not None:
        sub = _subset(view, within)
        narrowed = None if allowed is None else {u: m[within] for u, m in allowed.items()}
        return _allocate(sub, members, strategy, narrowed, lambda p: eligible(view, p)[within])
    return _allocate(view, members, strategy, allowed, lambda p: eligible(view, p))


#: ``rows_of`` answers by ``id(mask)``, with the mask (kept alive: its id is not reused).
_ROWS: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def rows_of(mask: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(mask)``, remembered for read-only masks that own their data (a
    domain's, see ``Tree.mask``: the same one is asked for gang after gang)."""
    if mask.flags.writeable or mask.base is not None:
        return np.flatnonzero(mask)
    hit = _ROWS.get(id(mask))
    if hit is None or hit[0] is not mask:
        if len(_ROWS) >= 512:
            _ROWS.clear()
        hit = _ROWS[id(mask)] = (mask, np.flatnonzero(mask))
    return hit[1]


def _ordered(members: Sequence[Pod]) -> list[Pod]:
    """Members in the order they are placed: largest first (GPU, then cpu, then memory)."""
    return sorted(members, key=lambda p: (-p.requests.gpu, -p.requests.cpu, -p.requests.memory))


def _subset(view: NodeView, rows: np.ndarray) -> NodeView:
    """``view`` restricted to ``rows`` (in that order), as a view of its own."""
    nodes = [view.nodes[i] for i in rows.tolist()]
    table = NodeTable(
        nodes, {n.name: i for i, n in enumerate(nodes)}, view.allocatable[rows], view.special[rows]
    )
    return NodeView(view.generation, table, view.used[rows], view.gpu_free[rows])


def _allocate(
    view: NodeView,
    members: Sequence[Pod],
    strategy: str,
    allowed: Mapping[str, np.ndarray] | None,
    mask_of: Callable[[Pod], np.ndarray],
) -> Allocation:
    result = Allocation()
    if not len(view.nodes):
        result.unplaced = list(members)
        return result
    policy = scorer(strategy)
    ordered = _ordered(members)
    used = view.used.copy()
    working = replace(view, used=used)
    chosen = np.zeros(len(view.nodes), dtype=bool)
    gpu_free = view.gpu_free.copy()
    masks: dict[Constraint, np.ndarray] = {}
    candidates: dict[tuple[object, ...], _Candidates] = {}
    touched: list[int] = []  # rows placed on, in order (what cached candidates may lack)
    for pod in ordered:
        ask = GpuAsk.of(pod)
        narrowed = allowed.get(pod.uid) if allowed is not None else None
        key = (constraint_of(pod), pod.requests, ask, id(narrowed))
        found = candidates.get(key)
        if found is None:
            signature = constraint_of(pod)
            mask = masks.get(signature)
            if mask is None:
                mask = masks[signature] = mask_of(pod)
            rows = np.flatnonzero(mask if narrowed is None else mask & narrowed)
            found = candidates[key] = _Candidates(rows, pod.requests, ask, len(touched))
            found.judge(working, gpu_free, chosen, policy, np.arange(len(rows)))
        else:
            found.catch_up(working, gpu_free, chosen, policy, touched)
        row = found.best()
        if row is None:
            result.unplaced.append(pod)
            continue
        used[row] += vector(pod.requests)
        if ask.count:
            node = view.nodes[row]
            free = gpu_free[row, : device_count(node)]
            devices = default_choice(node, free.tolist(), ask)
            assert devices is not None  # the fit said so
            take(free, ask, devices)
            result.devices[pod.uid] = devices
        chosen[row] = True
        touched.append(row)
        if policy.packs:
            # Its score there only rose and it was the first of the best: it stays the pick
            # for the next alike member while it fits, so only whether it fits is judged.
            found.refit(working, gpu_free, row, len(touched))
        else:
            found.catch_up(working, gpu_free, chosen, policy, touched)
        result.placed[pod.uid] = view.nodes[row].name
    return result


def _alike(ordered: Sequence[Pod], allowed: Mapping[str, np.ndarray] | None) -> bool:
    """Whether ``ordered`` (not empty) are all alike — one requests, GPU ask, constraint and
    ``allowed`` mask — with whole GPUs or none (what ``_fill`` places)."""
    first = ordered[0]
    ask = GpuAsk.of(first)
    if ask.shared:
        return False
    requests, constraint = first.requests, constraint_of(first)
    narrowed = allowed.get(first.uid) if allowed is not None else None
    return all(
        pod.requests == requests
        and (allowed is None or allowed.get(pod.uid) is narrowed)
        and constraint_of(pod) == constraint
        and GpuAsk.of(pod) == ask
        for pod in ordered[1:]
    )


def _fill(view: NodeView, ordered: Sequence[Pod], policy: Scorer, rows: np.ndarray) -> Allocation:
    """``_allocate`` for members all alike (``_alike``) on candidate ``rows``, under a
    packing scorer.

    Member by member, the pick is the best-scoring fitting row (first of equals); a placement
    only raises that row's score, so the next member goes there again while it fits, and
    once it no longer fits (usage only grows) the pick is the next row in the starting order.
    So each row of that order, best first, takes as many members as fit on it at once
    (``fill_alike``). The devices are then chosen member by member, as ``_allocate`` does.
    """
    first = ordered[0]
    ask = GpuAsk.of(first)
    result = Allocation()
    turns = fill_alike(view, first.requests, ask, policy, rows, len(ordered))
    start = 0
    for row, count in turns:
        node = view.nodes[row]
        pods = ordered[start : start + count]
        if ask.count:
            result.devices.update(
                zip((p.uid for p in pods), devices_in_turn(view, row, ask, count), strict=True)
            )
        result.placed.update(dict.fromkeys((p.uid for p in pods), node.name))
        start += count
    result.unplaced = list(ordered[start:])
    return result


def fill_alike(
    view: NodeView,
    requests: Resources,
    ask: GpuAsk,
    policy: Scorer,
    rows: np.ndarray,
    limit: int,
) -> list[tuple[int, int]]:
    """Where up to ``limit`` alike members (``requests``, whole-GPU or no ``ask``) go on
    candidate ``rows`` under a packing scorer, placed one after another: ``(row, how many)``
    in the order they are taken, at most ``limit`` in all (fewer: no more fit).

    The rows that fit one member, best score first (first of equals first), each taking as
    many as fit on it (``min(free // request)`` over the resources asked, and
    ``idle devices // count``): what member-by-member placement gives (see ``_fill``). The
    first ``k`` members of such a fill are where ``k`` members alone would go, so gangs of
    alike members placed one after another in the same rows take consecutive stretches of it.
    """
    if not len(rows) or limit <= 0:
        return []
    need = vector(requests)
    free, ok, idle = _fit_rows(view, need, ask, rows)
    scores = policy.score(view, rows, requests)
    at = np.flatnonzero(ok)
    at = at[np.argsort(-scores[at], kind="stable")]  # best first, first of equals first
    room = _room(free, idle, need, ask, at, limit)
    ends = np.cumsum(room)
    stop = int(np.searchsorted(ends, limit))  # the last row used
    out = []
    left = limit
    for row, count in zip(rows[at[: stop + 1]].tolist(), room[: stop + 1].tolist(), strict=True):
        count = min(count, left)
        out.append((row, count))
        left -= count
    return out


def _fit_rows(
    view: NodeView, need: np.ndarray, ask: GpuAsk, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """For ``fill_alike``'s candidate ``rows``: what is free on each, whether one member
    fits there, and (GPU asks) how many whole GPUs are idle there."""
    free = view.allocatable[rows] - view.used[rows]
    ok, idle = _one_fits(free, view.gpu_free[rows] if ask.count else None, need, ask)
    return free, ok, idle


def _one_fits(
    free: np.ndarray, gpu_free: np.ndarray | None, need: np.ndarray, ask: GpuAsk
) -> tuple[np.ndarray, np.ndarray | None]:
    """Whether one member fits on each row of ``free``, and (GPU asks: ``gpu_free`` of those
    rows) how many whole GPUs are idle there."""
    ok = rows_all(free >= need)
    idle = None
    if ask.count and gpu_free is not None:
        idle = (gpu_free == MILLI).sum(axis=1)
        ok &= idle >= ask.count
    return ok, idle


def _room(
    free: np.ndarray,
    idle: np.ndarray | None,
    need: np.ndarray,
    ask: GpuAsk,
    at: np.ndarray,
    limit: int,
) -> np.ndarray:
    """How many alike members each of the fitting candidates ``at`` takes at once (at most
    ``limit``): ``min(free // request)`` over the resources asked, and idle GPUs // count."""
    room = np.full(len(at), limit, dtype=np.int64)
    for column in np.flatnonzero(need > 0).tolist():  # a few columns: no row reduction
        room = np.minimum(room, free[at, column] // need[column])
    if idle is not None:
        room = np.minimum(room, idle[at] // ask.count)
    return room


class AlikeFit:
    """Whether ``allocate(view, members, strategy=...)`` places every member, for many views
    of one node table, without placing them: exact for members ``allocate`` places alike
    (``_fill``: one requests, GPU ask and constraint, whole GPUs or none, a packing
    scorer). ``fill_alike`` places them all exactly when the rows that fit one member
    take ``limit`` of them together, each as many as fit on it at once (``_room``); so no
    score or sort is needed, the count is a sum over rows (a view that differs in a few rows
    differs in those rows' terms alone), and (room only grows as pods go) the answer only
    turns true as a view frees room. Built by ``of``, which answers None for members placed
    otherwise."""

    __slots__ = ("_ask", "_eligible", "_limit", "_need", "_rows", "_table")

    def __init__(self, view: NodeView, first: Pod, limit: int) -> None:
        self._table = view.table
        self._eligible = eligible(view, first)
        self._rows = np.flatnonzero(self._eligible)
        self._need = vector(first.requests)
        self._ask = GpuAsk.of(first)
        self._limit = limit

    @staticmethod
    def of(view: NodeView, members: Sequence[Pod], strategy: str) -> AlikeFit | None:
        """The fit test of ``members`` on views like ``view`` (None: not placed alike)."""
        ordered = _ordered(members)
        if not ordered or not scorer(strategy).packs or not _alike(ordered, None):
            return None
        return AlikeFit(view, ordered[0], len(ordered))

    @property
    def limit(self) -> int:
        """How many members there are: they all fit when ``room`` reaches it."""
        return self._limit

    def room(self, view: NodeView) -> int:
        """How many members the rows of ``view`` take together, each row at most ``limit``
        (``view``: of the same node table as the view given to ``of``)."""
        if view.table is not self._table:
            raise ValueError("AlikeFit: a view of another node table")
        return self._sum(view.allocatable, view.used, view.gpu_free, self._rows)

    def room_of(self, rows: np.ndarray, used: np.ndarray, gpu_free: np.ndarray) -> int:
        """``room``'s terms for rows ``rows`` alone (ascending, no repeats), with ``used``
        and ``gpu_free`` their rows of the view in question."""
        mine = self._eligible[rows]
        return self._sum(self._table.allocatable[rows[mine]], used[mine], gpu_free[mine], None)

    def rooms_of(self, rows: np.ndarray, used: np.ndarray, gpu_free: np.ndarray) -> np.ndarray:
        """``room_of(rows, used[i], gpu_free[i])`` for each ``i`` (the same arithmetic, row by
        row, for many views at once)."""
        mine = self._eligible[rows]
        allocatable, used, gpu_free = (
            self._table.allocatable[rows[mine]],
            used[:, mine],
            gpu_free[:, mine],
        )
        free = allocatable - used
        ok = (free >= self._need).all(axis=2)
        room = np.full(ok.shape, self._limit, dtype=np.int64)
        for column in np.flatnonzero(self._need > 0).tolist():
            room = np.minimum(room, free[:, :, column] // self._need[column])
        if self._ask.count:
            idle = (gpu_free == MILLI).sum(axis=2)
            ok &= idle >= self._ask.count
            room = np.minimum(room, idle // self._ask.count)
        totals: np.ndarray = np.where(ok, room, 0).sum(axis=1)
        return totals

    def fits(self, view: NodeView) -> bool:
        """``allocate(view, members, strategy=...).complete``."""
        return self.room(view) >= self._limit

    def _sum(self, allocatable: np.ndarray, used: np.ndarray, gpu_free: np.ndarray,
             rows: np.ndarray | None) -> int:  # fmt: skip
        if rows is not None:
            if len(rows) == len(allocatable):  # every row: no copies
                rows = None
            else:
                allocatable, used, gpu_free = allocatable[rows], used[rows], gpu_free[rows]
        if not len(allocatable):
            return 0
        free = allocatable - used
        ok, idle = _one_fits(free, gpu_free, self._need, self._ask)
        at = np.flatnonzero(ok)
        return int(_room(free, idle, self._need, self._ask, at, self._limit).sum())


#: Rows beyond this many differing: ``placed_alike`` does not look closer.
FEW_ROWS = 64


def placed_alike(
    old: NodeView, new: NodeView, members: Sequence[Pod], allocation: Allocation, strategy: str
) -> bool:
    """Whether ``allocate(new, members, strategy=strategy)`` gives ``allocation``, which
    ``allocate(old, ...)`` gave, told from the rows where the views differ: for members
    placed alike and all placed (``_fill``), when none of those rows was used and none that
    fits one member now comes before the last row used in the fill's order (best score
    first, then row). The rows used and their order are then the same, and so are the
    devices (each row's own). False: not known so (allocate again)."""
    ordered = _ordered(members)
    policy = scorer(strategy)
    if old.table is not new.table or not allocation.complete or not ordered:
        return False
    if not policy.packs or not _alike(ordered, None):
        return False
    differ = (old.used != new.used).any(axis=1) | (old.gpu_free != new.gpu_free).any(axis=1)
    changed = np.flatnonzero(differ)
    if not len(changed):
        return True
    index = new.index
    used = np.unique(np.asarray([index[n] for n in allocation.placed.values()], np.intp))
    if len(changed) > FEW_ROWS or np.isin(changed, used).any():
        return False
    first = ordered[0]
    changed = changed[eligible(new, first)[changed]]
    _, ok, _ = _fit_rows(new, vector(first.requests), GpuAsk.of(first), changed)
    fitting = changed[ok]
    if not len(fitting):
        return True
    scores = policy.score(new, used, first.requests)
    low = scores.min()
    last = int(used[scores == low].max())  # the last row used, in the fill's order
    theirs = policy.score(new, fitting, first.requests)
    return bool(((theirs < low) | ((theirs == low) & (fitting > last))).all())


def fits_all(view: NodeView, members: Sequence[Pod], strategy: str) -> bool:
    """``allocate(view, members, strategy=strategy).complete``, told without placing the
    members when they are alike (``AlikeFit``)."""
    fit = AlikeFit.of(view, members, strategy)
    if fit is not None:
        return fit.fits(view)
    return allocate(view, members, strategy=strategy).complete


def devices_in_turn(
    view: NodeView, row: int, ask: GpuAsk, count: int
) -> tuple[tuple[int, ...], ...]:
    """The default GPU devices of ``count`` members of whole-GPU ``ask`` placed on ``row``
    one after another (each takes its devices before the next chooses); they must fit."""
    node = view.nodes[row]
    free = view.gpu_free[row, : device_count(node)].tolist()
    turns = default_choices(node, free, ask, count)
    assert turns is not None  # the room said so
    return turns


#: Unsigned integer types as wide as a row of 1, 2, 4 or 8 booleans.
_ROW_TYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def rows_all(cells: np.ndarray) -> np.ndarray:
    """``cells.all(axis=1)`` for a C-contiguous boolean array; a row of a few booleans read
    as one integer (all true: every byte 1), several times quicker than the reduction."""
    width = cells.shape[1]
    kind = _ROW_TYPES.get(width)
    if kind is None or not cells.flags.c_contiguous or cells.dtype != np.bool_:
        return np.asarray(cells.all(axis=1))
    ones = int.from_bytes(b"\x01" * width, "little")
    return np.asarray(cells.view(kind).reshape(-1) == ones)


class _Candidates:
    """The rows alike members may use, whether each fits now and its score there."""

    def __init__(self, rows: np.ndarray, requests: Resources, ask: GpuAsk, seen: int) -> None:
        self.rows = rows
        self.requests = requests
        self.need = np.asarray(requests, dtype=np.int64)
        self.wants = self.need.tolist()
        self.ask = ask
        self.ok = np.zeros(len(rows), dtype=bool)
        self.scores = np.zeros(len(rows), dtype=np.float64)
        self.seen = seen  # how many of the touched rows are judged already
        #: positions whose score is a lower bound (``refit``): judged again with the next rows
        self.stale: list[int] = []

    def judge(
        self,
        working: NodeView,
        gpu_free: np.ndarray,
        chosen: np.ndarray,
        policy: Scorer,
        at: np.ndarray,
    ) -> None:
        """Judge the candidates at positions ``at`` again, on the current usage."""
        rows = self.rows[at]
        ok = ((working.allocatable[rows] - working.used[rows]) >= self.need).all(axis=1)
        if self.ask.count:
            ok &= fits_mask(gpu_free[rows], self.ask)
        self.ok[at] = ok
        if len(rows):
            score = policy.score(working, rows, self.requests)
            self.scores[at] = score + _LOCALITY * chosen[rows]

    def catch_up(
        self,
        working: NodeView,
        gpu_free: np.ndarray,
        chosen: np.ndarray,
        policy: Scorer,
        touched: list[int],
    ) -> None:
        """Judge again the rows placed on since the last call."""
        if self.seen == len(touched):
            return
        changed = np.unique(np.asarray(touched[self.seen :], dtype=np.int64))
        self.seen = len(touched)
        at = np.searchsorted(self.rows, changed)
        inside = at < len(self.rows)
        at, changed = at[inside], changed[inside]
        at = at[self.rows[at] == changed]  # changed rows that are candidates here
        if self.stale:
            # Other rows' scores may rise now: the kept lower bound no longer decides alone.
            at = np.union1d(at, np.asarray(self.stale, dtype=np.int64))
            self.stale = []
        if len(at):
            self.judge(working, gpu_free, chosen, policy, at)

    def refit(self, working: NodeView, gpu_free: np.ndarray, row: int, seen: int) -> None:
        """Judge again only whether ``row`` (just placed on, the last touched, the first of
        the best) still fits, keeping its score: under a packing scorer a lower bound of the
        real one, which still makes it the pick while no other row changes (``catch_up``
        judges it fully once one does)."""
        at = int(np.searchsorted(self.rows, row))
        if at < len(self.rows) and self.rows[at] == row:
            # One row: plain Python on its few numbers is cheaper than numpy calls.
            room = zip(
                working.allocatable[row].tolist(),
                working.used[row].tolist(),
                self.wants,
                strict=True,
            )
            fits = all(a - u >= n for a, u, n in room)
            if fits and self.ask.count:
                fits = gpu_fits(gpu_free[row].tolist(), self.ask)
            self.ok[at] = fits
            if fits:
                self.stale.append(at)
        self.seen = seen

    def best(self) -> int | None:
        """The best-scoring row that fits (the first of equals), or None."""
        if not self.ok.any():
            return None
        return int(self.rows[int(np.argmax(np.where(self.ok, self.scores, -np.inf)))])


def why_unplaced(view: NodeView, allocation: Allocation, total: int) -> str:
    """``"12 of 16 members placeable; needs 2 more nodes with 8 free nvidia.com/gpu"``."""
    placed = total - len(allocation.unplaced)
    head = f"{placed} of {total} members placeable"
    groups = Counter(p.requests for p in allocation.unplaced)
    parts = [_need(view, request, count) for request, count in groups.items()]
    return head + "; " + "; ".join(parts) if parts else head


def _need(view: NodeView, request: Resources, count: int) -> str:
    if request.gpu > 0:
        per_node = int(max(view.allocatable[:, 0].max(initial=0) // request.gpu, 1))
        nodes = math.ceil(count / per_node)
        free = request.gpu * min(count, per_node) // 1000
        noun = "node" if nodes == 1 else "nodes"
        return f"needs {nodes} more {noun} with {free} free nvidia.com/gpu"
    best = view.allocatable - view.used
    row = int(np.argmax(best[:, 1])) if len(best) else 0
    what = shortfall(request, best[row]) if len(best) else "no nodes"
    return f"{count} more member(s) each {what or 'blocked by node constraints'}"


class FitBound:
    """A quick, vectorized test that ``members`` cannot all fit on a view, for searches that
    try many views of one cluster (``possible`` False: ``allocate`` would not place them all;
    True promises nothing). Each group of alike members must find room, counted per node as
    how many such members the node's free resources and whole free GPUs could take."""

    def __init__(self, view: NodeView, members: Sequence[Pod]) -> None:
        groups: Counter[tuple[Resources, GpuAsk, Constraint]] = Counter()
        first: dict[tuple[Resources, GpuAsk, Constraint], Pod] = {}
        for pod in members:
            key = (pod.requests, GpuAsk.of(pod), constraint_of(pod))
            groups[key] += 1
            first.setdefault(key, pod)
        self._need = np.sum([np.asarray(p.requests, np.int64) for p in members], axis=0)
        self._groups = [
            (np.asarray(key[0], np.int64), key[1], eligible(view, first[key]), count)
            for key, count in groups.items()
        ]

    def possible(self, view: NodeView) -> bool:
        """False if the members certainly do not all fit on ``view``."""
        free = np.maximum(view.allocatable - view.used, 0)
        if (free.sum(axis=0) < self._need).any():
            return False
        whole: np.ndarray | None = None
        for need, ask, mask, count in self._groups:
            positive = need > 0
            if not positive.any():
                continue
            room = (free[mask][:, positive] // need[positive]).min(axis=1)
            if ask.count and ask.milli == MILLI:
                if whole is None:
                    whole = (view.gpu_free == MILLI).sum(axis=1)
                room = np.minimum(room, whole[mask] // ask.count)
            if int(room.sum()) < count:
                return False
        return True
