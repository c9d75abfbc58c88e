"""The plan book: what the planning cycles decided, shared by the planner's parts.

The planner (``planner``) is a cycle and the parts that answer from its results: filter's
verdicts (``verdicts``), the records written for the next leader (``recording``), the
evictions carried out for plans (``evictions``), the nudges and conflicts the loop sends
(``nudges``) and the looks readers take (``looks``). None of them reads another's
attributes: they share one ``PlanBook`` (the live plans, what each waiting gang was told,
the head-of-line hold, the evictions queued, what the last cycle saw) and its one lock, and
they plan by one ``PlannerSettings``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from app.core.actions.backfill import Reservation
from app.core.cycle.plans import Eviction, Plan, Reason, Why
from app.core.cycle.session import Session
from app.core.policies.interfaces import GangOrder, Protection
from app.core.state.cache import ClusterCache
from app.core.state.journal import Journal, Kind
from app.core.state.queuefile import QueueFile
from app.core.state.statement import Applied, Reserve


@dataclass(frozen=True)
class PlannerSettings:
    """What the planner's parts plan by: the ``Planner``'s parameters, as it resolved them."""

    queues: QueueFile
    #: How long running work is protected from preemption (``MinRuntime`` by default).
    protection: Protection
    #: The order of gangs within a queue (``LongestFirst`` by default).
    order: GangOrder
    scheduler_name: str
    #: The scorer that places members (``app.core.policies.registry``).
    strategy: str
    #: Seconds a plan lives if its gang does not start.
    plan_ttl: float
    #: Seconds a running pod that declares no runtime is expected to run.
    default_runtime: float
    #: Whether a gang may take room from running work at all.
    preemption: bool
    #: Topology label keys, broadest first (``app.core.state.domains``).
    topology_keys: tuple[str, ...]
    #: What plans' times count on (monotonic seconds).
    clock: Callable[[], float]
    #: The epoch time pods' start times and records are compared with.
    wall: Callable[[], float]


class PlanBook:
    """The plans and what goes with them, behind one lock (cycles are short).

    Readers of ``plans`` and ``reasons`` do not take the lock: a cycle decides on a session's
    copies and swaps ``plans`` whole when it commits (``commit``), so a reader sees the plans
    before or after a cycle, never half of one, and never waits for a cycle to end. Whatever
    changes the book otherwise holds ``lock`` (the methods below that do not take it say so).
    """

    def __init__(self, cache: ClusterCache, journal: Journal | None = None) -> None:
        """``journal`` (if any) records plans that end without their gang starting."""
        self.cache = cache
        self.journal = journal
        self.lock = threading.RLock()
        #: gang -> its live plan (replaced whole when a session is committed)
        self.plans: dict[str, Plan] = {}
        #: gang -> what the planner last said about it (``Why`` and text)
        self.reasons: dict[str, Reason] = {}
        #: The head-of-line reservation made by the last cycle, if any.
        self.head: Reservation | None = None
        #: Evictions decided and not carried out yet (the loop takes them).
        self.evictions: list[Eviction] = []
        #: The cache generation the last cycle planned on (-1: the next cycle plans anyway).
        self.generation = -1
        #: gang -> how many members the last cycle saw
        self.seen: dict[str, int] = {}

    @contextmanager
    def held(self, wait: bool, timeout: float = 0.0) -> Iterator[bool]:
        """The lock for the block, if ``wait``, or it is free now (or within ``timeout``
        seconds); yields whether."""
        if wait:
            held = self.lock.acquire()
        elif timeout > 0:
            held = self.lock.acquire(timeout=timeout)
        else:
            held = self.lock.acquire(blocking=False)
        try:
            yield held
        finally:
            if held:
                self.lock.release()

    def commit(self, session: Session) -> Applied:
        """Apply ``session`` to the cache and adopt its plans; a reservation that no longer
        holds drops what it was for (a new plan, or the elastic members it placed). The
        caller holds the lock."""
        applied = session.commit()
        plans = session.plans
        members = session.snapshot.gang_members
        last, plan = "", plans.get("")
        for uid, devices in applied.devices.items():
            gang = members.get(uid, "")
            if gang != last:  # (a gang's members come one after another)
                last, plan = gang, plans.get(gang)
            if plan is not None and uid in plan.members:
                plan.devices[uid] = devices
        dropped = set()
        for i, status in applied.refused.items():
            op = session.statement.ops[i]
            assert isinstance(op, Reserve)
            plan = plans.get(op.gang)
            if plan is None:
                continue
            if plan.core & op.placements.keys():
                del plans[op.gang]
                dropped.add(op.gang)
                self.cache.unreserve(plan.members)
                self.reasons[op.gang] = Reason(
                    Why.REFUSED, f"plan could not be reserved ({status}); retrying"
                )
            else:
                plan.drop(set(op.placements))
                if not plan.members:
                    del plans[op.gang]
                self.reasons[op.gang] = Reason(
                    Why.ELASTIC, "elastic members wait for free capacity"
                )
        self.plans = plans
        self.evictions.extend(e for e in session.evictions if e.preemptor not in dropped)
        return applied

    def drop(
        self, gang: str, reason: str, session: Session | None = None, kind: Why = Why.RELEASED
    ) -> None:
        """Drop ``gang``'s plan and its room: in ``session`` during a cycle, else at once;
        ``reason`` (of ``kind``) is what the gang is told. The caller holds the lock."""
        plans = self.plans if session is None else session.plans
        plan = plans.pop(gang, None)
        if plan is not None:
            if session is None:
                self.cache.unreserve(plan.members)
            else:
                session.release(plan.members)
        self.reasons[gang] = Reason(kind, reason)

    def note(self, kind: Kind, gang: str, message: str) -> None:
        """Journal a plan that ended without its gang starting."""
        if self.journal is not None:
            self.journal.record(kind, gang, message=message)

    def clear(self) -> None:
        """Forget every plan, reservation, hold and queued eviction. The caller holds the
        lock."""
        for plan in self.plans.values():
            self.cache.unreserve(plan.members)
        self.plans = {}
        self.evictions = []
        self.head = None
        self.reasons.clear()
        self.cache.set_holds("", {}, 0.0)
        self.generation = -1

    def release(self, gang: str, reason: str) -> None:
        """Drop ``gang``'s plan and its reservations (bind timeout, rollback)."""
        with self.lock:
            self.drop(gang, reason)

    def mark_released(self, gang: str) -> None:
        """The gang's core has reached bind together: later members may bind at once."""
        with self.lock:
            plan = self.plans.get(gang)
            if plan is not None:
                plan.released = True
