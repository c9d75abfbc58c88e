"""Looks: the planner's state as readers see it (explain, what-if, the census, /debug).

A look is an ``Outlook``: a planning session on the cache as it is now that is never
committed, with the plans, reasons and head-of-line hold the last cycle finished with. A look
never waits for a running cycle: it reads what that cycle's predecessor published instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple, overload

from app.core.actions.backfill import Reservation
from app.core.cycle.describe import describe
from app.core.cycle.memos import GangMemo, QueueNames, SnapshotMemo, gangs_of
from app.core.cycle.outlook import Outlook
from app.core.cycle.planbook import PlanBook, PlannerSettings
from app.core.cycle.plans import Plan, Reason
from app.core.cycle.session import Session
from app.core.model.gang import Gang
from app.core.state.diff import changed_pods
from app.core.state.queueusage import measure
from app.core.state.view import Snapshot

#: Seconds after a look (explain, what-if, the census) during which each cycle publishes what
#: the next look reads should it come while a cycle runs (see ``Planner.look``).
LOOKED_RECENTLY = 30.0


class _Published(NamedTuple):
    """Plans, reasons and head-of-line hold as a cycle left them (copies: read without the
    planner's lock, never changed)."""

    plans: dict[str, Plan]
    reasons: dict[str, Reason]
    head: Reservation | None


def _same_gangs(old: Snapshot, new: Snapshot) -> bool:
    """Whether ``gangs_of`` gives the same gangs on ``new`` as on ``old``: no pod that is a
    gang member in either changed (its object, whether it holds a node, or its gang), so
    every gang has the very same members, bound as before (``changed_pods``)."""
    if old is new:
        return True
    changed = changed_pods(old, new)
    if changed is None:
        return False
    before, after = old.gang_members, new.gang_members
    return not any(uid in before or uid in after for uid in changed)


@dataclass
class _LookMemos:
    """The memos of looks taken while a cycle runs (the cycle's own are its thread's)."""

    queue_names: QueueNames
    gangs: GangMemo = field(default_factory=GangMemo)
    #: The gangs of the last snapshot any look read.
    last: tuple[Snapshot, dict[str, Gang]] | None = None


class Looks:
    """Takes looks at the planner's state for readers; thread-safe (the plan book's lock)."""

    def __init__(
        self,
        book: PlanBook,
        settings: PlannerSettings,
        gang_memo: GangMemo,
        queue_names: QueueNames,
    ) -> None:
        """``gang_memo`` and ``queue_names`` are the cycle's memos: a look that holds the lock
        uses them (no cycle runs meanwhile)."""
        self._book = book
        self._cache = book.cache
        self._settings = settings
        self._gang_memo = gang_memo
        self._queue_names = queue_names
        # What explain and what-if keep while the cache is unchanged (``Outlook.kept``).
        self._insight_memo = SnapshotMemo()
        # What a look during a cycle reads instead of waiting (``look``): published at the end
        # of each cycle while someone has looked in the last ``LOOKED_RECENTLY`` seconds.
        self._published: _Published | None = None
        self._looked = -math.inf
        self._looking = _LookMemos(queue_names=QueueNames(settings.scheduler_name))

    @overload
    def look(self) -> Outlook: ...
    @overload
    def look(self, *, wait: bool) -> Outlook | None: ...
    def look(self, *, wait: bool = True) -> Outlook | None:
        """The planner's state now, on a session that is never committed (explain, what-if).

        It never waits for a running cycle: the cache is read as it is now, with the plans,
        reasons and head-of-line hold the last cycle finished with (``_Published``).
        ``wait=False``: ``None`` instead, while another thread runs a cycle.
        """
        if wait:
            self._looked = self._settings.clock()
        with self._book.held(False) as held:
            if held:
                return self._outlook(self._publish(), self._gang_memo, self._queue_names)
        if not wait:
            return None
        published = self._published
        if published is None:  # nobody has looked yet: wait this once
            with self._book.lock:
                return self._outlook(self._publish(), self._gang_memo, self._queue_names)
        return self._outlook(published, self._looking.gangs, self._looking.queue_names)

    def publish_if_looked(self) -> None:
        """What a cycle does as it ends (under the lock): publish what the next look reads,
        should it come while a cycle runs, if someone looked in the last ``LOOKED_RECENTLY``
        seconds."""
        if self._settings.clock() - self._looked < LOOKED_RECENTLY:
            self._publish()

    def _publish(self) -> _Published:
        """What a look during a cycle reads (called under the lock)."""
        self._published = _Published(
            {k: p.copy() for k, p in self._book.plans.items()},
            dict(self._book.reasons),
            self._book.head,
        )
        return self._published

    def _outlook(
        self, published: _Published, gang_memo: GangMemo, queue_names: QueueNames
    ) -> Outlook:
        session = Session(self._cache, published.plans)
        last = self._looking.last
        if last is not None and _same_gangs(last[0], session.snapshot):
            # No gang member changed: the same gangs (an Outlook only reads them).
            gangs = last[1]
            self._looking.last = (session.snapshot, gangs)
        else:
            gangs = gangs_of(session.snapshot, gang_memo)
            self._looking.last = (session.snapshot, gangs)
        config = self._settings.queues.config
        usage = measure(
            session.queue_usage(),
            session.snapshot.view.allocatable.sum(axis=0),
            config,
            self._settings.scheduler_name,
        )
        return Outlook(
            session=session,
            gangs=gangs,
            plans=published.plans,
            reasons=published.reasons,
            head=published.head,
            config=config,
            usage=usage,
            now=self._settings.wall(),
            strategy=self._settings.strategy,
            topology_keys=self._settings.topology_keys,
            default_runtime=self._settings.default_runtime,
            scheduler_name=self._settings.scheduler_name,
            preemption=self._settings.preemption,
            protection=self._settings.protection,
            order=self._settings.order,
            queue_names=queue_names,
            kept=self._insight_memo,
        )

    def describe(self) -> list[dict[str, Any]]:
        """Every gang with its state, members seen/bound, plan, age and current reason."""
        with self._book.lock:
            gangs = gangs_of(self._cache.snapshot())
            return describe(gangs, self._book.plans, self._book.reasons, self._settings.wall())
