"""A count of the scheduler's state for operators' dashboards and alerts: gangs by state and
by why they wait, each waiting gang's age against the start Muster first promised it, every
queue's books, and how fragmented the free GPUs are for the work that waits.

``census`` is a pure function of an ``Outlook``; ``CensusTaker`` adds the one thing that needs
memory: the start first promised to each waiting gang (its first known ETA), so "waiting
longer than its ETA" can be told apart from an ETA that simply moves along with the clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from app.core.cycle.describe import gang_state
from app.core.cycle.outlook import Outlook
from app.core.gpu.ask import MILLI
from app.core.insight.eta import gang_eta
from app.core.insight.explain import CATEGORIES, STATES, explain_gang
from app.core.model.categories import Category, JobState
from app.core.model.gang import Gang
from app.core.model.queues import UNLIMITED
from app.core.model.values import Pod
from app.core.policies.drf import deserved, dominant_share
from app.core.policies.proportion import ledger
from app.core.state.queueusage import measure, queue_name
from app.core.state.view import NodeView

#: Waiting gangs reported one by one (oldest first); the counts cover every one.
MAX_GANGS = 100
#: Of those, how many (the oldest) get an ETA: it costs several placement attempts.
MAX_ETAS = 20


@dataclass(frozen=True, slots=True)
class WaitingGang:
    """A waiting gang: times are wall-clock seconds; ``eta_start`` is the start expected now,
    ``promised_start`` the one first expected (``None``: unknown)."""

    key: str
    queue: str
    category: Category
    created: float
    eta_start: float | None
    promised_start: float | None = None


@dataclass(frozen=True, slots=True)
class QueueBook:
    """One queue's amounts per resource (milli-units, in ``RESOURCE_NAMES`` order);
    ``limit`` holds ``UNLIMITED`` where there is none."""

    name: str
    parent: str
    weight: float
    usage: np.ndarray
    guaranteed: np.ndarray
    limit: np.ndarray
    borrowed: np.ndarray
    lent: np.ndarray
    fair_share: np.ndarray
    pending: np.ndarray
    dominant_share: float
    waiting_gangs: int


@dataclass(frozen=True, slots=True)
class Fragmentation:
    """Free GPUs (in GPUs) against what the work that waits asks for.

    ``ask`` is the largest GPU ask of one waiting member that some node could take when empty
    (0: nothing waits for GPUs);
    ``unusable`` is the free GPU capacity on nodes that cannot take one such member;
    ``ratio`` is ``unusable / free`` (0 when nothing is free or nothing waits).
    ``largest_block`` is the most whole free GPUs on one node.
    """

    free: float
    largest_block: int
    ask: float
    unusable: float

    @property
    def ratio(self) -> float:
        """The share of free GPU capacity the largest waiting ask cannot use."""
        return self.unusable / self.free if self.free > 0 and self.ask > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Census:
    """The counts at wall-clock time ``now`` (see the module docstring)."""

    now: float
    states: dict[JobState, int]
    categories: dict[Category, int]
    waiting: tuple[WaitingGang, ...]
    queues: tuple[QueueBook, ...]
    fragmentation: Fragmentation
    #: waiting gangs not listed in ``waiting`` (beyond ``MAX_GANGS``)
    unlisted: int = 0
    #: waiting gangs counted by a judgement made on an older cache generation
    stale: int = 0
    #: waiting gangs not judged yet (not counted in ``categories``)
    unjudged: int = 0


@dataclass(frozen=True, slots=True)
class Judgement:
    """What explain says about one waiting gang on the state of cache ``generation``: the
    category of its first blocker; and its expected start (wall-clock; ``None``: unknown) as
    judged on generation ``eta_generation`` (``None``: not judged)."""

    generation: int
    category: Category
    eta_start: float | None = None
    eta_generation: int | None = None


def judge(o: Outlook, gang: Gang) -> Judgement:
    """The category of waiting ``gang``'s first blocker on ``o`` (a brief explanation)."""
    namespace, name = gang.key.split("/", 1)
    category = explain_gang(o, namespace, name, brief=True).category
    return Judgement(o.session.snapshot.generation, category)


