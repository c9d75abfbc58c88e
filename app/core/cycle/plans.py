"""The planner's records: a gang's plan and when it is over, the answer given to filter, and
evictions to carry out."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from app.core.actions.victims import Unit
from app.core.model.gang import Gang
from app.core.model.values import GroupObject, Pod
from app.core.state.journal import Kind


@dataclass(slots=True)
class Plan:
    """Where a gang's members go, and their GPU devices there (chosen once, when planned;
    bind uses them). ``core`` members count towards min-member."""

    gang: str
    members: dict[str, str]
    core: frozenset[str]
    min_member: int
    created: float
    expires: float
    released: bool = False  # the barrier let the core bind; later members bind at once
    nudged: set[str] = field(default_factory=set)
    #: pods being evicted to make room for this plan; members wait until they are gone
    victims: frozenset[str] = frozenset()
    #: uid -> the GPU devices reserved for the member on its planned node (GPU members only)
    devices: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: the queue the gang was planned in
    queue: str | None = None
    #: Names this plan in its record on the members (``app.core.cycle.records``).
    id: str = ""
    #: uid -> the record text last written on that member (the loop writes it once).
    recorded: dict[str, str] = field(default_factory=dict)
    #: uid -> the record text that member was left without (one never tried by
    #: kube-scheduler, while another member carries the plan; ``Planner.to_record``).
    skipped: dict[str, str] = field(default_factory=dict)
    #: ``expires`` as epoch seconds, fixed when the plan is first recorded (0: not yet).
    expires_at: float = 0.0

    def node_of(self, uid: str) -> str | None:
        """The planned node of member ``uid``."""
        return self.members.get(uid)

    def copy(self) -> Plan:
        """A copy a planning session may change without touching this one."""
        return Plan(
            gang=self.gang,
            members=dict(self.members),
            core=self.core,
            min_member=self.min_member,
            created=self.created,
            expires=self.expires,
            released=self.released,
            nudged=set(self.nudged),
            victims=self.victims,
            devices=dict(self.devices),
            queue=self.queue,
            id=self.id,
            recorded=dict(self.recorded),
            skipped=dict(self.skipped),
            expires_at=self.expires_at,
        )

    def drop(self, uids: frozenset[str] | set[str]) -> None:
        """Forget members ``uids`` (an elastic reservation that did not hold)."""
        for uid in uids:
            self.members.pop(uid, None)
            self.devices.pop(uid, None)

    @classmethod
    def of(
        cls,
        gang: Gang,
        placed: dict[str, str],
        now: float,
        expires: float,
        victims: frozenset[str] = frozenset(),
        queue: str | None = None,
        id: str = "",
    ) -> Plan:
        """A new plan for ``gang``'s core (of ``queue``) placed as ``placed``; ``id``: 12
        random hex digits drawn by the caller (default: drawn here)."""
        return cls(
            gang=gang.key,
            members=dict(placed),
            core=frozenset(placed),
            min_member=gang.min_member,
            created=now,
            expires=expires,
            victims=victims,
            queue=queue,
            id=id or secrets.token_hex(6),
        )


@dataclass(frozen=True, slots=True)
class Lapse:
    """A plan to release: its gang, why, and whether it ran out of time (else its gang or a
    planned member is gone)."""

    gang: str
    why: str
    expired: bool = False


def lapsed(
    plans: Mapping[str, Plan], gangs: Mapping[str, Gang], now: float, plan_ttl: float
) -> tuple[list[str], list[Lapse]]:
    """The plans that are over: those fulfilled (every planned member still there holds its
    node), and those to release (the gang is gone; or, before it runs, a core member was
    deleted or the plan expired)."""
    fulfilled: list[str] = []
    dropped: list[Lapse] = []
    for key, plan in plans.items():
        gang = gangs.get(key)
        if gang is None:
            dropped.append(Lapse(key, "gang is gone"))
            continue
        live = {p.uid for p in gang.members}
        bound = {p.uid for p in gang.bound}
        if all(u not in live or u in bound for u in plan.members):
            fulfilled.append(key)
        elif gang.running:
            continue
        elif any(u not in live for u in plan.core):
            dropped.append(Lapse(key, "a planned member was deleted"))
        elif plan.expires <= now:
            why = f"plan expired: the gang did not start within {plan_ttl:g}s"
            dropped.append(Lapse(key, why, expired=True))
    return fulfilled, dropped


@dataclass(frozen=True, slots=True)
class Conflict:
    """A disagreement between a gang's own keys and its group object, to report: on ``pods``
    (members not told yet) and ``objects`` (group objects not told yet)."""

    gang: str
    text: str
    pods: tuple[Pod, ...] = ()
    objects: tuple[GroupObject, ...] = ()


class Why(StrEnum):
    """The kind of reason the planner last gave a gang that has no plan, or waits on one."""

    #: Fewer members exist than its min-member.
    SHORT_OF_MEMBERS = "short-of-members"
    #: Its members disagree or ask for something impossible (``Gang.problem``).
    PROBLEM = "problem"
    #: Its queue's quota or fair share stops it.
    QUOTA = "quota"
    #: No room for its core now (capacity, fragmentation, topology, a hold ahead of it).
    NO_ROOM = "no-room"
    #: Planned; victims evicted to make its room are still leaving.
    EVICTING = "evicting"
    #: The cache refused its plan's reservation at commit (overtaken by a bind); planned again.
    REFUSED = "refused"
    #: kube-scheduler's own filters removed a planned node and no other candidate fits.
    FILTERED_OUT = "filtered-out"
    #: Its plan was dropped (expired, a bind ran out, rolled back, handed over).
    RELEASED = "released"
    #: Members beyond min-member wait for room left after every waiting gang's core.
    ELASTIC = "elastic"


@dataclass(frozen=True, slots=True)
class Reason:
    """What the planner last said about a gang: ``why`` for code to branch on, ``text`` for
    filter's answer, events and explain."""

    why: Why
    text: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the planner says about one pod in filter.

    ``gang`` is empty for a pod that is not in a gang (schedule it on its own); otherwise
    ``node`` is its planned node, or empty with ``reason`` saying why it must wait.
    """

    gang: str = ""
    node: str = ""
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Eviction:
    """Whole units of work to evict so that gang ``preemptor`` (of ``queue``) can start;
    ``why`` is told to the victims in an Event; ``kind`` is ``preemption`` (lower-priority
    work gives way) or ``reclaim`` (a queue below its guarantee takes back borrowed room)."""

    preemptor: str
    units: tuple[Unit, ...]
    why: str
    kind: Kind = Kind.PREEMPTION
    queue: str | None = None
