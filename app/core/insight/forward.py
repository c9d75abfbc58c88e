"""Playing the cluster forward for explain's ETA: running pods end at their expected ends
(``actions.backfill.Ending``), and gangs ahead in line occupy room from their own start for
their runtime (``Occupant``). ``earliest`` finds when a job first fits.

Room only grows while the set of occupants in force is unchanged, so the timeline is cut at
each occupant's start and end, and inside each piece the first release count that lets the job
fit is found by bisection (a vectorized bound rules most counts out without an allocation).
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import cast

import numpy as np

from app.core.actions.allocate import AlikeFit, Allocation, FitBound, allocate, placed_alike
from app.core.actions.backfill import Ending
from app.core.gpu.ask import GpuAsk, take
from app.core.gpu.ledger import device_count
from app.core.model.values import Pod
from app.core.state.view import NodeView


@dataclass(frozen=True, slots=True)
class Occupant:
    """A gang expected to hold room from ``since`` until ``until``: its members, where each
    goes and on which GPU devices."""

    since: float
    until: float
    members: tuple[Pod, ...]
    allocation: Allocation


def occupied(view: NodeView, occupants: Sequence[Occupant]) -> NodeView:
    """``view`` with ``occupants``' members placed."""
    return _placed(view, _load(view, occupants))


#: What occupants add to a view (see ``_load``).
_Load = tuple[np.ndarray, np.ndarray] | None


def _load(view: NodeView, occupants: Sequence[Occupant]) -> _Load:
    """What ``occupants`` add to ``view``'s used rows and take from its devices' free milli
    (negative), found once for many views of the same nodes (None: no occupants). Each pod
    adds its requests and takes its devices' milli whatever the others did (``take`` as
    reported), so the load of several occupants is the sum of each one's."""
    if not occupants:
        return None
    used, gpu_free = np.zeros_like(view.used), np.zeros_like(view.gpu_free)
    for occupant in occupants:
        for pod in occupant.members:
            node = occupant.allocation.placed.get(pod.uid)
            if node is None:
                continue
            row = view.index[node]
            used[row] += np.asarray(pod.requests, np.int64)
            devices = occupant.allocation.devices.get(pod.uid, ())
            if devices:
                count = device_count(view.nodes[row])
                take(gpu_free[row, :count], GpuAsk.of(pod), devices, reported=True)
    return used, gpu_free


def _placed(view: NodeView, load: _Load) -> NodeView:
    """``view`` with ``load`` (``_load``) placed."""
    if load is None:
        return view
    return replace(view, used=view.used + load[0], gpu_free=np.maximum(view.gpu_free + load[1], 0))


class FreedViews:
    """``view`` with the first ``k`` pods of ``order`` gone, found once per ``k``: every
    ``earliest`` on the same view and order (a line of gangs played forward, then the job
    behind them) probes many of the same counts."""

    def __init__(self, view: NodeView, order: Ending) -> None:
        self.view = view
        self.order = order
        self._found: dict[int, NodeView] = {}
        self._placed: dict[tuple[object, ...], tuple[tuple[Occupant, ...], NodeView]] = {}
        self._loads: dict[int, tuple[Occupant, _Load]] = {}

    def __call__(self, k: int) -> NodeView:
        """``order.releases.freed(view, k)``."""
        found = self._found.get(k)
        if found is None:
            found = self._found[k] = self.order.releases.freed(self.view, k)
        return found

    def placed(self, k: int, occupants: tuple[Occupant, ...]) -> NodeView:
        """``occupied(self(k), occupants)``, found once per count and occupants (gangs of a
        line played forward probe the same counts with the same occupants)."""
        key = (k, tuple(map(id, occupants)))
        hit = self._placed.get(key)
        if hit is None or not all(map(operator.is_, hit[0], occupants)):
            hit = self._placed[key] = (occupants, _placed(self(k), self._load(occupants)))
        return hit[1]

    def _load(self, occupants: tuple[Occupant, ...]) -> _Load:
        """``_load(view, occupants)``: the sum of each occupant's own (what they add and
        take adds up, see ``_load``), each found once."""
        if not occupants:
            return None
        parts = []
        for occupant in occupants:
            hit = self._loads.get(id(occupant))
            if hit is None or hit[0] is not occupant:
                hit = self._loads[id(occupant)] = (occupant, _load(self.view, [occupant]))
            assert hit[1] is not None
            parts.append(hit[1])
        if len(parts) == 1:
            return parts[0]
        used, gpu_free = parts[0][0].copy(), parts[0][1].copy()
        for part in parts[1:]:
            used += part[0]
            gpu_free += part[1]
        return used, gpu_free


