"""backfill: a reservation for the head-of-line gang, and who may use reserved room meanwhile.

When the gang first in line cannot start, waiting for random capacity would let a stream of
smaller work starve it. Instead it gets a *reservation*: the nodes expected to free soonest
(running pods end at their start time plus ``muster.io/expected-runtime``, else a default),
chosen by placing the gang as if the earliest-ending pods were gone. Until then that room is
held: only work that declares a runtime ending before the reservation's expected start may use
it (backfill), so the big gang starts on time and the holes it leaves meanwhile still get used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.core.actions.allocate import Allocation, FitBound, allocate
from app.core.model.runtime import declared_runtime, expected_end
from app.core.model.values import Pod, Resources
from app.core.state.cache import Releases, Snapshot, releases


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


def ending(
    snapshot: Snapshot,
    *,
    now: float,
    default_runtime: float,
    within: np.ndarray | None = None,
    planned_start_now: bool = False,
) -> Ending:
    """``reserve_for``'s order of the pods on ``snapshot.view`` (``within``: those rows)."""
    view = snapshot.view
    running = []
    timeless = True
    for uid, pod in snapshot.pods.items():
        node = snapshot.placement.get(uid)
        counted = snapshot.holds_node(pod) or (planned_start_now and uid in snapshot.reserved)
        if not node or pod.terminal or not counted or node not in view.index:
            continue
        if within is not None and not within[view.index[node]]:
            continue
        started = pod.started or snapshot.bound_at.get(uid)
        if started is None:
            started, timeless = now, False
        running.append((expected_end(pod, started, default_runtime), pod))
    running.sort(key=lambda r: r[0])
    gone = releases(snapshot, (pod for _, pod in running), view)
    return Ending([end for end, _ in running], gone, timeless)


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
) -> Reservation | None:
    """Where and when ``members`` could start once the earliest-ending pods are gone.

    ``snapshot.view`` must not count existing holds. ``within``: a row mask the gang must stay
    in (one topology domain). ``planned_start_now``: pods reserved by plans count as starting
    now (so their room frees after their runtime too). ``order``: ``ending`` of the same
    arguments, if the caller has it. ``None`` if the gang would not fit even with every
    running pod (there) gone.
    """
    view = snapshot.view
    allowed = None if within is None else {p.uid: within for p in members}
    if order is None:
        order = ending(snapshot, now=now, default_runtime=default_runtime, within=within,
                       planned_start_now=planned_start_now)  # fmt: skip
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
    runtimes = [declared_runtime(p) for p in pods]
    return all(r is not None and now + r <= reservation_start for r in runtimes)
