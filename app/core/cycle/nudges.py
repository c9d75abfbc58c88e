"""Nudges and conflicts: what the loop tells kube-scheduler and the API server between cycles.

A planned member that kube-scheduler is not about to try again is nudged (its pod is
patched, so kube-scheduler retries it at once): ``to_nudge`` says which, and nudges again a
member whose nudge was lost (``RENUDGE``). Filter tells ``Nudges`` which members it saw
(``asked``), and writing a plan record counts as a nudge (``nudged``). Gangs whose members'
keys and group object disagree are reported once per member and object (``take_conflicts``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from app.core.cycle.evictions import victims_left
from app.core.cycle.planbook import PlanBook
from app.core.cycle.plans import Conflict
from app.core.model.gang import Gang
from app.core.model.values import Pod

#: Seconds after which a planned member that has not reached filter since its nudge is
#: nudged again (see ``Nudges.to_nudge``).
RENUDGE = 1.0
#: Members gone that ``Nudges`` may remember having seen asked before it forgets them.
_SLACK = 1024


class Nudges:
    """Which planned members to nudge, and which conflicts to report; thread-safe (the plan
    book's lock)."""

    def __init__(self, book: PlanBook, clock: Callable[[], float]) -> None:
        self._book = book
        self._cache = book.cache
        self._clock = clock
        #: member uid -> when it was last nudged / last reached filter (``to_nudge``)
        self._nudged_at: dict[str, float] = {}
        self._asked: dict[str, float] = {}
        # Gangs whose members' keys and group object disagree (last cycle), and what of that
        # has been reported: (pod uid or group ref, text).
        self._conflicted: list[Gang] = []
        self._reported: set[tuple[object, str]] = set()

    def asked(self, uid: str) -> None:
        """Member ``uid`` reached filter now (one dict write: no lock needed)."""
        self._asked[uid] = self._clock()

    def was_asked(self, uid: str) -> bool:
        """Whether filter has seen member ``uid`` (``asked``)."""
        return uid in self._asked

    def nudged(self, uid: str) -> None:
        """Member ``uid`` was nudged now (its plan record was written, see ``to_record``)."""
        self._nudged_at[uid] = self._clock()

    def saw(self, gangs: Iterable[Gang], members: Mapping[str, str]) -> None:
        """The gangs a cycle saw, and their ``members`` (uid -> gang): those whose keys and
        group object disagree are the ones ``take_conflicts`` reports; members gone are
        forgotten once they are most of what filter was seen asking about."""
        self._conflicted = [g for g in gangs if g.conflicts]
        if len(self._asked) > 2 * len(members) + _SLACK:
            # A copy first: filter calls write to it meanwhile (one lost write costs at most
            # one more nudge).
            self._asked = {u: t for u, t in list(self._asked.items()) if u in members}

    def to_nudge(self) -> list[tuple[str, Pod]]:
        """Planned members not yet nudged (so kube-scheduler retries them now); marks them.

        A nudge can be lost: kube-scheduler may be trying the pod when it arrives, and the
        try fails (a new leader nudges before the Service routes to it). A member that has
        not reached filter ``RENUDGE`` seconds after its nudge is nudged again, if
        kube-scheduler has ever failed it (``PodScheduled=False``): a member it never tried
        waits in its active queue and comes to filter without a nudge, and another patch
        would only add to the API server's load while a burst of pods is being scheduled."""
        with self._book.lock:
            snapshot = self._cache.snapshot()
            now = self._clock()
            out = []
            planned: set[str] = set()
            for plan in self._book.plans.values():
                planned.update(plan.members)
                if plan.victims and victims_left(self._cache, plan):
                    continue  # nudged once the victims are gone
                for uid in plan.members:
                    pod = snapshot.pods.get(uid)
                    if pod is None or snapshot.holds_node(pod):
                        continue
                    if uid in plan.nudged:
                        if not pod.unschedulable:
                            continue  # never failed: kube-scheduler's active queue holds it
                        when = self._nudged_at.get(uid, now)
                        if now - when < RENUDGE or self._asked.get(uid, -1.0) >= when:
                            continue
                    plan.nudged.add(uid)
                    self._nudged_at[uid] = now
                    out.append((plan.gang, pod))
            for uid in [u for u in self._nudged_at if u not in planned]:
                del self._nudged_at[uid]
                self._asked.pop(uid, None)
            return out

    def renudge(self, gang: str, uid: str) -> None:
        """Nudging member ``uid`` failed: offer it again in the next ``to_nudge``."""
        with self._book.lock:
            plan = self._book.plans.get(gang)
            if plan is not None:
                plan.nudged.discard(uid)

    def take_conflicts(self) -> list[Conflict]:
        """Disagreements between gangs' own keys and their group objects (``Gang.conflicts``)
        not reported yet: each text once per member and once per object while it lasts."""
        with self._book.lock:
            out: list[Conflict] = []
            live: set[tuple[object, str]] = set()
            for gang in self._conflicted:
                objects = {p.group.ref: p.group for p in gang.members if p.group is not None}
                for text in gang.conflicts:
                    pods = [p for p in gang.members if (p.uid, text) not in self._reported]
                    new = [o for r, o in objects.items() if (r, text) not in self._reported]
                    live.update((p.uid, text) for p in gang.members)
                    live.update((r, text) for r in objects)
                    if pods or new:
                        out.append(Conflict(gang.key, text, tuple(pods), tuple(new)))
            self._reported = live
            return out