def earliest(
    view: NodeView,
    order: Ending,
    members: Sequence[Pod],
    occupants: Sequence[Occupant],
    *,
    now: float,
    strategy: str,
    freed_views: FreedViews | None = None,
    hints: dict[Hashable, object] | None = None,
) -> tuple[float, Allocation] | None:
    """When ``members`` first fit together, and where (None: never, as far as is known).
    ``freed_views``: freed views of ``view`` and ``order`` found by earlier calls;
    ``hints``: where earlier calls found their counts and placed the members (kept by the
    caller from one call to the next, any contents: a count is only tried first, and a
    placement is taken only where ``placed_alike`` shows allocating again gives it; the
    answer is the same)."""
    if freed_views is None or freed_views.view is not view or freed_views.order is not order:
        freed_views = FreedViews(view, order)
    alike = AlikeFit.of(view, members, strategy)
    if alike is not None:
        return _earliest_alike(view, order, members, occupants, alike, now=now,
                               strategy=strategy, freed_views=freed_views,
                               hints=hints)  # fmt: skip
    return _earliest_any(members, occupants, now, strategy, freed_views)


def _earliest_any(
    members: Sequence[Pod],
    occupants: Sequence[Occupant],
    now: float,
    strategy: str,
    freed_views: FreedViews,
) -> tuple[float, Allocation] | None:
    """``earliest`` for any members (on ``freed_views``' view and order): the quick bound
    rules counts out, allocations decide."""
    view, order = freed_views.view, freed_views.order
    bound = FitBound(view, members)
    ends = order.ends
    cuts = sorted({t for o in occupants for t in (o.since, o.until) if t > now})
    starts = [now, *cuts]
    for i, start in enumerate(starts):
        stop = starts[i + 1] if i + 1 < len(starts) else None
        active = [o for o in occupants if o.since <= start < o.until]
        load = _load(view, active)
        low = bisect.bisect_right(ends, start)
        high = len(ends) if stop is None else max(bisect.bisect_left(ends, stop), low)

        tried: dict[int, Allocation | None] = {}

        def possible(k: int) -> bool:
            return bound.possible(_placed(freed_views(k), load))  # noqa: B023

        def attempt(k: int) -> Allocation | None:
            if k in tried:  # noqa: B023
                return tried[k]  # noqa: B023
            freed = _placed(freed_views(k), load)  # noqa: B023
            placed = None
            if bound.possible(freed):
                found = allocate(freed, members, strategy=strategy)
                placed = found if found.complete else None
            tried[k] = placed  # noqa: B023
            return placed

        if attempt(high) is None:
            continue
        # The smallest count the quick bound allows (no allocation), then allocations.
        lo = _first(possible, low, high)
        found = attempt(lo)
        if found is None:
            lo = bisect.bisect_left(
                range(high),
                True,
                lo=lo + 1,
                key=lambda k: attempt(k) is not None,  # noqa: B023
            )
            found = attempt(lo)
        assert found is not None
        return (start if lo == low else max(start, ends[lo - 1])), found
    return None


