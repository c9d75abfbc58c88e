"""The planner: a scheduling cycle over every pending gang, and the plans it holds.

kube-scheduler sees one pod at a time; the planner sees the whole pending set. A cycle opens
a planning ``Session`` on the cache, orders the gangs that are ready (enough members exist)
fairly — weighted DRF across queues, higher priority then older first within one — and places
each gang's missing core members all at once, inside one network-topology domain when it can
(``actions.allocate_in_domain``). A gang that fits gets a **plan** (member -> node and GPU
devices) whose room the session takes, so every later gang sees it as taken; a gang that does
not fit may make room by evicting whole gangs (``makeroom``), and the first one in line gets
room held for it (``headofline``). Elastic members come last (``elastic``). The session is
committed to the cache in one step at the end of the cycle; a reservation that no longer holds
by then drops its plan, and the gang is planned again.

Plans expire (``plan_ttl``) if the gang does not start; binds finish them.

The plans, and what goes with them, are kept in a ``PlanBook`` (``planbook``) that the cycle
shares with the parts that answer from it: filter's verdicts (``verdicts``), the records the
next leader finds (``recording``), preemption's evictions (``evictions``), nudges and
conflict reports (``nudges``), and what readers see (``looks``). ``Planner`` runs the cycle
and stands for all of them: every caller asks it, and it passes each question on.
"""

from __future__ import annotations

import operator
import secrets
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, overload

from app.core.actions.allocate import devices_in_turn, why_unplaced
from app.core.actions.allocate_in_domain import (
    DemandMemo,
    DomainFills,
    TopologyAllocation,
    allocate_topology,
    next_domain,
    reaches,
)
from app.core.actions.backfill import EndingMemo, Reservation, ends_before
from app.core.cycle.elastic import plan_extras
from app.core.cycle.evictions import Evictions
from app.core.cycle.headofline import domains_for, hold_for, waits_for_domain
from app.core.cycle.looks import Looks
from app.core.cycle.memos import (
    FailedPlacements,
    GangMemo,
    MemberFacts,
    QueueNames,
    StillBlocked,
    gangs_of,
)
from app.core.cycle.nudges import Nudges
from app.core.cycle.outlook import Outlook
from app.core.cycle.planbook import PlanBook, PlannerSettings
from app.core.cycle.plans import Conflict, Eviction, Plan, Reason, Verdict, Why, lapsed
from app.core.cycle.recording import Recorder
from app.core.cycle.records import HoldRecord, PlanRecord
from app.core.cycle.session import Session
from app.core.cycle.verdicts import BUSY, Verdicts, short_reason
from app.core.gpu.ask import GpuAsk
from app.core.model.gang import Gang, is_member
from app.core.model.interned import Interned
from app.core.model.podfacts import PodFact
from app.core.model.queues import QueueConfig
from app.core.model.status import Status
from app.core.model.values import Pod, Resources
from app.core.policies.drf import order_key
from app.core.policies.gangorder import LongestFirst
from app.core.policies.interfaces import GangOrder, Protection
from app.core.policies.minruntime import MinRuntime
from app.core.policies.proportion import admit
from app.core.policies.registry import Constraint, constraint_of, scorer
from app.core.state.cache import ClusterCache
from app.core.state.domains import DEFAULT_KEYS, Ask, ask_of, pod_ask, tree_for
from app.core.state.journal import Journal, Kind
from app.core.state.queuefile import QueueFile
from app.core.state.queueusage import QueueUsage, demand_of, measure
from app.core.state.timings import Timings
from app.core.state.view import NodeView

__all__ = ["BUSY", "Eviction", "GangMemo", "Plan", "Planner", "Verdict", "gangs_of"]


