"""Playing the cluster forward for explain's ETA: running pods end at their expected ends
(``actions.backfill.Ending``), and gangs ahead in line occupy room from their own start for
their runtime (``Occupant``). ``earliest`` finds when a job first fits.

Room only grows while the set of occupants in force is unchanged, so the timeline is cut at
each occupant's start and end, and inside each piece the first release count that lets the job
fit is found by bisection (a vectorized bound rules most counts out without an allocation).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from app.core.actions.allocate import Allocation, FitBound, allocate
from app.core.actions.backfill import Ending
from app.core.gpu.ask import GpuAsk, take
from app.core.gpu.ledger import device_count
from app.core.model.values import Pod
from app.core.state.cache import NodeView


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


def _load(view: NodeView, occupants: Sequence[Occupant]) -> tuple[np.ndarray, np.ndarray] | None:
    """What ``occupants`` add to ``view``'s used rows and take from its devices' free milli
    (negative), found once for many views of the same nodes (None: no occupants)."""
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


def _placed(view: NodeView, load: tuple[np.ndarray, np.ndarray] | None) -> NodeView:
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

    def __call__(self, k: int) -> NodeView:
        """``order.releases.freed(view, k)``."""
        found = self._found.get(k)
        if found is None:
            found = self._found[k] = self.order.releases.freed(self.view, k)
        return found


def earliest(
    view: NodeView,
    order: Ending,
    members: Sequence[Pod],
    occupants: Sequence[Occupant],
    *,
    now: float,
    strategy: str,
    freed_views: FreedViews | None = None,
) -> tuple[float, Allocation] | None:
    """When ``members`` first fit together, and where (None: never, as far as is known).
    ``freed_views``: freed views of ``view`` and ``order`` found by earlier calls."""
    if freed_views is None or freed_views.view is not view or freed_views.order is not order:
        freed_views = FreedViews(view, order)
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
