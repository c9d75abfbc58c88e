"""preempt: make room for a gang by evicting whole units of lower-priority work.

Only units of strictly lower priority are candidates, so two gangs can never evict each other
in turn. Candidates are ordered to keep, in this order, the highest victim priority, the GPUs
evicted, the number of gangs hit and the work lost (running time) small — elastic members
before whole gangs at each priority — and ``cheapest_set`` picks the smallest set that makes
room, or nothing at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.core.actions.allocate import Allocation
from app.core.actions.victims import Unit, cheapest_set
from app.core.model.values import Pod
from app.core.state.view import Snapshot


def victims_for(
    snapshot: Snapshot,
    members: Sequence[Pod],
    priority: int,
    units: Sequence[Unit],
    *,
    now: float,
    strategy: str = "binpack",
) -> tuple[list[Unit], Allocation] | None:
    """Lower-priority units whose eviction lets ``members`` (at ``priority``) start."""
    candidates = sorted(
        (u for u in units if u.priority < priority),
        key=lambda u: (u.priority, not u.elastic, u.gpus, u.work_lost(now), u.key),
    )
    return cheapest_set(snapshot, members, candidates, strategy=strategy)
