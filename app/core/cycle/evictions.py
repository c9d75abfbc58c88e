"""Evictions: running work that gives way to a gang, and carrying that out.

A gang that does not fit may take room from running work (``makeroom``): whole lower-priority
gangs, or borrowed work when a queue below its guarantee needs its room back. The cycle asks
``Evictions.preempt`` for such a plan; the evictions decided are queued in the plan book
(``PlanBook.evictions``), and the loop carries them out (``take_evictions``) once the
preemptor's plan is written where the next leader finds it (``recorded_first``). An eviction
a PodDisruptionBudget refuses sends the preemptor back to be planned again, with other victims
(``eviction_refused``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from app.core.actions.victims import Unit, running_units
from app.core.cycle.makeroom import make_room, may_take_room
from app.core.cycle.memos import gangs_of
from app.core.cycle.planbook import PlanBook, PlannerSettings
from app.core.cycle.plans import Eviction, Plan, Reason, Why
from app.core.cycle.records import record_text
from app.core.cycle.session import Session
from app.core.model.gang import Gang, gang_spec
from app.core.model.queues import QueueConfig
from app.core.model.values import Pod
from app.core.state.cache import ClusterCache
from app.core.state.journal import Kind
from app.core.state.queueusage import QueueUsage, demand_of, queue_name
from app.core.state.view import Snapshot


class Evictions:
    """Decides which running work gives way to a gang that does not fit, and keeps the
    evictions decided until the loop carries them out (``PlanBook.evictions``)."""

    def __init__(self, book: PlanBook, settings: PlannerSettings) -> None:
        self._book = book
        self._cache = book.cache
        self._settings = settings
        self._blocked: dict[str, float] = {}  # victim unit key -> until (a PDB refused it)
        self._lowest: tuple[int, int | None] | None = None
        self._units_memo: tuple[tuple[int, int, int, int], Snapshot, list[Unit]] | None = None

    def take_evictions(self) -> list[Eviction]:
        """The evictions decided since the last call (the loop carries them out)."""
        with self._book.lock:
            out, self._book.evictions = self._book.evictions, []
            return out

    def recorded_first(self, evictions: Sequence[Eviction]) -> list[Eviction]:
        """Those of ``evictions`` whose preemptor's plan is written on every member that does
        not hold its node yet (``to_record``): victims are evicted only once the room they
        free is promised where the next leader finds it. The others go back in the queue
        (and are dropped with their plan)."""
        with self._book.lock:
            out: list[Eviction] = []
            snapshot = self._cache.snapshot()
            for eviction in evictions:
                plan = self._book.plans.get(eviction.preemptor)
                if plan is None:
                    continue
                text = record_text(plan, self._settings.clock, self._settings.wall)
                recorded = all(
                    plan.recorded.get(uid) == text
                    or (uid in snapshot.pods and snapshot.holds_node(snapshot.pods[uid]))
                    for uid in plan.members
                )
                if recorded:
                    out.append(eviction)
                else:
                    self._book.evictions.append(eviction)
            return out

    def eviction_refused(self, eviction: Eviction, unit_key: str, why: str) -> None:
        """A PodDisruptionBudget (or the API) refused evicting ``unit_key``: leave that work
        alone for a while and plan the preemptor again, choosing other victims."""
        with self._book.lock:
            self._blocked[unit_key] = self._settings.wall() + 60.0
            reason = f"eviction of {unit_key} refused ({why})"
            self._book.drop(eviction.preemptor, reason)
            self._book.note(Kind.PLAN_RELEASED, eviction.preemptor, reason)

    def preempt(
        self,
        session: Session,
        gang: Gang,
        core: Sequence[Pod],
        queue: str,
        usage: QueueUsage,
        now: float,
    ) -> bool:
        """Plan ``gang`` onto room that evicting whole lower-priority gangs (or, for a queue
        below its guarantee, borrowed work) would free; queue those evictions."""
        if not self.may_preempt(session, max(p.priority for p in core), queue):
            return False
        config = self._settings.queues.config
        wall = self._settings.wall()
        self._blocked = {k: t for k, t in self._blocked.items() if t > wall}
        snapshot, all_units = self._running_units(session, config, wall)
        taken = {uid for plan in session.plans.values() for uid in plan.victims}
        units = [
            u
            for u in all_units
            if u.key not in self._blocked and not any(p.uid in taken for p in u.pods)
        ]
        room = make_room(
            snapshot,
            gang.key,
            core,
            units,
            usage=usage,
            queue=queue,
            config=config,
            now=wall,
            strategy=self._settings.strategy,
        )
        if room is None:
            return False
        uids = frozenset(p.uid for u in room.victims for p in u.pods)
        placed = room.allocation
        session.reserve(gang.key, placed.placed, placed.devices, force=True)
        usage.add(queue, demand_of(core))
        expires = now + (gang.timeout or self._settings.plan_ttl) + self._settings.plan_ttl
        plan = Plan.of(gang, placed.placed, now, expires, uids, queue)
        plan.devices.update(placed.devices)
        session.plans[gang.key] = plan
        names = ", ".join(sorted({u.key for u in room.victims}))
        self._book.reasons[gang.key] = Reason(
            Why.EVICTING, f"waiting for {len(uids)} evicted pods to leave ({names})"
        )
        session.evict(Eviction(gang.key, tuple(room.victims), room.why, room.kind, queue))
        return True

    def may_preempt(self, session: Session, priority: int, queue: str) -> bool:
        """Whether a gang's core of ``priority`` (in ``queue``) may take room from running
        work at all."""
        if not self._settings.preemption:
            return False
        lowest = self._lowest_running_priority(session)
        return may_take_room(self._settings.queues.config, queue, lowest, priority)

    def _lowest_running_priority(self, session: Session) -> int | None:
        """The lowest priority of any pod holding a node (``None``: none), once per cache
        generation: every gang that does not fit asks, and the answer rarely changes."""
        snapshot = session.snapshot
        if self._lowest is None or self._lowest[0] != snapshot.generation:
            held = [p.priority for p in snapshot.pods.values() if snapshot.holds_node(p)]
            self._lowest = (snapshot.generation, min(held, default=None))
        return self._lowest[1]

    def _running_units(
        self, session: Session, config: QueueConfig, wall: float
    ) -> tuple[Snapshot, list[Unit]]:
        """The session's snapshot (no holds) and its victim units, computed once per view and
        second (every gang that does not fit asks; protection by age changes by the second)."""
        key = (session.statement.base, session.version, int(wall), id(config))
        if self._units_memo is None or self._units_memo[0] != key:
            snapshot = replace(session.snapshot, view=session.backfill_view())
            units = running_units(
                snapshot,
                gangs_of(snapshot),
                lambda p: queue_name(p, config, self._settings.scheduler_name),
                now=wall,
                protection=self._settings.protection,
            )
            self._units_memo = (key, snapshot, units)
        return self._units_memo[1], self._units_memo[2]


def victims_left(cache: ClusterCache, plan: Plan) -> int:
    """How many of ``plan``'s victims are still there."""
    left = 0
    for uid in plan.victims:
        pod = cache.pod(uid)
        if pod is not None and not pod.terminal:
            left += 1
    return left


def evictions_for(plan: Plan, snapshot: Snapshot) -> Eviction | None:
    """The eviction of ``plan``'s victims still running (not evicted yet), by unit."""
    units: dict[str, list[Pod]] = {}
    for uid in sorted(plan.victims):
        pod = snapshot.pods.get(uid)
        if pod is None or pod.terminal or pod.deleting:
            continue
        spec = gang_spec(pod)
        units.setdefault(spec.key if spec else f"pod:{pod.key}", []).append(pod)
    if not units:
        return None
    return Eviction(
        plan.gang,
        tuple(
            Unit(key, None, tuple(pods), max(p.priority for p in pods), False, 0.0)
            for key, pods in units.items()
        ),
        f"preempted for gang {plan.gang} (eviction resumed by a new leader)",
    )