class Planner:
    """Runs cycles, and answers for the parts that read and carry out their plans (see the
    module docstring); thread-safe (the plan book's one lock, cycles are short)."""

    def __init__(
        self,
        cache: ClusterCache,
        *,
        strategy: str = "binpack",
        plan_ttl: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        queues: QueueFile | None = None,
        scheduler_name: str = "muster",
        default_runtime: float = 3600.0,
        wall: Callable[[], float] = time.time,
        min_runtime: float = 0.0,
        preemption: bool = True,
        topology_keys: Sequence[str] = DEFAULT_KEYS,
        protection: Protection | None = None,
        journal: Journal | None = None,
        timings: Timings | None = None,
        order: GangOrder | None = None,
        leads: Callable[[], bool] | None = None,
    ) -> None:
        """``protection`` defaults to ``MinRuntime`` over the queue file and ``min_runtime``;
        ``order`` (gangs within a queue) to ``LongestFirst``.

        ``leads`` (if any) says whether this replica may decide; a filter call plans on demand
        only when it does. Asking it may first restore the recorded plans (``Leadership``), so
        it is asked outside the planner's lock.

        ``journal`` (if any) records plans made, expired and released; ``timings`` (if any)
        counts how long each cycle takes.
        """
        self._cache = cache
        self._journal = journal
        self._timings = timings
        queue_file = queues or QueueFile()
        #: What the planner and its parts plan by, resolved once (``planbook``).
        self._settings = PlannerSettings(
            queue_file,
            protection or MinRuntime(lambda: queue_file.config, min_runtime),
            order or LongestFirst(default_runtime=default_runtime),
            scheduler_name=scheduler_name,
            strategy=strategy,
            plan_ttl=plan_ttl,
            default_runtime=default_runtime,
            preemption=preemption,
            topology_keys=tuple(topology_keys),  # broadest first (``app.core.state.domains``)
            clock=clock,
            wall=wall,
        )
        #: The plans and what goes with them, shared by the planner's parts (``planbook``).
        self.book = PlanBook(cache, journal)
        #: shapes of gangs no room could be held for in this cycle (``MemberFacts.hold_shape``)
        self._no_room: set[tuple[Any, ...]] = set()
        self.cycles = 0
        #: Whether a loop runs cycles on every change (``app.core.cycle.loop``); without one,
        #: filter plans on demand whenever a member has no plan.
        self.driven = False
        # Memos that keep a cycle's cost proportional to what changed (see ``memos``).
        self._gang_memo = GangMemo()
        self._queue_names = QueueNames(scheduler_name)
        self._facts = MemberFacts()
        self._failed = FailedPlacements()
        self._still = StillBlocked()
        self._demand = DemandMemo()
        self._fills = DomainFills(self._settings.strategy)
        # The running pods' ending order, kept between the head-of-line holds of cycles.
        self._ending = EndingMemo()
        # The planner's parts, sharing the book and the settings (``planbook``).
        self._evictions = Evictions(self.book, self._settings)
        self._nudges = Nudges(self.book, clock)
        self._recorder = Recorder(self.book, self._settings, self._nudges, self._queue_names)
        self._looks = Looks(self.book, self._settings, self._gang_memo, self._queue_names)
        self._verdicts = Verdicts(self.book, self._settings, self, self._nudges, leads)

    # -- filter's answers (``verdicts``) ---------------------------------------------------

    def plan(self, gang: str) -> Plan | None:
        """The live plan of ``gang``, if any (never waits for a running cycle)."""
        return self._verdicts.plan(gang)

    def waiting(self, pod: Pod) -> bool:
        """Whether ``pod`` still waits: the cache knows it, it holds no node and its gang (if
        any) has no plan (never waits for a running cycle)."""
        return self._verdicts.waiting(pod)

    def planned_devices(self, uid: str, gang: str) -> tuple[int, ...] | None:
        """The GPU devices planned for member ``uid`` of ``gang`` (None: no plan names any)."""
        return self._verdicts.planned_devices(uid, gang)

    def verdict(self, pod: Pod) -> Verdict:
        """Where ``pod`` should go per the plans, planning on demand if it has no plan yet;
        never waits for a cycle another thread is running (``Verdicts.verdict``)."""
        return self._verdicts.verdict(pod)

    def replan_member(self, pod: Pod, candidates: Sequence[str]) -> Verdict:
        """Move a planned member onto one of ``candidates`` (kube-scheduler removed its node);
        if none has room, the whole plan is released (``Verdicts.replan_member``)."""
        return self._verdicts.replan_member(pod, candidates)

    def quota_check(self, pod: Pod) -> Status:
        """For a pod scheduled on its own: whether its queue admits it now (see ``admit``)."""
        return self._verdicts.quota_check(pod)

    def backfill_ok(self, pod: Pod) -> bool:
        """Whether a pod scheduled on its own may use held room (it ends before it is due)."""
        return self._verdicts.backfill_ok(pod)

    def protected_for(self, pod: Pod) -> float:
        """Seconds ``pod``, running, is protected from preemption (see ``Protection``)."""
        return self._verdicts.protected_for(pod)

    # -- what readers see (``looks``) ------------------------------------------------------

    @property
    def queues(self) -> QueueFile:
        """The queue configuration source."""
        return self._settings.queues

    def usage(self, pending: Sequence[Pod] = ()) -> QueueUsage:
        """What every queue holds now (plus the demand of ``pending``)."""
        view = self._cache.view()
        return measure(
            self._cache.queue_usage(),
            view.allocatable.sum(axis=0),
            self._settings.queues.config,
            self._settings.scheduler_name,
            pending,
        )

    @property
    def reservation(self) -> Reservation | None:
        """The head-of-line reservation made by the last cycle, if any."""
        return self.book.head

    @overload
    def look(self) -> Outlook: ...
    @overload
    def look(self, *, wait: bool) -> Outlook | None: ...
    def look(self, *, wait: bool = True) -> Outlook | None:
        """The planner's state now, on a session that is never committed (explain, what-if);
        never waits for a running cycle (``Looks.look``). ``wait=False``: ``None`` instead,
        while another thread runs a cycle."""
        return self._looks.look(wait=wait)

    def describe(self) -> list[dict[str, Any]]:
        """Every gang with its state, members seen/bound, plan, age and current reason."""
        return self._looks.describe()

    # -- the bind path (``planbook``) ------------------------------------------------------

    def release(self, gang: str, reason: str) -> None:
        """Drop ``gang``'s plan and its reservations (bind timeout, rollback)."""
        self.book.release(gang, reason)

    def mark_released(self, gang: str) -> None:
        """The gang's core has reached bind together: later members may bind at once."""
        self.book.mark_released(gang)

    # -- nudges and conflicts (``nudges``) -------------------------------------------------

    def to_nudge(self) -> list[tuple[str, Pod]]:
        """Planned members to nudge now, so kube-scheduler retries them (``Nudges.to_nudge``);
        marks them."""
        return self._nudges.to_nudge()

    def renudge(self, gang: str, uid: str) -> None:
        """Nudging member ``uid`` failed: offer it again in the next ``to_nudge``."""
        self._nudges.renudge(gang, uid)

    def take_conflicts(self) -> list[Conflict]:
        """Disagreements between gangs' keys and their group objects not reported yet
        (``Nudges.take_conflicts``)."""
        return self._nudges.take_conflicts()

    # -- evictions (``evictions``) ---------------------------------------------------------

    def take_evictions(self) -> list[Eviction]:
        """The evictions decided since the last call (the loop carries them out)."""
        return self._evictions.take_evictions()

    def recorded_first(self, evictions: Sequence[Eviction]) -> list[Eviction]:
        """Those of ``evictions`` whose preemptor's plan is recorded (see
        ``Evictions.recorded_first``); the others go back in the queue."""
        return self._evictions.recorded_first(evictions)

    def eviction_refused(self, eviction: Eviction, unit_key: str, why: str) -> None:
        """Evicting ``unit_key`` was refused: plan the preemptor again, with other victims
        (``Evictions.eviction_refused``)."""
        self._evictions.eviction_refused(eviction, unit_key, why)

    # -- records: what the next leader finds (``recording``) -------------------------------

    def to_record(self) -> list[tuple[Pod, str]]:
        """Planned members to write the plan record on now, with the text (``muster.io/plan``);
        marks them written (``Recorder.to_record``)."""
        return self._recorder.to_record()

    def unrecorded(self, pod: Pod) -> None:
        """Writing ``pod``'s plan record failed: write it again next time."""
        self._recorder.unrecorded(pod)

    def record_of(self, uid: str, gang: str) -> str | None:
        """The plan record a Binding of member ``uid`` of ``gang`` carries (None: no plan)."""
        return self._recorder.record_of(uid, gang)

    def hold_record(self) -> str:
        """The record text of the head-of-line hold in force (``muster.io/hold``)."""
        return self._recorder.hold_record()

    def reset(self) -> None:
        """Forget every plan, reservation, hold and queued eviction (leadership lost: the
        next leader decides from the records)."""
        self._recorder.reset()

    def restore(self, records: dict[str, PlanRecord], hold: HoldRecord | None) -> list[str]:
        """Carry on from the records before deciding anything new (``Recorder.restore``);
        returns what it did, one line each."""
        return self._recorder.restore(records, hold)

    # -- the cycle -----------------------------------------------------------------------

    def cycle(self, *, force: bool = False) -> list[str]:
        """Plan every ready gang in fair order; returns the gangs that got a new plan.

        Skips the work when nothing changed since the last cycle (unless ``force``).
        """
        with self.book.lock:
            now = self._settings.clock()
            if (
                not force
                and self._cache.plan_generation <= self.book.generation
                and not any(p.expires <= now for p in self.book.plans.values())
            ):
                return []
            if not self.book.plans and not self._cache.gang_member_count:
                self.book.generation = self._cache.generation
                return []
            self.cycles += 1
            started = time.perf_counter()
            owner = self._cache.holds[0]
            session = Session(self._cache, self.book.plans)
            planned, head = self._run(session, now, force=force)
            applied = self.book.commit(session)
            self.book.head = head
            self.book.generation = applied.generation if applied.clean else session.statement.base
            if self._cache.holds[0] != owner:
                # The room the old owner's hold kept was not free for this cycle's gangs: the
                # next one plans them there, without waiting for the cluster to change.
                self.book.generation = -1
            self._looks.publish_if_looked()
            made = [(g, q) for g, q in planned if g in self.book.plans]
            if self._journal is not None:
                for gang, queue in made:
                    plan = self.book.plans[gang]
                    nodes = sorted(set(plan.members.values()))
                    text = f"{len(plan.members)} members on {', '.join(nodes)}"
                    if plan.victims:
                        text += f"; waiting for {len(plan.victims)} evicted pods to leave"
                    self._journal.record(Kind.PLAN, gang, queue=queue, nodes=nodes, message=text)
            if self._timings is not None:
                self._timings.observe(time.perf_counter() - started)
            return [g for g, _ in made]

    def _run(
        self, session: Session, now: float, *, force: bool = False
    ) -> tuple[list[tuple[str, str]], Reservation | None]:
        """One cycle's decisions, all taken in ``session`` (``force``: no gang's lack of
        room is carried over from earlier cycles, see ``StillBlocked``)."""
        snapshot = session.snapshot
        self._fills = DomainFills(self._settings.strategy)
        gangs = gangs_of(snapshot, self._gang_memo)
        self._nudges.saw(gangs.values(), snapshot.gang_members)
        self.book.seen = dict(Counter(snapshot.gang_members.values()))
        self._no_room = set()
        self._queue_names.prune(snapshot)
        self._tidy(session, gangs, now)
        config = self._settings.queues.config
        usage = measure(
            session.queue_usage(),
            snapshot.view.allocatable.sum(axis=0),
            config,
            self._settings.scheduler_name,
        )
        by_queue: dict[str, list[Gang]] = {}
        queues: dict[str, str] = {}  # gang -> its queue, for the elastic pass below
        for gang in gangs.values():
            if gang.running or gang.key in session.plans:
                continue
            queues[gang.key] = queue = self._queue_of(gang, config)
            by_queue.setdefault(queue, []).append(gang)
        for line in by_queue.values():
            line.sort(key=lambda g: self._facts.order(g, self._settings.order))
        self._still.begin(None if force else queues)
        planned: list[tuple[str, str]] = []
        head: Reservation | None = None
        while by_queue:
            # Weighted DRF across queues (hierarchically), priority then age within one.
            queue = _turn(by_queue, usage, config)
            gang = by_queue[queue].pop(0)
            placed, held = self._plan_core(session, gang, now, usage, queue, first=head is None)
            if placed:
                planned.append((gang.key, queue))
                planned.extend(
                    (key, queue)
                    for key in self._plan_run(session, gang, queue, by_queue, usage, now)
                )
            if not by_queue[queue]:
                del by_queue[queue]
            head = head or held
        if head is None:
            session.hold("", {}, 0.0)
        # Only running or planned gangs can take elastic members (see ``elastic``), and only
        # those with a pending member their plan does not name have any to place.
        plans = session.plans
        extras = [
            g
            for g in gangs.values()
            if (g.running or g.key in plans) and _unplanned_pending(g, plans.get(g.key))
        ]
        for gang in sorted(extras, key=lambda g: (-g.priority, g.created, g.key)):
            why = plan_extras(
                session,
                gang,
                usage=usage,
                queue=queues.get(gang.key) or self._queue_of(gang, config),
                now=now,
                expires=now + (gang.timeout or self._settings.plan_ttl),
                strategy=self._settings.strategy,
            )
            if why:
                self.book.reasons[gang.key] = Reason(Why.ELASTIC, why)
        return planned, head

    def _plan_run(
        self,
        session: Session,
        placed: Gang,
        queue: str,
        by_queue: dict[str, list[Gang]],
        usage: QueueUsage,
        now: float,
    ) -> list[str]:
        """Plan, in one step, the gangs next in ``queue``'s line alike ``placed`` (just planned
        into one topology domain), as far as each would go to that same domain one by one;
        returns them (taken off the line).

        Alike: no member bound, no problem, the same number of core members, all of one
        requests, node constraints and whole-GPU (or no) ask, and the same topology ask. One
        by one, each would go to that domain while it fits there, every narrower level being
        too small for it even empty (``reaches``): only that domain's rows changed since, by
        taking room, so its keys only fell and every other domain's are as they were. When
        it came first by strictly the fewest GPUs left, it does again (``DemandMemo.repeat``).
        Otherwise, for gangs that take GPUs: every domain that would now come before it in
        the search (fewer GPUs left) had fewer than it before too, so it was tried before it
        for the first gang (the search tries domains by fewest GPUs left, and it does not
        pass over one that could still win) and found no room for the gang; its rows are as
        they were, so it finds none again, and the search then places the gang in that
        domain and stops. Inside the domain members fill the best rows in turn
        (``fill_alike``): the first ``k`` gangs take the first ``k`` stretches of one fill
        of the domain. Every gang is still judged on its own, in order: its queue's turn
        (weighted DRF) and its quota (``admit``) with the usage of those before it; the run
        stops at the first that would not be planned right there. Once the domain takes no
        more of them, the run goes on into the domain the next gang's search would choose,
        when that is known without searching (``next_domain``)."""
        last = self._demand.last
        line = by_queue[queue]
        packs = scorer(self._settings.strategy).packs
        if last is None or not line or session.holds[1] or not packs:
            return []
        level, index, decides = last
        first = _alike_core(placed)
        if first is None:
            return []
        core, shape, ask = first
        if decides != (ask, self._settings.strategy):
            return []
        view = session.view()
        tree = tree_for(view.table, self._settings.topology_keys)
        demand = demand_of(core)
        if not reaches(tree, view, ask, demand, level):
            return []
        if self._demand.winner != last and not demand[0]:
            # Not first by strictly the fewest GPUs left, and taking none: it need not come
            # first again. (Taking GPUs, it does: see ``_plan_run``'s docstring.)
            return []
        done: list[str] = []
        went_on = False  # into a domain no gang was placed in yet (``next_domain``)
        while True:
            taken, full = self._run_in(
                session, queue, by_queue, usage, now, (level, index), (core, shape)
            )
            done.extend(taken)
            if went_on and not taken:
                # Its turn or quota stops the gang there: it is planned as if it had not been
                # looked at (``_plan_core`` says why), and nothing went to that domain.
                self._demand.last = self._demand.winner = None
                return done
            if not full or not line:
                return done
            # The domain takes no more gangs of this shape. The next one, alike, would search;
            # where that search places it is known without searching when only this domain
            # changed since the last search and the next candidate is a twin of what this
            # domain was then (``next_domain``): go on there.
            following = _alike_core(line[0])
            if following is None or following[1] != shape:
                return done
            if len(by_queue) > 1 and _turn(by_queue, usage, self._settings.queues.config) != queue:
                return done
            view = session.view()
            found = next_domain(view, following[0], tree, (level, index), decides, self._demand)
            if found is None:
                return done
            index, core, went_on = found[0], following[0], True
            if self._demand.winner != self._demand.last and not demand[0]:
                return done  # (as above: a gang taking no GPUs goes on only when first)

    def _run_in(
        self,
        session: Session,
        queue: str,
        by_queue: dict[str, list[Gang]],
        usage: QueueUsage,
        now: float,
        domain: tuple[int, int],
        alike_to: tuple[list[Pod], tuple[object, ...]],
    ) -> tuple[list[str], bool]:
        """``_plan_run``'s step in one domain (``(level, index)``) for the gangs next in
        ``queue``'s line alike ``(core, shape)`` (``_alike_core``): the gangs planned (taken
        off the line), and whether the domain takes no more of them."""
        line = by_queue[queue]
        level, index = domain
        core, shape = alike_to
        view = session.view()
        tree = tree_for(view.table, self._settings.topology_keys)
        demand = demand_of(core)
        size = len(core)
        fill = self._fills.fill(view, core[0], tree, domain, len(line) * size)
        whole = sum(count for _, count in fill) // size  # gangs the domain takes
        run: list[tuple[Gang, list[Pod]]] = []
        for gang in line[:whole]:
            alike = _alike_core(gang)
            if alike is None or alike[1] != shape:
                break
            run.append((gang, alike[0]))
        if not run:
            return [], whole == 0  # (no gang at all fits there: the domain is full for them)
        names: list[str] = []
        devices: list[tuple[int, ...]] = []
        gpu = GpuAsk.of(core[0])
        left = len(run) * size
        for row, count in fill:
            count = min(count, left)
            names.extend([view.nodes[row].name] * count)
            if gpu.count:
                devices.extend(devices_in_turn(view, row, gpu, count))
            left -= count
            if not left:
                break
        config = self._settings.queues.config
        done: list[str] = []
        taken: list[tuple[str, dict[str, str], dict[str, tuple[int, ...]]]] = []
        ids = secrets.token_hex(6 * len(run))  # the plans' ids, drawn at once
        for at, (gang, members) in enumerate(run):
            if len(by_queue) > 1 and _turn(by_queue, usage, config) != queue:
                break
            if not admit(usage, queue, demand).ok:
                break
            uids = [p.uid for p in members]
            spots = dict(zip(uids, names[at * size : (at + 1) * size], strict=True))
            chosen = (
                dict(zip(uids, devices[at * size : (at + 1) * size], strict=True))
                if gpu.count
                else {}
            )
            key = gang.key
            taken.append((key, spots, chosen))
            usage.add(queue, demand)
            expires = now + (gang.timeout or self._settings.plan_ttl)
            plan = Plan.of(gang, spots, now, expires, queue=queue, id=ids[12 * at : 12 * at + 12])
            plan.devices.update(chosen)
            session.plans[key] = plan
            self.book.reasons.pop(key, None)
            done.append(key)
        if taken:
            session.reserve_alike(taken, core[0].requests, gpu)
        full = len(done) == whole
        if full:
            # The domain takes no more gangs of this shape: the next one would try it first
            # (``DemandMemo.repeat``), find no room and search; it may as well search at once.
            self._demand.winner = None
        del line[: len(done)]
        return done, full

    def _queue_of(self, gang: Gang, config: QueueConfig) -> str:
        names = self._facts.queues(gang, config, self._queue_names)
        if len(names) > 1:
            gang.problem = (
                gang.problem or f"members name different queues ({', '.join(sorted(names))})"
            )
        return min(names) or config.default_queue

    def _allocate(
        self, session: Session, view: NodeView, members: Sequence[Pod], gang: Gang
    ) -> TopologyAllocation:
        """``allocate_topology`` for a gang's core (failures remembered per view, see
        ``FailedPlacements``); a failure caused by the ask, not capacity, has a ``reason``."""
        ask, problem = ask_of(gang.members)
        placement = session.snapshot.placement if gang.bound else {}
        pinned = sorted({placement.get(p.uid) or p.node_name for p in gang.bound} - {""})

        def compute() -> TopologyAllocation:
            if problem:
                return TopologyAllocation(unplaced=list(members), reason=problem)
            tree = tree_for(view.table, self._settings.topology_keys)
            return allocate_topology(
                view,
                members,
                tree=tree,
                ask=ask,
                strategy=self._settings.strategy,
                pinned=pinned,
                memo=self._demand,
            )

        return self._failed.place(view, members, (ask, problem), pinned, compute)

    def _tidy(self, session: Session, gangs: dict[str, Gang], now: float) -> None:
        """Drop plans whose gang is gone, done, or late; forget stale reasons."""
        fulfilled, dropped = lapsed(session.plans, gangs, now, self._settings.plan_ttl)
        for key in fulfilled:
            del session.plans[key]
        for lapse in dropped:
            self.book.drop(lapse.gang, lapse.why, session)
            self.book.note(
                Kind.PLAN_EXPIRED if lapse.expired else Kind.PLAN_RELEASED, lapse.gang, lapse.why
            )
        for key in list(self.book.reasons):
            if key not in gangs:
                del self.book.reasons[key]

    def _plan_core(
        self,
        session: Session,
        gang: Gang,
        now: float,
        usage: QueueUsage,
        queue: str,
        *,
        first: bool,
    ) -> tuple[bool, Reservation | None]:
        """Plan ``gang``'s missing core members; returns whether it got a plan, and the room
        held for it when it is ``first`` in line and blocked."""
        # Set again only when this gang is placed inside one domain (what ``_plan_run``
        # follows): not when a failure is replayed, nor when preemption makes room.
        self._demand.last = None
        if gang.problem:
            self.book.reasons[gang.key] = Reason(Why.PROBLEM, gang.problem)
            return False, None
        if len(gang.members) < gang.min_member:
            self.book.reasons[gang.key] = short_reason(len(gang.members), gang.min_member)
            return False, None
        facts = self._facts.core(gang)
        core, demand = facts.pods, facts.demand
        blocked = admit(usage, queue, demand)
        if not blocked.ok:
            self.book.reasons[gang.key] = Reason(Why.QUOTA, blocked.reason)
            return False, None
        view = self._view_for(session, gang.key, facts.runtimes)
        # The first in line tries for a hold, unless one of its shape found no room to hold
        # in this cycle already (see below): then it may be carried over like the rest.
        if (
            self._still.still(gang, view)
            and (not first or self._no_hold(gang))
            and not self._evictions.may_preempt(session, facts.priority, queue)
        ):
            return False, None  # no node gained room since it found none: its reason stands
        allocation = self._allocate(session, view, core, gang)
        # Its topology ask, not capacity, blocks it: preemption is not topology-aware, so it
        # would free room outside the domain it asks for.
        asked = allocation.reason
        if (
            not allocation.complete
            and not asked
            and self._evictions.preempt(session, gang, core, queue, usage, now)
        ):
            return True, None
        if not allocation.complete:
            reason = asked or why_unplaced(view, allocation, gang.min_member)
            held = None
            if first and (not asked or waits_for_domain(gang)):
                # First in line and blocked by capacity (or by its required domain): hold the
                # soonest-freeing room for it (inside one such domain).
                domains = domains_for(gang, view, self._settings.topology_keys)
                shape = self._facts.hold_shape(gang)  # None exactly when domains are held
                if shape is None or shape not in self._no_room:
                    held = hold_for(
                        replace(session.snapshot, view=session.backfill_view()),
                        gang.key,
                        core,
                        domains,
                        now=self._settings.wall(),
                        default_runtime=self._settings.default_runtime,
                        strategy=self._settings.strategy,
                        memo=self._ending,
                    )
                if held is None and shape is not None:
                    # Room only fills up during a cycle: an alike gang finds none either.
                    self._no_room.add(shape)
                if held is not None:
                    session.hold(gang.key, held.holds, held.start)
                    wait = max(held.start - self._settings.wall(), 0.0)
                    nodes = ", ".join(sorted(held.holds))
                    reason += f"; reserved {nodes}, expected to start in {wait:.0f}s"
            if held is None:  # a reason without the hold of the first in line: carried over
                self._still.remember(gang, view, core)
            self.book.reasons[gang.key] = Reason(Why.NO_ROOM, reason)
            return False, held
        session.reserve(gang.key, allocation.placed, allocation.devices)
        usage.add(queue, demand)
        expires = now + (gang.timeout or self._settings.plan_ttl)
        plan = Plan.of(gang, allocation.placed, now, expires, queue=queue)
        plan.devices.update(allocation.devices)
        session.plans[gang.key] = plan
        self.book.reasons.pop(gang.key, None)
        return True, None

    def _no_hold(self, gang: Gang) -> bool:
        """Whether a gang like ``gang`` (the same core to place, no domain asked for) found no
        room to hold in this cycle: room only fills up during a cycle, so it finds none."""
        return bool(self._no_room) and self._facts.hold_shape(gang) in self._no_room

    def _view_for(self, session: Session, gang: str, runtimes: Sequence[float | None]) -> NodeView:
        """The held room is off limits unless ``gang`` owns it or its core's declared
        ``runtimes`` end before it starts."""
        owner, holds, until = session.holds
        if holds and (gang == owner or ends_before(runtimes, self._settings.wall(), until)):
            return session.backfill_view()
        return session.view()


