"""Weighted dominant-resource fairness across queues, hierarchically.

A queue's dominant share is its largest fraction of any cluster resource, divided by its
weight. Gangs are served from the queue path with the lowest shares, compared level by level
from the top of the tree (siblings compete by their own shares; within a queue, priority then
age decide). ``deserved`` computes each queue's fair amount by weighted water-filling.
"""

from __future__ import annotations

import numpy as np

from app.core.state.queueusage import QueueUsage


def dominant_share(usage: QueueUsage, queue: str) -> float:
    """``max_r(used_r / capacity_r) / weight``."""
    cap = np.where(usage.capacity > 0, usage.capacity, 1)
    share = float((usage.of(queue) / cap).max(initial=0.0))
    return share / usage.config.queues[queue].weight


def order_key(usage: QueueUsage, queue: str) -> tuple[float, ...]:
    """Sort key for a queue: dominant shares along its path, from the top level down."""
    return tuple(dominant_share(usage, q.name) for q in reversed(usage.config.path(queue)))


def deserved(usage: QueueUsage) -> dict[str, np.ndarray]:
    """Each queue's fair amount per resource.

    Capacity flows down the tree: at each level the parent's amount is split among children in
    proportion to weight, but each child gets at least its guarantee (as far as it asks) and
    never more than it asks for (used + pending) or its limit; what a child cannot use flows
    back to its siblings.
    """
    result: dict[str, np.ndarray] = {}
    _split(usage, "", usage.capacity.astype(np.float64), result)
    return result


def _split(usage: QueueUsage, parent: str, amount: np.ndarray, out: dict[str, np.ndarray]) -> None:
    kids = usage.config.children(parent)
    if not kids:
        return
    want = {
        q.name: np.minimum(
            (usage.of(q.name) + usage.pending.get(q.name, 0)).astype(np.float64),
            np.asarray(q.limit, np.float64),
        )
        for q in kids
    }
    share = {q.name: np.zeros(4) for q in kids}
    for k in range(4):
        left = amount[k]
        for q in kids:  # guarantees first
            give = min(q.guaranteed[k], want[q.name][k], left)
            share[q.name][k] = give
            left -= give
        active = [q for q in kids if share[q.name][k] < want[q.name][k] - 1e-9]
        while left > 1e-9 and active:
            total_w = sum(q.weight for q in active)
            spent = 0.0
            for q in list(active):
                give = min(left * q.weight / total_w, want[q.name][k] - share[q.name][k])
                share[q.name][k] += give
                spent += give
            left -= spent
            active = [q for q in active if share[q.name][k] < want[q.name][k] - 1e-9]
            if spent <= 1e-9:
                break
    for q in kids:
        out[q.name] = share[q.name]
        _split(usage, q.name, share[q.name], out)


class DominantResourceFairness:
    """A ``QueueOrder``: weighted dominant-resource fairness, hierarchically (``order_key``)."""

    name = "drf"

    def key(self, usage: QueueUsage, queue: str) -> tuple[float, ...]:
        """``order_key``: the queue furthest below its fair share goes first."""
        return order_key(usage, queue)


POLICY = DominantResourceFairness()
