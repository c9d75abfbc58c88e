"""Recording: the plans written where the next leader finds them, and carried on from there.

What a leader decided must survive it (``records`` says what is written where and in which
format). ``Recorder.to_record`` says which planned members to write each plan's record on
now, and the record a Binding carries (``record_of``); the head-of-line hold rides on the
Lease (``hold_record``). A replica that loses its leadership forgets its plans (``reset``);
one that takes over carries on from the records before it decides anything (``restore``).
"""

from __future__ import annotations

from app.core.cycle.evictions import evictions_for, victims_left
from app.core.cycle.memos import QueueNames
from app.core.cycle.nudges import Nudges
from app.core.cycle.planbook import PlanBook, PlannerSettings
from app.core.cycle.plans import Plan
from app.core.cycle.records import HoldRecord, PlanRecord, encode_hold, encode_plan, record_text
from app.core.model.labels import GANG_GATE, PLAN_RECORD
from app.core.model.values import Pod
from app.core.state.statement import Hold, Reserve, Statement
from app.core.state.view import Snapshot


class Recorder:
    """Writes plans where the next leader finds them, and carries on from what it finds;
    thread-safe (the plan book's lock)."""

    def __init__(
        self, book: PlanBook, settings: PlannerSettings, nudges: Nudges, queue_names: QueueNames
    ) -> None:
        """``nudges`` learns of the members a record write nudges; ``queue_names`` is the
        cycle's memo of each pod's queue (a restored plan's queue)."""
        self._book = book
        self._cache = book.cache
        self._settings = settings
        self._nudges = nudges
        self._queue_names = queue_names

    def to_record(self) -> list[tuple[Pod, str]]:
        """Planned members (not holding a node) to write the plan record on now, with the
        text to write (``muster.io/plan``); marks them written. The write updates the pod,
        so it also makes kube-scheduler retry the member now: members of a plan whose
        victims are gone count as nudged.

        A preemptor's plan is written on every member before anything is evicted for it
        (``recorded_first``). Any other plan is written on the members kube-scheduler has
        already tried (filter saw them, or their ``PodScheduled`` is ``False``): they wait in
        its unschedulable queue and need the write as a nudge anyway. A member it never
        tried is in its active queue and comes to filter by itself, so it is not written
        on, unless no member carries the plan yet: then the first one does, as one record
        is enough for the next leader to carry the plan on (``plans_from``). In a burst of
        shuffled gangs this keeps about three in four of these patches off the API server.
        """
        with self._book.lock:
            snapshot = self._cache.snapshot()
            out = []
            for plan in self._book.plans.values():
                text = record_text(plan, self._settings.clock, self._settings.wall)
                waiting = bool(plan.victims) and victims_left(self._cache, plan) > 0
                carried = any(plan.recorded.get(u) == text for u in plan.members)
                tried: list[Pod] = []
                untried: list[Pod] = []
                for uid in plan.members:
                    pod = snapshot.pods.get(uid)
                    if (
                        pod is None
                        or snapshot.holds_node(pod)
                        or text
                        in (
                            plan.recorded.get(uid),
                            plan.skipped.get(uid),
                        )
                    ):
                        continue
                    gated = GANG_GATE in pod.gates  # a gate must be removed (``to_nudge``)
                    if not waiting and not gated:
                        plan.nudged.add(uid)
                        self._nudges.nudged(uid)
                    if plan.victims or (
                        not gated and (pod.unschedulable or self._nudges.was_asked(uid))
                    ):
                        tried.append(pod)
                    else:
                        untried.append(pod)
                if not carried and not tried and untried:
                    tried.append(untried.pop(0))
                for pod in tried:
                    plan.recorded[pod.uid] = text
                    out.append((pod, text))
                for pod in untried:
                    plan.skipped[pod.uid] = text
            return out

    def unrecorded(self, pod: Pod) -> None:
        """Writing ``pod``'s plan record failed: write it again next time."""
        with self._book.lock:
            for plan in self._book.plans.values():
                if pod.uid in plan.members:
                    plan.recorded.pop(pod.uid, None)
                    plan.skipped.pop(pod.uid, None)
                    plan.nudged.discard(pod.uid)

    def record_of(self, uid: str, gang: str) -> str | None:
        """The plan record a Binding of member ``uid`` of ``gang`` carries (None: no plan)."""
        with self._book.lock:
            plan = self._book.plans.get(gang)
            if plan is None or uid not in plan.members:
                return None
            return record_text(plan, self._settings.clock, self._settings.wall)

    def hold_record(self) -> str:
        """The record text of the head-of-line hold in force (``muster.io/hold``)."""
        return encode_hold(*self._cache.holds)

    def reset(self) -> None:
        """Forget every plan, reservation, hold and queued eviction (leadership lost: the
        next leader decides from the records)."""
        with self._book.lock:
            self._book.clear()

    def restore(self, records: dict[str, PlanRecord], hold: HoldRecord | None) -> list[str]:
        """Carry on from the records (``records.plans_from``, the Lease's hold) before
        deciding anything new: each plan whose core members still exist takes its recorded
        nodes and GPU devices again (all or none, re-checked by the cache; a plan that no
        longer fits is dropped and its gang planned anew), victims not yet evicted are queued
        for eviction again, and the hold is put back. Returns what it did, one line each."""
        with self._book.lock:
            self._book.clear()
            now, wall = self._settings.clock(), self._settings.wall()
            snapshot = self._cache.snapshot()
            statement = Statement(base=snapshot.generation)
            plans: dict[str, Plan] = {}
            notes: list[str] = []
            for gang, record in sorted(records.items()):
                members = [snapshot.pods.get(u) for u in record.members]
                if all(p is None or p.terminal or snapshot.holds_node(p) for p in members):
                    continue  # fulfilled (or gone): nothing to carry on
                plan = self._restored(record, snapshot, now, wall)
                if plan is None:
                    notes.append(f"{gang}: plan {record.id} is over; planned anew")
                    continue
                pending = {
                    uid: node
                    for uid, node in plan.members.items()
                    if not snapshot.holds_node(snapshot.pods[uid])
                }
                force = bool(plan.victims) and victims_left(self._cache, plan) > 0
                statement.ops.append(Reserve(gang, pending, dict(plan.devices), force))
                plans[gang] = plan
            if hold is not None and hold.owner not in plans:
                statement.ops.append(Hold(hold.owner, hold.holds, hold.until))
            applied = self._cache.apply(statement)
            for i, status in applied.refused.items():
                op = statement.ops[i]
                assert isinstance(op, Reserve)
                del plans[op.gang]
                notes.append(f"{op.gang}: recorded room is gone ({status}); planned anew")
            for gang, plan in plans.items():
                victims = evictions_for(plan, snapshot)
                if victims is not None:
                    self._book.evictions.append(victims)
                notes.append(
                    f"{gang}: plan {plan.id} carried on ({len(plan.members)} members"
                    + (f", {len(victims.units)} victim units to evict" if victims else "")
                    + ")"
                )
            self._book.plans = plans
            if hold is not None and hold.owner not in plans:
                notes.append(f"{hold.owner}: head-of-line hold on {', '.join(sorted(hold.holds))}")
            return notes

    def _restored(
        self, record: PlanRecord, snapshot: Snapshot, now: float, wall: float
    ) -> Plan | None:
        """The live plan for ``record`` (None: a core member is gone, or it expired before
        any core member bound)."""
        pods = snapshot.pods
        config = self._settings.queues.config
        live = {u for u in record.members if u in pods and not pods[u].terminal}
        if not record.core <= live:
            return None
        started = any(snapshot.holds_node(pods[u]) for u in record.core)
        expires = now + (record.expires - wall)
        expires_at = record.expires
        if expires <= now:
            if not started:
                return None
            # Part of the core is bound: the rest must follow, give it a full TTL again.
            expires, expires_at = now + self._settings.plan_ttl, wall + self._settings.plan_ttl
        plan = Plan(
            gang=record.gang,
            members={u: n for u, n in record.members.items() if u in live},
            core=record.core,
            min_member=record.min_member,
            created=now,
            expires=expires,
            released=started,
            victims=record.victims,
            devices={u: d for u, d in record.devices.items() if u in live},
            id=record.id,
            expires_at=expires_at,
            queue=min({self._queue_names.of(pods[u], config) for u in live})
            or config.default_queue,
        )
        text = encode_plan(plan, expires_at)
        plan.recorded = {u: text for u in live if pods[u].annotations.get(PLAN_RECORD) == text}
        return plan
