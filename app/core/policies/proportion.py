"""Quota admission: limits on every queue of the path, guarantees and borrowing at the leaf.

A demand is admitted into queue ``q`` when

* every queue from ``q`` up to the root stays within its ``limit``, and
* whatever ``q`` would then use above its ``guaranteed`` share is borrowable: ``q`` allows
  borrowing, and all borrowing across the tree (everyone's use above their guarantee) still
  fits in the unguaranteed capacity plus what other queues lend of their idle guarantee
  (each within its ``lendingLimit``). When borrowing fails only because the cluster is full,
  that is left to placement to report as a capacity problem.

Guarantees and borrowing are accounted on queues that hold pods (usually the leaves); a
parent's guarantee bounds what its children may be guaranteed together, and its limit caps
them all.
"""

from __future__ import annotations

import numpy as np

from app.core.model.quantity import format_milli
from app.core.model.queues import UNLIMITED, Queue, QueueConfig
from app.core.model.status import SUCCESS, Status
from app.core.model.values import RESOURCE_NAMES
from app.core.state.queueusage import QueueUsage


def _fmt(k: int, amount: int) -> str:
    return format_milli(RESOURCE_NAMES[k], int(amount))


def holders(usage: QueueUsage) -> list[Queue]:
    """Queues whose guarantee is accounted for borrowing: those without children."""
    parents = {q.parent for q in usage.config.queues.values()}
    return [q for q in usage.config.queues.values() if q.name not in parents]


def borrowable(
    usage: QueueUsage, extra: dict[str, np.ndarray] | None = None, *, lending_limits: bool = True
) -> np.ndarray:
    """Room left for borrowing per resource (negative: the tree already over-borrows).

    Without ``lending_limits`` this is plain capacity left over (every idle guarantee lent).
    """
    extra = extra or {}
    top_guaranteed = sum(
        (np.asarray(q.guaranteed, np.int64) for q in usage.config.children("")),
        np.zeros(4, np.int64),
    )
    pool = np.maximum(usage.capacity - top_guaranteed, 0)
    borrowed = np.zeros(4, np.int64)
    for q in holders(usage):
        held = usage.of(q.name) + extra.get(q.name, 0)
        g = np.asarray(q.guaranteed, np.int64)
        borrowed += np.maximum(held - g, 0)
        idle = np.maximum(g - held, 0)
        pool += np.minimum(np.asarray(q.lending_limit, np.int64), idle) if lending_limits else idle
    return pool - borrowed


def admit(usage: QueueUsage, queue: str, demand: np.ndarray) -> Status:
    """Whether ``demand`` may start in ``queue`` now; if not, why (naming queue and resource):
    ``"queue research: nvidia.com/gpu 32/32 at limit (needs 8)"``.

    ``UNRESOLVABLE`` for a queue that does not exist, ``UNSCHEDULABLE`` for a limit or
    guarantee that usage must fall below first.
    """
    config = usage.config
    if queue not in config.queues:
        return Status.unresolvable(f"queue {queue} does not exist")
    if _admits_all(config):
        return SUCCESS
    for q in config.path(queue):
        held = usage.of(q.name)
        for k in range(4):
            limit = q.limit[k]
            if limit < UNLIMITED and held[k] + demand[k] > limit:
                return Status.unschedulable(
                    f"queue {q.name}: {RESOURCE_NAMES[k]} {_fmt(k, held[k])}/{_fmt(k, limit)} "
                    f"at limit (needs {_fmt(k, demand[k])})"
                )
    leaf = config.queues[queue]
    held = usage.of(queue)
    over = held + demand - np.asarray(leaf.guaranteed, np.int64)
    if not (over > 0).any():
        return SUCCESS
    if not leaf.borrowing:
        k = int(np.argmax(over > 0))
        return Status.unschedulable(
            f"queue {queue}: {RESOURCE_NAMES[k]} would exceed its guaranteed "
            f"{_fmt(k, leaf.guaranteed[k])} and the queue does not borrow"
        )
    room = borrowable(usage, {queue: demand})
    # Short only because the cluster is full is a capacity matter (placement says so); quota
    # blocks when other queues' lending limits keep their idle guarantees from being borrowed.
    short = (room < 0) & (borrowable(usage, {queue: demand}, lending_limits=False) >= 0)
    if short.any():
        k = int(np.argmax(short))
        before = borrowable(usage)[k]
        return Status.unschedulable(
            f"queue {queue}: {RESOURCE_NAMES[k]} above its guaranteed "
            f"{_fmt(k, leaf.guaranteed[k])} and only {_fmt(k, max(before, 0))} is lent by "
            f"other queues (needs {_fmt(k, demand[k])})"
        )
    return SUCCESS


_last_open: tuple[QueueConfig, bool] | None = None


def admits_anything(config: QueueConfig, queue: str) -> bool:
    """Whether ``admit`` lets any demand into ``queue`` whatever the usage: the queue exists
    and ``config`` has no limit or guarantee anywhere (so callers need not measure usage)."""
    return queue in config.queues and _admits_all(config)


def _admits_all(config: QueueConfig) -> bool:
    """Whether ``config`` admits any demand in any of its queues: no queue has a limit or a
    guarantee, and every queue borrows (as ``OPEN``, the configuration without a queue file).
    ``admit`` then finds nothing above a limit, and the borrowable room left is the capacity
    left, which only placement can fall short of. Remembered for the last configuration."""
    global _last_open
    last = _last_open
    if last is not None and last[0] is config:
        return last[1]
    found = all(
        q.borrowing and not any(q.guaranteed) and all(x >= UNLIMITED for x in q.limit)
        for q in config.queues.values()
    )
    _last_open = (config, found)
    return found


def ledger(usage: QueueUsage) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per queue holding pods: (borrowed, lent) per resource.

    What the tree borrows beyond the unguaranteed capacity is counted as lent by the queues
    with idle guarantees, in proportion to what each may lend.
    """
    queues = holders(usage)
    top = sum(
        (np.asarray(q.guaranteed, np.int64) for q in usage.config.children("")),
        np.zeros(4, np.int64),
    )
    unguaranteed = np.maximum(usage.capacity - top, 0)
    borrowed = {q.name: np.maximum(usage.of(q.name) - np.asarray(q.guaranteed), 0) for q in queues}
    lendable = {
        q.name: np.minimum(
            np.asarray(q.lending_limit, np.int64),
            np.maximum(np.asarray(q.guaranteed, np.int64) - usage.of(q.name), 0),
        )
        for q in queues
    }
    total_borrowed = sum(borrowed.values(), np.zeros(4, np.int64))
    from_lenders = np.maximum(total_borrowed - unguaranteed, 0)
    total_lendable = sum(lendable.values(), np.zeros(4, np.int64))
    fraction = np.where(
        total_lendable > 0, from_lenders / np.where(total_lendable > 0, total_lendable, 1), 0
    )
    return {
        q.name: (
            borrowed[q.name],
            np.minimum(lendable[q.name] * fraction, lendable[q.name]).astype(np.int64),
        )
        for q in queues
    }


class Proportion:
    """A ``QuotaCheck``: guarantees, limits and borrowing of the queue tree (``admit``)."""

    name = "proportion"

    def admit(self, usage: QueueUsage, queue: str, demand: np.ndarray) -> Status:
        """``admit``: whether ``demand`` may start in ``queue`` now."""
        return admit(usage, queue, demand)


POLICY = Proportion()
