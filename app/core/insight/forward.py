"""Playing the cluster forward for explain's ETA: running pods end at their expected ends
(``actions.backfill.Ending``), and gangs ahead in line occupy room from their own start for
their runtime (``Occupant``). ``earliest`` finds when a job first fits.

Room only grows while the set of occupants in force is unchanged, so the timeline is cut at
each occupant's start and end, and inside each piece the first release count that lets the job
fit is found by bisection (a vectorized bound rules most counts out without an allocation).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
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


def earliest(
    view: NodeView,
    order: Ending,
    members: Sequence[Pod],
    occupants: Sequence[Occupant],
    *,
    now: float,
    strategy: str,
) -> tuple[float, Allocation] | None:
    """When ``members`` first fit together, and where (None: never, as far as is known)."""
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

        def possible(k: int) -> bool:
            return bound.possible(_placed(order.releases.freed(view, k), load))  # noqa: B023

        def attempt(k: int) -> Allocation | None:
            freed = _placed(order.releases.freed(view, k), load)  # noqa: B023
            if not bound.possible(freed):
                return None
            placed = allocate(freed, members, strategy=strategy)
            return placed if placed.complete else None

        if attempt(high) is None:
            continue
        # The smallest count the quick bound allows (no allocation), then allocations.
        lo = bisect.bisect_left(range(high), True, lo=low, key=possible)
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
