"""The choice between preempting and reclaiming: which whole units of running work to evict
so that a gang that does not fit can start.

Strictly lower-priority work gives way first (``actions.preempt``). Failing that, a queue below
its guaranteed share takes back what other queues borrowed from it (``actions.reclaim``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.core.actions import preempt, reclaim
from app.core.actions.allocate import Allocation
from app.core.actions.victims import Unit
from app.core.model.queues import QueueConfig
from app.core.model.values import Pod
from app.core.state.journal import Kind
from app.core.state.queueusage import QueueUsage, demand_of
from app.core.state.view import Snapshot


@dataclass(frozen=True, slots=True)
class Room:
    """Units to evict, where the gang goes once they are gone, and what the victims are told;
    ``kind``: preemption or reclaim."""

    victims: list[Unit]
    allocation: Allocation
    why: str
    kind: Kind = Kind.PREEMPTION


def may_take_room(config: QueueConfig, queue: str, lowest: int | None, priority: int) -> bool:
    """Whether looking for victims can help at all: some running work has a lower priority
    than ``priority`` (``lowest``: the lowest running priority), or ``queue`` has a guarantee."""
    limits = config.queues.get(queue)
    reclaimable = limits is not None and bool(np.asarray(limits.guaranteed).any())
    return reclaimable or (lowest is not None and lowest < priority)


def make_room(
    snapshot: Snapshot,
    gang: str,
    core: Sequence[Pod],
    units: Sequence[Unit],
    *,
    usage: QueueUsage,
    queue: str,
    config: QueueConfig,
    now: float,
    strategy: str,
) -> Room | None:
    """Room for ``gang``'s ``core`` members made by evicting some of ``units`` (None: none).

    ``snapshot.view`` must not count head-of-line holds: evicted room goes to the preemptor.
    """
    priority = max(p.priority for p in core)
    found = preempt.victims_for(snapshot, core, priority, units, now=now, strategy=strategy)
    if found is not None:
        return Room(*found, f"preempted by gang {gang} (priority {priority})")
    if queue not in config.queues:
        return None
    guaranteed = np.asarray(config.queues[queue].guaranteed, np.int64)
    within = (usage.of(queue) + demand_of(core) <= guaranteed) | (guaranteed == 0)
    if not guaranteed.any() or not within.all():
        return None
    found = reclaim.victims_for(snapshot, core, usage, queue, units, strategy=strategy)
    if found is None:
        return None
    why = f"reclaimed by queue {queue} for gang {gang} (within its guaranteed share)"
    return Room(*found, why, Kind.RECLAIM)
