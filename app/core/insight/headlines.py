"""One line per waiting gang: the headline told on its members (``Headlines``) and the lines of
every gang the overview lists (``GangLines``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from app.core.cycle.outlook import Outlook
from app.core.insight.eta import job_eta
from app.core.insight.explain import Explanation, explain_gang, explain_job, incomplete_summary
from app.core.insight.jobs import gang_job, queue_of
from app.core.model.categories import Category, JobState
from app.core.model.gang import gang_spec
from app.core.model.values import Pod

#: How long a waiting member's told headline stays as it is (see ``Headlines._tell``).
STEADY_SECONDS = 60.0


#: How long a gang's headline, once worked out, is given to its other members while the gang
#: keeps its members (see ``Headlines._fresh``).
REUSE_SECONDS = 5.0


#: How long a gang found short of members is told so from its member count alone, as members
#: come, before it is explained again (see ``Headlines._counted``).
COUNTED_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class GangLine:
    """One gang in a list of all of them: its queue and its brief story (state, category,
    summary and, when it waits, the ETA; no fixes, node reasons or queue path)."""

    key: str
    queue: str
    answer: Explanation


def explain_gangs(outlook: Outlook) -> list[GangLine]:
    """Every gang ``outlook`` knows, by key, each with its queue and brief story plus ETA."""
    lines = []
    for key in sorted(outlook.gangs):
        job = gang_job(outlook.gangs[key], f"gang {key}")
        answer = explain_job(outlook, job, brief=True)
        answer.eta_seconds = (
            job_eta(outlook, job, answer.category) if answer.state == JobState.WAITING else 0.0
        )
        lines.append(GangLine(key, queue_of(outlook, job), answer))
    return lines


class GangLines:
    """``explain_gangs`` on the planner's state, computed at most once per planner cycle and
    ``max_age`` seconds (a dashboard polling it costs one look per cycle, not one per poll)."""

    def __init__(
        self,
        look: Callable[[], Outlook],
        cycles: Callable[[], int],
        clock: Callable[[], float],
        max_age: float = 2.0,
    ) -> None:
        self._look = look
        self._cycles = cycles
        self._clock = clock
        self._max_age = max_age
        self._lock = threading.Lock()
        self._memo: tuple[int, float, list[GangLine]] | None = None

    def __call__(self) -> list[GangLine]:
        """The current lines (from the memo when no cycle ran and it is fresh)."""
        with self._lock:
            cycle, now = self._cycles(), self._clock()
            memo = self._memo
            if memo is not None and memo[0] == cycle and now - memo[1] < self._max_age:
                return memo[2]
            lines = explain_gangs(self._look())
            self._memo = (cycle, now, lines)
            return lines


class Headlines:
    """``category: summary (gang KEY)`` for waiting gang members, as filter tells
    kube-scheduler (so its FailedScheduling events and PodScheduled conditions tell the same
    story as ``/explain``). Computed once per gang and planner cycle, on one look per cycle.
    ``look`` may answer ``None`` (the planner is busy with a cycle): no headline then."""

    def __init__(
        self,
        look: Callable[[], Outlook | None],
        cycles: Callable[[], int],
        *,
        clock: Callable[[], float] = time.monotonic,
        steady: float = STEADY_SECONDS,
        reuse: float = REUSE_SECONDS,
        members: Callable[[str], int] | None = None,
    ) -> None:
        """A member's told headline changes at most once per ``steady`` seconds of ``clock``
        (see ``_tell``); a gang's headline is worked out again at most once per ``reuse``
        seconds while its members stay (``_fresh``). ``members`` (if any) says how many
        members a gang has in the cache now: a gang whose count differs from the cycle's look
        (members came without a cycle, as filter runs none for a gang short of members) is
        looked at again."""
        self._look = look
        self._cycles = cycles
        self._members = members
        self._clock = clock
        self._steady = steady
        self._reuse = reuse
        self._lock = threading.Lock()
        #: gang -> ((cycle, members), when worked out, headline)
        self._memo: dict[str, tuple[tuple[int, int], float, str]] = {}
        #: gang found short of members -> (its minimum, when explained so)
        self._short: dict[str, tuple[int, float]] = {}
        self._outlook: tuple[int, Outlook] | None = None
        self._said: dict[str, tuple[str, float]] = {}
        self._news: list[tuple[Pod, str]] = []
        #: Members answered without a story while a cycle ran, by uid (``_busy``).
        self._pending: dict[str, Pod] = {}

    def __call__(self, pod: Pod) -> str | None:
        """The headline for ``pod``'s gang (None: not in a gang Muster knows)."""
        spec = gang_spec(pod)
        if spec is None:
            return None
        cycle = self._cycles()
        seen = self._members(spec.key) if self._members is not None else -1
        with self._lock:
            held = self._held(pod)
            if held is not None:  # whatever the story is now, this one is told (``_tell``)
                return held
            hit = self._memo.get(spec.key)
            if hit is not None and self._fresh(hit, cycle, seen):
                return self._tell(pod, hit[2])
            counted = self._counted(spec.key, seen)
            if counted is not None:
                return self._tell(pod, counted)
        outlook = self.outlook(cycle)
        if outlook is not None and seen >= 0:
            gang = outlook.gangs.get(spec.key)
            if gang is None or len(gang.members) != seen:
                outlook = self.outlook(cycle, again=True)
        if outlook is None:
            return self._busy(pod, spec.key, seen)
        answer = explain_gang(outlook, spec.namespace, spec.name, brief=True)
        if answer.state == JobState.UNKNOWN:
            return None
        text = f"{answer.headline} (gang {spec.key})"
        gang = outlook.gangs.get(spec.key)
        with self._lock:
            if len(self._memo) > 4096:
                self._memo.clear()
                self._short.clear()
            self._memo[spec.key] = ((cycle, seen), self._clock(), text)
            if answer.category == Category.GANG_INCOMPLETE and gang is not None:
                self._short[spec.key] = (gang.min_member, self._clock())
            else:
                self._short.pop(spec.key, None)
            return self._tell(pod, text)

    def _busy(self, pod: Pod, gang: str, seen: int) -> str | None:
        """The story for ``pod`` while the planner is busy with a cycle: the one told last,
        else the gang's last one. ``None`` (filter then gives the planner's verdict, which
        says a cycle is under way) when there is none, or when it is a passing story the gang
        has outgrown ("1 of 2 members exist" when both exist now): such a member's story is
        worked out once the cycle is over, and given as news (``news``)."""
        with self._lock:
            said = self._said.get(pod.uid)
            last = self._memo.get(gang)
            story = said[0] if said is not None else last[2] if last is not None else None
            if story is None or (
                _passing(story) and (last is None or last[2] != story or last[0][1] != seen)
            ):
                if len(self._pending) < 4096:
                    self._pending[pod.uid] = pod
                return None
            return story if said is not None else self._tell(pod, story)

    def _counted(self, gang: str, seen: int) -> str | None:
        """The story of a gang explained as short of members less than ``COUNTED_SECONDS``
        ago, now that it has ``seen`` members, if it is still short: the explanation would
        give it (a gang without all its members is never planned, so missing members stay
        its first blocker). While shuffled pods arrive, every first-told member's gang has a
        new member count, so each would otherwise be looked at and explained, inside
        kube-scheduler's one-pod-at-a-time loop."""
        short = self._short.get(gang)
        if short is None or seen < 1:
            return None
        minimum, when = short
        if seen >= minimum or self._clock() - when >= COUNTED_SECONDS:
            return None
        return f"{Category.GANG_INCOMPLETE}: {incomplete_summary(seen, minimum)} (gang {gang})"

    def _fresh(self, hit: tuple[tuple[int, int], float, str], cycle: int, seen: int) -> bool:
        """Whether a gang's headline worked out earlier is told as it is: worked out in this
        cycle, or less than ``reuse`` seconds ago with the same members (and not one that
        gives way at once). During a burst of arriving pods the planner cycles every few
        tens of milliseconds; each first-told member would otherwise pay for explaining its
        gang again, inside kube-scheduler's one-pod-at-a-time loop."""
        (then, members), when, text = hit
        if members != seen:
            return False
        return then == cycle or (self._clock() - when < self._reuse and not _passing(text))

    def outlook(self, cycle: int | None = None, *, again: bool = False) -> Outlook | None:
        """The planner's outlook, looked at once per planner cycle (``cycle``: the current
        one, if the caller already asked; ``again``: look anew all the same); ``None`` while
        the planner is busy with a cycle."""
        cycle = self._cycles() if cycle is None else cycle
        with self._lock:
            if again or self._outlook is None or self._outlook[0] != cycle:
                look = self._look()
                if look is None:
                    return None
                self._outlook = (cycle, look)
            return self._outlook[1]

    def _held(self, pod: Pod) -> str | None:
        """The story ``pod`` was told if ``_tell`` would give it again whatever the new one
        (told less than ``steady`` seconds ago, and not one that gives way at once): then
        the gang's story need not be worked out at all (kube-scheduler retries every waiting
        pod after each finished job)."""
        said = self._said.get(pod.uid)
        if said is None or self._clock() - said[1] >= self._steady or _passing(said[0]):
            return None
        return said[0]

    def _tell(self, pod: Pod, text: str) -> str:
        """The headline to give for ``pod``: ``text``, unless the pod was told another one
        less than ``steady`` seconds ago (then that one again) and that one still holds: a
        story of missing members (or of nothing blocking) is replaced at once, since it stops
        being true rather than changing its numbers.

        kube-scheduler writes a rejected pod's message into its PodScheduled condition when
        the message changes, and before 1.27 that update puts the pod straight back into its
        queue: a story that changed on every retry kept hundreds of waiting pods cycling
        through kube-scheduler, ahead of the members Muster had just planned.
        ``/explain`` always gives the live story.
        """
        said = self._said.get(pod.uid)
        if said is not None and (said[0] == text or self._held(pod) is not None):
            return said[0]
        if len(self._said) > 16384:
            self._said.clear()
        self._said[pod.uid] = (text, self._clock())
        if len(self._news) < 4096:  # beyond that, kube-scheduler's own events still tell it
            self._news.append((pod, text))
        return text

    def news(self) -> list[tuple[Pod, str]]:
        """The pods whose headline changed since the last call, each with its new headline
        (for a ``GangWaiting`` event, so ``kubectl describe`` shows it without kube-scheduler's
        node-count prefix). First the story of each member answered without one while a
        cycle ran is worked out (call it after a cycle): kube-scheduler may not ask about
        that member again for minutes (on 1.20, until it flushes pods unschedulable for 60 s)
        when nothing else changes."""
        with self._lock:
            pending, self._pending = list(self._pending.values()), {}
        for pod in pending:
            self(pod)  # (busy again: it stays pending)
        with self._lock:
            news, self._news = self._news, []
        return news


#: Stories that stop being true (the members came, nothing blocks) rather than change.
_PASSING = tuple(f"{c}:" for c in (Category.GANG_INCOMPLETE, Category.NONE))


def _passing(told: str) -> bool:
    """Whether a told headline is one a new story replaces at once (see ``Headlines._tell``)."""
    return told.startswith(_PASSING)