def _turn(by_queue: dict[str, list[Gang]], usage: QueueUsage, config: QueueConfig) -> str:
    """The queue whose gang comes next: weighted DRF across queues (hierarchically)."""
    if len(by_queue) == 1:
        return next(iter(by_queue))  # one queue left: its turn, whatever the shares
    return min(by_queue, key=lambda q: (order_key(usage, q) if q in config.queues else (), q))


def _alike_core(gang: Gang) -> tuple[list[Pod], tuple[object, ...], Ask | None] | None:
    """A gang's core members when none is bound, it has no problem, and every member is
    alike (one requests, node constraints, whole-GPU or no ask, and topology ask), with what
    makes them alike (their number first) and their topology ask; ``None`` otherwise (see
    ``Planner._plan_run``)."""
    if gang.problem or gang.bound or gang.min_member <= 0:
        return None
    members = gang.members
    if len(members) < gang.min_member:
        return None
    shapes = _SHAPES.of_each(members)
    shape = shapes[0]
    if shape[2].shared or shape[3][1]:
        return None  # a GPU share, or members that contradict each other's topology ask
    if shapes.count(shape) != len(shapes):  # (equal shapes are one object: no fields compared)
        return None
    return gang.pending[: gang.min_member], (gang.min_member, *shape), shape[3][0]


_Shape = tuple[Resources, Constraint, GpuAsk, tuple[Ask | None, str]]


def _member_shape(pod: Pod) -> _Shape:
    """What makes members alike for ``_alike_core`` (their topology ask as ``ask_of`` of the
    pod alone: members with the same one have it as their gang's ask). Equal shapes are one
    object (``_KINDS``), so comparing alike members' shapes compares no fields."""
    return _KINDS((pod.requests, constraint_of(pod), GpuAsk.of(pod), (pod_ask(pod), "")))


#: Every distinct ``_member_shape``, one object per shape.
_KINDS: Interned[_Shape] = Interned(4096)


#: ``_member_shape`` per pod object.
_SHAPES = PodFact(_member_shape, ahead=True, only=is_member)


def _unplanned_pending(gang: Gang, plan: Plan | None) -> bool:
    """Whether a pending member of ``gang`` is not in ``plan`` (an elastic one to place)."""
    planned = plan.members if plan is not None else {}
    return not all(map(planned.__contains__, map(_UID, gang.pending)))


_UID = operator.attrgetter("uid")
