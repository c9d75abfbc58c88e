"""reclaim: a queue below its guaranteed share takes room back from queues that borrow.

Only work in queues holding more than their guarantee is a candidate, newest first (elastic
members before whole gangs), and never so much that a lending queue would fall below its own
guarantee. Guarantees outrank priority here: that is what a guarantee means.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.core.actions.allocate import Allocation
from app.core.actions.victims import Unit, cheapest_set
from app.core.model.values import Pod
from app.core.state.queueusage import QueueUsage
from app.core.state.view import Snapshot


def reclaimable(usage: QueueUsage, units: Sequence[Unit], claimant: str) -> list[Unit]:
    """Units that may be taken back, newest first, keeping every queue at its guarantee."""
    taken: dict[str, np.ndarray] = {}
    out = []
    for unit in sorted(units, key=lambda u: (not u.elastic, -u.started, u.key)):
        if unit.queue is None or unit.queue == claimant:
            continue
        queue = usage.config.queues.get(unit.queue)
        if queue is None:
            continue
        amount = sum((np.asarray(p.requests, np.int64) for p in unit.pods), np.zeros(4, np.int64))
        after = usage.of(unit.queue) - taken.get(unit.queue, 0) - amount
        guaranteed = np.asarray(queue.guaranteed, np.int64)
        if ((after < guaranteed) & (guaranteed > 0)).any() or not (
            usage.of(unit.queue) > guaranteed
        ).any():
            continue
        taken[unit.queue] = taken.get(unit.queue, 0) + amount
        out.append(unit)
    return out


def victims_for(
    snapshot: Snapshot,
    members: Sequence[Pod],
    usage: QueueUsage,
    claimant: str,
    units: Sequence[Unit],
    *,
    strategy: str = "binpack",
) -> tuple[list[Unit], Allocation] | None:
    """Borrowed work whose eviction lets ``members`` of queue ``claimant`` start."""
    return cheapest_set(snapshot, members, reclaimable(usage, units, claimant), strategy=strategy)