def _earliest_alike(
    view: NodeView,
    order: Ending,
    members: Sequence[Pod],
    occupants: Sequence[Occupant],
    alike: AlikeFit,
    *,
    now: float,
    strategy: str,
    freed_views: FreedViews,
    hints: dict[Hashable, object] | None,
) -> tuple[float, Allocation] | None:
    """``earliest`` for members ``allocate`` places alike (``AlikeFit``): the same answer,
    with one allocation. Inside a piece of the timeline room only grows with the release
    count, so whether they all fit turns true once and stays so (``AlikeFit``); the first
    count where it holds, found with the exact test instead of the quick bound and then
    allocations, is the count ``earliest`` finds, wherever the search starts (``hints``)."""
    ends = order.ends
    cuts = sorted({t for o in occupants for t in (o.since, o.until) if t > now})
    starts = [now, *cuts]
    shape = (members[0].requests, GpuAsk.of(members[0]), len(members), len(occupants))
    for i, start in enumerate(starts):
        stop = starts[i + 1] if i + 1 < len(starts) else None
        active = tuple(o for o in occupants if o.since <= start < o.until)
        low = bisect.bisect_right(ends, start)
        high = len(ends) if stop is None else max(bisect.bisect_left(ends, stop), low)

        tried: dict[int, bool] = {}

        def fits(k: int) -> bool:
            found = tried.get(k)  # noqa: B023
            if found is None:
                found = tried[k] = alike.fits(freed_views.placed(k, active))  # noqa: B023
            return found

        guess = None if hints is None else hints.get((shape, i))
        if not isinstance(guess, int) or not low <= guess < high:
            guess = None
        if guess is not None and fits(guess):  # so they fit at ``high`` too
            lo = _first_near(fits, low, high, guess)
        elif fits(high):
            lo = _first(fits, low if guess is None else guess + 1, high)
        else:
            continue
        where = freed_views.placed(lo, active)
        found = None
        if hints is not None:
            if len(hints) > HINTS:
                hints.clear()
            hints[(shape, i)] = lo
            # Where the members went last time, on a view that differs in a few rows.
            last = _placements(hints).pop((shape, i, members[0].uid), None)
            if (
                last is not None
                and _same_objects(last.members, members)
                and placed_alike(last.view, where, members, last.allocation, strategy)
            ):
                found = last.allocation.copy()
        if found is None:
            found = allocate(where, members, strategy=strategy)
        assert found.complete
        if hints is not None:
            kept = _placements(hints)
            if len(kept) >= PLACEMENTS:  # each holds a view: the oldest quarter goes
                for key in list(kept)[: PLACEMENTS // 4]:
                    del kept[key]
            kept[(shape, i, members[0].uid)] = Placed(tuple(members), where, found.copy())
        return (start if lo == low else max(start, ends[lo - 1])), found
    return None


@dataclass(frozen=True, slots=True)
class Placed:
    """Where ``members`` went on ``view`` (kept in ``earliest``'s hints)."""

    members: tuple[Pod, ...]
    view: NodeView
    allocation: Allocation


def _same_objects(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


#: How many counts ``earliest``'s ``hints`` keep at most.
HINTS = 4096
#: How many placements (each with the view it was found on) they keep at most.
PLACEMENTS = 64


def _placements(hints: dict[Hashable, object]) -> dict[Hashable, Placed]:
    """The placements kept in ``hints`` (used last, last)."""
    found = hints.get(Placed)
    if not isinstance(found, dict):
        found = hints[Placed] = {}
    return cast(dict[Hashable, Placed], found)


def _first_near(holds: Callable[[int], bool], low: int, high: int, guess: int | None) -> int:
    """``_first(holds, low, high)``, for ``holds`` false up to some count and true from there
    on, searched from ``guess`` outwards (1, 2, 4... counts away) when it is in the range:
    where a like search found its count before, so often one or two probes."""
    if guess is None or not low <= guess < high:
        return _first(holds, low, high)
    if not holds(guess):
        return _first(holds, guess + 1, high)
    top, step = guess, 1  # holds(top)
    while top > low:
        k = max(top - step, low)
        if not holds(k):
            return bisect.bisect_left(range(top), True, lo=k + 1, key=holds)
        top, step = k, step * 2
    return low


def _first(holds: Callable[[int], bool], low: int, high: int) -> int:
    """The first ``k`` in ``[low, high)`` where ``holds``, else ``high``, for ``holds`` false
    up to some count and true from there on (as ``bisect_left`` finds it). It gallops up from
    ``low`` (1, 2, 4... counts on) before it bisects: the count is most often ``low`` itself
    (the job fits as soon as the piece of timeline begins), found then with one probe."""
    below, k, step = low, low, 1
    while k < high:
        if holds(k):
            return bisect.bisect_left(range(k), True, lo=below, key=holds)
        below = k + 1
        k, step = below + step, step * 2
    return bisect.bisect_left(range(high), True, lo=below, key=holds)
