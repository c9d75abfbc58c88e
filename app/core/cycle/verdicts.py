"""Verdicts: the answers filter (and the extender's other questions) get from the plans.

kube-scheduler asks about one pod at a time; the answer for a gang member is where its plan
puts it (``Verdicts.verdict``). A member no plan names yet makes filter plan on demand when
nothing else will soon: no loop drives cycles, its gang changed since the last cycle, or
room came back since then. It never waits for a cycle another thread is running: the member
is told to wait instead, and the loop nudges it once it is planned. The same plans answer
the bind path (``planned_devices``), a member whose planned node kube-scheduler filtered out
(``replan_member``), and pods scheduled on their own (``quota_check``, ``backfill_ok``,
``protected_for``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from app.core.actions.allocate import allocate
from app.core.actions.backfill import may_backfill
from app.core.cycle.evictions import victims_left
from app.core.cycle.nudges import Nudges
from app.core.cycle.planbook import PlanBook, PlannerSettings
from app.core.cycle.plans import Plan, Reason, Verdict, Why
from app.core.cycle.session import Session
from app.core.model.gang import gang_spec
from app.core.model.status import SUCCESS, Status
from app.core.model.values import Pod
from app.core.policies.proportion import admit, admits_anything
from app.core.state.domains import ask_of, tree_for
from app.core.state.journal import Kind
from app.core.state.queueusage import QueueUsage, demand_of, queue_name
from app.core.state.view import NodeView

#: Why a member waits when its gang has no plan and a cycle is running in another thread.
BUSY = "waiting for the planner (a planning cycle is under way)"
#: Why a member waits while this replica may not decide (not synced, or not the leader yet).
NOT_LEADING = "waiting for this replica to lead (not elected, or restoring recorded plans)"

#: Seconds filter waits for a running cycle when a node's room came back since the last one
#: (see ``Planner.verdict``); within issue 12's bound on a filter call's wait for a cycle.
FREED_WAIT = 0.005


class Planning(Protocol):
    """What filter's answers need of the planner."""

    @property
    def driven(self) -> bool:
        """Whether a loop runs cycles on every change (else filter plans on demand whenever
        a member has no plan)."""

    def cycle(self, *, force: bool = False) -> list[str]:
        """Plan every ready gang; returns the gangs that got a new plan."""

    def usage(self, pending: Sequence[Pod] = ()) -> QueueUsage:
        """What every queue holds now (plus the demand of ``pending``)."""