def time_it(o: Outlook, gang: Gang, judged: Judgement) -> Judgement:
    """``judged`` with ``gang``'s expected start on ``o`` (its category must be current)."""
    seconds = gang_eta(o, gang, judged.category)
    start = None if seconds is None else o.now + seconds
    return replace(judged, eta_start=start, eta_generation=o.session.snapshot.generation)


def waiting_gangs(o: Outlook) -> tuple[dict[JobState, int], list[Gang]]:
    """Gangs by state, and the waiting ones, oldest first."""
    states = dict.fromkeys(STATES, 0)
    waiting = []
    for gang in o.gangs.values():
        state = gang_state(gang, o.plans.get(gang.key))
        states[state] += 1
        if state == "waiting":
            waiting.append(gang)
    waiting.sort(key=lambda g: (g.created, g.key))
    return states, waiting


def census(
    o: Outlook,
    *,
    max_gangs: int = MAX_GANGS,
    max_etas: int = MAX_ETAS,
    judged: Mapping[str, Judgement] | None = None,
) -> Census:
    """Count ``o``: every gang's state and, for waiting ones, the category of their first
    blocker; the ``max_gangs`` oldest waiting gangs (the ``max_etas`` oldest with their ETA);
    queues; fragmentation.

    ``judged`` (gang -> judgement) replaces explaining every waiting gang now: gangs missing
    from it are counted ``unjudged``, judgements of an older cache generation ``stale``.
    """
    states, waiting = waiting_gangs(o)
    if judged is None:
        judged = {g.key: judge(o, g) for g in waiting}
        for gang in waiting[:max_etas]:
            judged[gang.key] = time_it(o, gang, judged[gang.key])
    generation = o.session.snapshot.generation
    categories = dict.fromkeys(CATEGORIES, 0)
    listed = []
    per_queue: dict[str, int] = {}
    stale = unjudged = 0
    for i, gang in enumerate(waiting):
        queue = _queue_of(o, gang)
        per_queue[queue] = per_queue.get(queue, 0) + 1
        found = judged.get(gang.key)
        if found is None:
            unjudged += 1
            continue
        stale += found.generation != generation
        categories[found.category] += 1
        if i < max_gangs:
            listed.append(
                WaitingGang(gang.key, queue, found.category, gang.created, found.eta_start)
            )
    return Census(
        now=o.now,
        states=states,
        categories=categories,
        waiting=tuple(listed),
        queues=tuple(_books(o, per_queue)),
        fragmentation=fragmentation(
            o.session.backfill_view(), [p for g in waiting for p in g.pending]
        ),
        unlisted=max(len(waiting) - max_gangs, 0),
        stale=stale,
        unjudged=unjudged,
    )