class Verdicts:
    """Answers from the plans, planning on demand through ``planner``; thread-safe (the plan
    book's lock, never waited for)."""

    def __init__(
        self,
        book: PlanBook,
        settings: PlannerSettings,
        planner: Planning,
        nudges: Nudges,
        leads: Callable[[], bool] | None = None,
    ) -> None:
        """``nudges`` learns which members reached filter; ``leads`` (if any) says whether
        this replica may decide (see ``Planner``)."""
        self._book = book
        self._cache = book.cache
        self._settings = settings
        self._planner = planner
        self._nudges = nudges
        self._leads = leads

    def plan(self, gang: str) -> Plan | None:
        """The live plan of ``gang``, if any (never waits for a running cycle)."""
        return self._book.plans.get(gang)

    def waiting(self, pod: Pod) -> bool:
        """Whether ``pod`` still waits: the cache knows it, it holds no node and its gang (if
        any) has no plan (never waits for a running cycle)."""
        now = self._cache.pod(pod.uid)
        if now is None or now.node_name or now.terminal:
            return False
        spec = gang_spec(now)
        return spec is None or spec.key not in self._book.plans

    def planned_devices(self, uid: str, gang: str) -> tuple[int, ...] | None:
        """The GPU devices planned for member ``uid`` of ``gang`` (None: no plan names any)."""
        plan = self._book.plans.get(gang)
        return None if plan is None else plan.devices.get(uid)

    def verdict(self, pod: Pod) -> Verdict:
        """Where ``pod`` should go per the plans, planning on demand if it has no plan yet.

        Never waits for a cycle another thread is running: a member no plan names yet is then
        told to wait (the running cycle, or the planner loop's next one, plans it, and the loop
        nudges planned members so kube-scheduler retries them at once).
        """
        spec = gang_spec(pod)
        if spec is None:
            return Verdict()
        self._nudges.asked(pod.uid)  # one dict write: no lock needed
        plan = self._book.plans.get(spec.key)
        due = False
        if (plan is None or pod.uid not in plan.members) and (
            not self._planner.driven or self._news_of(spec.key) or (due := self._due())
        ):
            short = self._short_of_members(spec.key, spec.min_member)
            if short:
                return Verdict(spec.key, "", f"gang {spec.key}: {short}")
            if self._leads is not None and not self._leads():
                return Verdict(spec.key, "", f"gang {spec.key}: {NOT_LEADING}")
            # Room came back: the loop's cycle that plans into it may be under way; a member
            # rejected now would wait out kube-scheduler's backoff, so wait a little for it.
            with self._book.held(False, FREED_WAIT if due else 0.0) as held:
                if not held:
                    # Not short now: a count of members told last is outdated.
                    return self._waits(spec.key, BUSY, outdated=Why.SHORT_OF_MEMBERS)
                self._planner.cycle()
            plan = self._book.plans.get(spec.key)
        if plan is not None and pod.uid in plan.members:
            if victims_left(self._cache, plan):
                return self._waits(spec.key, "waiting for evicted pods to leave")
            return Verdict(spec.key, plan.members[pod.uid])
        return self._waits(spec.key, "waiting for the planner")

    def _waits(self, gang: str, otherwise: str, outdated: Why | None = None) -> Verdict:
        """``gang``'s members wait: the planner's last reason, else (or if that reason is of
        the ``outdated`` kind) ``otherwise``."""
        told = self._book.reasons.get(gang)
        text = otherwise if told is None or told.why is outdated else told.text
        return Verdict(gang, "", f"gang {gang}: {text}")

    def _short_of_members(self, gang: str, minimum: int | None) -> str:
        """``"waiting for members: 3 of 8 exist"`` when ``gang`` has fewer members than the
        ``minimum`` all of them state (``""`` otherwise): no cycle could plan it now, so
        filter does not run one for it (the member that completes it does)."""
        if not minimum:
            return ""
        members = self._cache.gang_members_of(gang)
        if len(members) >= minimum:
            return ""
        for member in members:
            spec = gang_spec(member)
            if spec is None or spec.min_member != minimum or spec.problem or spec.notes:
                return ""  # a cycle says what is wrong with the gang
        return short_reason(len(members), minimum).text

    def _due(self) -> bool:
        """Whether a node's room was given back since the last cycle (a pod that held it
        went or finished).

        Then filter plans on demand too: kube-scheduler retries every waiting pod the moment
        a running pod goes, before the loop's next poll; a member rejected then, its gang
        planned a moment later, would wait out kube-scheduler's backoff (up to 2 s with the
        shipped profile). The first retried member pays for the cycle; the rest are answered
        from it. Other changes (pods arriving, binds) leave it to the loop, so a burst of new
        pods does not put a cycle in kube-scheduler's way per filter call."""
        return self._cache.freed_generation > self._book.generation

    def _news_of(self, gang: str) -> bool:
        """Whether ``gang`` gained or lost members since the last cycle looked at it.

        With a loop driving cycles (``driven``), only then does filter plan on demand: a
        member kube-scheduler merely tries again is answered from the last cycle (the loop
        cycles on every change and nudges the members it plans), so the retries of hundreds
        of waiting pods do not each pay for a cycle.
        """
        return len(self._cache.gang_members_of(gang)) != self._book.seen.get(gang, -1)

    def protected_for(self, pod: Pod) -> float:
        """Seconds ``pod``, running, is protected from preemption (see ``Protection``)."""
        queue = queue_name(pod, self._settings.queues.config, self._settings.scheduler_name)
        return self._settings.protection.seconds([pod], queue, gang=gang_spec(pod) is not None)

    def quota_check(self, pod: Pod) -> Status:
        """For a pod scheduled on its own: whether its queue admits it now (see ``admit``)."""
        config = self._settings.queues.config
        queue = queue_name(pod, config, self._settings.scheduler_name)
        if queue is None or admits_anything(config, queue):
            return SUCCESS  # usage is not measured: kube-scheduler waits for every filter
        return admit(self._planner.usage(), queue, demand_of([pod]))

    def backfill_ok(self, pod: Pod) -> bool:
        """Whether a pod scheduled on its own may use held room (it ends before it is due)."""
        owner, holds, until = self._cache.holds
        return bool(holds) and may_backfill([pod], self._settings.wall(), until)

    def replan_member(self, pod: Pod, candidates: Sequence[str]) -> Verdict:
        """Move a planned member onto one of ``candidates`` (kube-scheduler removed its node).

        If no candidate has room, the whole plan is released and the reason says so.
        """
        spec = gang_spec(pod)
        assert spec is not None
        with self._book.held(False) as held:  # never wait for a running cycle
            if not held:
                return Verdict(spec.key, "", f"gang {spec.key}: {BUSY}")
            plan = self._book.plans.get(spec.key)
            if plan is None or pod.uid not in plan.members:
                return self.verdict(pod)
            old = plan.members[pod.uid]
            session = Session(self._cache, self._book.plans)
            session.release([pod.uid])
            view = session.view()
            allowed = np.zeros(len(view.nodes), dtype=bool)
            for name in candidates:
                i = view.index.get(name)
                if i is not None:
                    allowed[i] = True
            allowed &= self._same_required_domain(view, spec.key, old)
            placed = allocate(
                view, [pod], strategy=self._settings.strategy, allowed={pod.uid: allowed}
            )
            node = placed.placed.get(pod.uid)
            if node:
                session.reserve(spec.key, {pod.uid: node}, placed.devices)
                moved = session.plans[spec.key]
                moved.members[pod.uid] = node
                moved.devices.pop(pod.uid, None)
                if not self._book.commit(session).refused:
                    return Verdict(spec.key, node)
            else:
                session.discard()
            why = f"planned node {old} was filtered out by kube-scheduler and no other node fits"
            self._book.drop(spec.key, why, kind=Why.FILTERED_OUT)
            self._book.note(Kind.PLAN_RELEASED, spec.key, why)
            return Verdict(spec.key, "", f"gang {spec.key}: {why}")

    def _same_required_domain(self, view: NodeView, gang: str, node: str) -> np.ndarray:
        """Rows a re-planned member of ``gang`` may move to: with ``topology-required``, only
        the domain (at that level) of its planned ``node``, where the rest of the plan is;
        otherwise every row."""
        everywhere = np.ones(len(view.nodes), dtype=bool)
        ask, _ = ask_of(self._cache.gang_members_of(gang))
        row = view.index.get(node)
        if ask is None or not ask.required or row is None:
            return everywhere
        tree = tree_for(view.table, self._settings.topology_keys)
        level = tree.level(ask.level)
        if level is None:
            return everywhere
        same: np.ndarray = tree.ids[level] == tree.ids[level, row]
        return same


def short_reason(members: int, minimum: int) -> Reason:
    """Why a gang with ``members`` of the ``minimum`` it needs waits."""
    return Reason(Why.SHORT_OF_MEMBERS, f"waiting for members: {members} of {minimum} exist")