def fragmentation(view: NodeView, waiting: list[Pod]) -> Fragmentation:
    """How much free GPU capacity on ``view`` the largest GPU ask among ``waiting`` members
    cannot use (see ``Fragmentation``)."""
    free = view.gpu_free
    exists = np.arange(free.shape[1]) < (view.allocatable[:, 0] // MILLI)[:, None]
    free = np.where(exists, np.maximum(free, 0), 0)
    whole = (free >= MILLI).sum(axis=1)
    total = int(free.sum())
    # Asks no node could take even empty are not blocked by fragmentation: left out.
    biggest = int(view.allocatable[:, 0].max(initial=0))
    ask = max((p.requests.gpu for p in waiting if p.requests.gpu <= biggest), default=0)
    if ask >= MILLI:
        usable = whole >= -(-ask // MILLI)
    elif ask > 0:
        usable = (free >= ask).any(axis=1)
    else:
        usable = np.ones(len(free), dtype=bool)
    unusable = int(free[~usable].sum())
    return Fragmentation(
        free=total / MILLI,
        largest_block=int(whole.max(initial=0)),
        ask=ask / MILLI,
        unusable=unusable / MILLI,
    )


def _queue_of(o: Outlook, gang: Gang) -> str:
    names = {queue_name(p, o.config, o.scheduler_name) for p in gang.members} - {None}
    return min(n for n in names if n) if names else o.config.default_queue


def _books(o: Outlook, waiting: dict[str, int]) -> list[QueueBook]:
    snapshot = o.session.snapshot
    pending = [p for uid, p in snapshot.pods.items() if not snapshot.placement.get(uid)]
    usage = measure(
        o.session.queue_usage(),
        snapshot.view.allocatable.sum(axis=0),
        o.config,
        o.scheduler_name,
        pending,
    )
    fair = deserved(usage)
    book = ledger(usage)
    zero = np.zeros(4, np.int64)
    rows = []
    for _, queue in o.config.walk():
        borrowed, lent = book.get(queue.name, (zero, zero))
        rows.append(
            QueueBook(
                name=queue.name,
                parent=queue.parent,
                weight=queue.weight,
                usage=np.asarray(usage.of(queue.name), np.int64),
                guaranteed=np.asarray(queue.guaranteed, np.int64),
                limit=np.minimum(np.asarray(queue.limit, np.int64), UNLIMITED),
                borrowed=np.asarray(borrowed, np.int64),
                lent=np.asarray(lent, np.int64),
                fair_share=np.asarray(fair.get(queue.name, zero), np.int64),
                pending=np.asarray(usage.pending.get(queue.name, zero), np.int64),
                dominant_share=dominant_share(usage, queue.name) * queue.weight,
                waiting_gangs=waiting.get(queue.name, 0),
            )
        )
    return rows


@dataclass(slots=True)
class CensusTaker:
    """Takes a ``census`` of the planner's current ``Outlook`` (``look``); thread-safe.

    Explaining a waiting gang costs about one placement attempt (its ETA several), so the
    taker remembers each gang's judgement with the cache generation it was made on and only
    judges again the gangs whose state changed, within ``budget`` seconds (by ``timer``) per
    census: gangs never judged first, then the stale ones, oldest first. What the budget does
    not reach keeps its older judgement (``Census.stale``) or is not counted yet
    (``Census.unjudged``). It also remembers the start first promised to each waiting gang.
    """

    look: Callable[[], Outlook]
    max_gangs: int = MAX_GANGS
    max_etas: int = MAX_ETAS
    budget: float = 1.0
    timer: Callable[[], float] = time.perf_counter
    _judged: dict[str, Judgement] = field(default_factory=dict)
    _promised: dict[str, float] = field(default_factory=dict)
    _seen: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> Census:
        """A census now, each listed waiting gang with the start first promised to it."""
        o = self.look()
        with self._lock:
            _, waiting = waiting_gangs(o)
            keys = {g.key for g in waiting}
            for memory in (self._judged, self._promised, self._seen):
                for key in [k for k in memory if k not in keys]:
                    del memory[key]
            self._refresh(o, waiting)
            counted = census(
                o, max_gangs=self.max_gangs, max_etas=self.max_etas, judged=self._judged
            )
            listed = []
            for gang in counted.waiting:
                if gang.eta_start is not None and gang.key not in self._promised:
                    self._promised[gang.key] = gang.eta_start
                # Pods without a creation time (standalone): waiting since first counted.
                seen = self._seen.setdefault(gang.key, counted.now)
                listed.append(
                    replace(
                        gang,
                        created=gang.created or seen,
                        promised_start=self._promised.get(gang.key),
                    )
                )
        return replace(counted, waiting=tuple(listed))

    def _refresh(self, o: Outlook, waiting: list[Gang]) -> None:
        """Categories first (never judged, then stale; oldest first), then the ETAs of the
        ``max_etas`` oldest, while the budget lasts (at least one judgement per census)."""
        generation = o.session.snapshot.generation
        todo = []
        for age, gang in enumerate(waiting):
            found = self._judged.get(gang.key)
            if found is None or found.generation != generation:
                todo.append((found is not None, age, gang))
        todo.sort(key=lambda t: (t[0], t[1]))
        deadline = self.timer() + self.budget
        for _, _, gang in todo:
            if self.timer() > deadline:
                return
            self._judged[gang.key] = judge(o, gang)
        for gang in waiting[: self.max_etas]:
            found = self._judged[gang.key]
            if found.eta_generation == generation:
                continue
            if self.timer() > deadline:
                return
            self._judged[gang.key] = time_it(o, gang, found)
