"""The planner: a scheduling cycle over every pending gang, and the plans it holds.

kube-scheduler sees one pod at a time; the planner sees the whole pending set. A cycle takes a
snapshot, orders the gangs that are ready (enough members exist) fairly — higher priority
first, then older first — and places each gang's missing core members all at once, inside
one network-topology domain when it can (``actions.topology`` over ``actions.allocate``). A
gang that fits gets a **plan** (member -> node) whose room is reserved in the cache, so every
other pod and gang sees it as taken; a gang that does not fit holds nothing and gets a reason.
Elastic members beyond min-member are placed after every waiting gang's core, one by one, only
where room is left. A member moved by ``replan_member`` stays in its gang's required domain,
and a gang first in line that waits for its required domain gets its head-of-line hold inside
one such domain. Elastic members ignore topology, and so does preemption, which is why a gang
kept waiting by its topology ask (not by capacity) evicts nothing.

Plans expire (``plan_ttl``) if the gang does not start; binds finish them.
"""

from __future__ import annotations

import operator
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from app.core.actions import preempt, reclaim
from app.core.actions.allocate import allocate, why_unplaced
from app.core.actions.allocate_in_domain import TopologyAllocation, allocate_topology
from app.core.actions.backfill import Reservation, may_backfill, reserve_for
from app.core.actions.victims import Unit, running_units
from app.core.model.gang import Gang, collect_gangs, gang_spec
from app.core.model.queues import QueueConfig
from app.core.model.status import SUCCESS, Status
from app.core.model.values import Pod
from app.core.policies.drf import order_key
from app.core.policies.proportion import admit
from app.core.state.cache import ClusterCache, NodeView, Snapshot
from app.core.state.domains import DEFAULT_KEYS, ask_of, tree_for
from app.core.state.queuefile import QueueFile
from app.core.state.queueusage import QueueUsage, demand_of, measure, queue_name


@dataclass(slots=True)
class Plan:
    """Where a gang's members go. ``core`` members count towards min-member."""

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

    def node_of(self, uid: str) -> str | None:
        """The planned node of member ``uid``."""
        return self.members.get(uid)

    @classmethod
    def of(
        cls,
        gang: Gang,
        placed: dict[str, str],
        now: float,
        expires: float,
        victims: frozenset[str] = frozenset(),
    ) -> Plan:
        """A new plan for ``gang``'s core placed as ``placed``."""
        return cls(
            gang=gang.key,
            members=dict(placed),
            core=frozenset(placed),
            min_member=gang.min_member,
            created=now,
            expires=expires,
            victims=victims,
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the planner says about one pod in filter.

    ``gang`` is empty for a pod that is not in a gang (schedule it on its own); otherwise
    ``node`` is its planned node, or empty with ``reason`` saying why it must wait.
    """

    gang: str = ""
    node: str = ""
    reason: str = ""


#: Per gang key: its member pods and their bound state when the gang was built, and the gang.
GangMemo = dict[str, tuple[list[Pod], tuple[bool, ...], "Gang | None"]]


def gangs_of(snapshot: Snapshot, memo: GangMemo | None = None) -> dict[str, Gang]:
    """Every gang in the snapshot (only gang members are looked at).

    With ``memo`` (kept by the caller from one call to the next), a gang whose members are the
    very same pod objects, bound or not as before, is copied from the last call instead of
    rebuilt: pods are immutable, so it would come out the same. A cycle then costs one pass
    over member uids rather than re-reading every member's labels.
    """
    pods = snapshot.pods
    if memo is None:
        return collect_gangs((pods[uid] for uid in snapshot.gang_members), snapshot.holds_node)
    groups: dict[str, list[Pod]] = {}
    for uid, key in snapshot.gang_members.items():
        groups.setdefault(key, []).append(pods[uid])
    holds = snapshot.holds_node
    fresh: GangMemo = {}
    gangs: dict[str, Gang] = {}
    for key, members in groups.items():
        state = tuple(map(holds, members))
        old = memo.get(key)
        if (
            old is not None
            and old[1] == state
            and len(old[0]) == len(members)
            and all(map(operator.is_, old[0], members))
        ):
            gang = old[2]
        else:
            gang = collect_gangs(members, holds).get(key)
        fresh[key] = (members, state, gang)
        if gang is not None:
            gangs[key] = replace(gang)  # a copy: the cycle may set ``problem``
    memo.clear()
    memo.update(fresh)
    return gangs


def _signature(pod: Pod) -> tuple[object, ...]:
    """What ``allocate`` looks at in a member: requests and node constraints."""
    return (pod.requests, tuple(sorted(pod.node_selector.items())), pod.tolerations,
            pod.required_affinity)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Eviction:
    """Whole units of work to evict so that gang ``preemptor`` can start; ``why`` is told to
    the victims in an Event."""

    preemptor: str
    units: tuple[Unit, ...]
    why: str


#: How many domains a ``topology-required`` gang's head-of-line reservation considers.
_DOMAINS_TRIED = 8


class Planner:
    """Holds plans and runs cycles; thread-safe (one lock, cycles are short)."""

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
        min_runtime: float = 60.0,
        preemption: bool = True,
        topology_keys: Sequence[str] = DEFAULT_KEYS,
    ) -> None:
        self._cache = cache
        self._topology_keys = tuple(topology_keys)  # broadest first (``app.core.state.domains``)
        self._min_runtime = min_runtime
        self._preemption = preemption
        self._evictions: list[Eviction] = []
        self._blocked: dict[str, float] = {}  # victim unit key -> until (a PDB refused it)
        self._units_memo: tuple[tuple[int, int, int], Snapshot, list[Unit]] | None = None
        self._default_runtime = default_runtime
        self._wall = wall
        self._head: Reservation | None = None
        self._queues = queues or QueueFile()
        self._scheduler_name = scheduler_name
        self._strategy = strategy
        self._plan_ttl = plan_ttl
        self._clock = clock
        self._lock = threading.RLock()
        self._plans: dict[str, Plan] = {}
        self._reasons: dict[str, str] = {}
        self._last_generation = -1
        self.cycles = 0
        # Memos that keep a cycle's cost proportional to what changed (see ``gangs_of``,
        # ``_pod_queue`` and ``_allocate``).
        self._gang_memo: GangMemo = {}
        self._lowest: tuple[int, int | None] | None = None
        self._queue_memo: dict[str, tuple[Pod, QueueConfig, str]] = {}
        self._failed_view: NodeView | None = None
        self._failed: dict[tuple[object, ...], tuple[list[tuple[object, ...]], str]] = {}

    # -- queries -------------------------------------------------------------------------

    def plan(self, gang: str) -> Plan | None:
        """The live plan of ``gang``, if any."""
        with self._lock:
            return self._plans.get(gang)

    def verdict(self, pod: Pod) -> Verdict:
        """Where ``pod`` should go per the plans, planning on demand if it has no plan yet."""
        spec = gang_spec(pod)
        if spec is None:
            return Verdict()
        with self._lock:
            plan = self._plans.get(spec.key)
            if plan is None or pod.uid not in plan.members:
                self.cycle()
                plan = self._plans.get(spec.key)
            if plan is not None and pod.uid in plan.members:
                waiting = self._victims_left(plan)
                if waiting:
                    return Verdict(spec.key, "", f"gang {spec.key}: {self._reasons[spec.key]}")
                return Verdict(spec.key, plan.members[pod.uid])
            reason = self._reasons.get(spec.key) or "waiting for the planner"
            return Verdict(spec.key, "", f"gang {spec.key}: {reason}")

    @property
    def min_runtime(self) -> float:
        """How long running work is protected from preemption unless it says otherwise."""
        return self._min_runtime

    @property
    def queues(self) -> QueueFile:
        """The queue configuration source."""
        return self._queues

    def usage(self, pending: Sequence[Pod] = ()) -> QueueUsage:
        """What every queue holds now (plus the demand of ``pending``)."""
        view = self._cache.view()
        return measure(
            self._cache.queue_usage(),
            view.allocatable.sum(axis=0),
            self._queues.config,
            self._scheduler_name,
            pending,
        )

    def quota_check(self, pod: Pod) -> Status:
        """For a pod scheduled on its own: whether its queue admits it now (see ``admit``)."""
        config = self._queues.config
        queue = queue_name(pod, config, self._scheduler_name)
        if queue is None:
            return SUCCESS
        return admit(self.usage(), queue, demand_of([pod]))

    def replan_member(self, pod: Pod, candidates: Sequence[str]) -> Verdict:
        """Move a planned member onto one of ``candidates`` (kube-scheduler removed its node).

        If no candidate has room, the whole plan is released and the reason says so.
        """
        spec = gang_spec(pod)
        assert spec is not None
        with self._lock:
            plan = self._plans.get(spec.key)
            if plan is None or pod.uid not in plan.members:
                return self.verdict(pod)
            old = plan.members[pod.uid]
            self._cache.unreserve([pod.uid])
            view = self._cache.view()
            allowed = np.zeros(len(view.nodes), dtype=bool)
            for name in candidates:
                i = view.index.get(name)
                if i is not None:
                    allowed[i] = True
            allowed &= self._same_required_domain(view, spec.key, old)
            placed = allocate(view, [pod], strategy=self._strategy, allowed={pod.uid: allowed})
            node = placed.placed.get(pod.uid)
            if node and self._cache.reserve({pod.uid: node}).ok:
                plan.members[pod.uid] = node
                return Verdict(spec.key, node)
            why = f"planned node {old} was filtered out by kube-scheduler and no other node fits"
            self._release(spec.key, why)
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
        tree = tree_for(view.table, self._topology_keys)
        level = tree.level(ask.level)
        if level is None:
            return everywhere
        same: np.ndarray = tree.ids[level] == tree.ids[level, row]
        return same

    def release(self, gang: str, reason: str) -> None:
        """Drop ``gang``'s plan and its reservations (bind timeout, rollback)."""
        with self._lock:
            self._release(gang, reason)

    def mark_released(self, gang: str) -> None:
        """The gang's core has reached bind together: later members may bind at once."""
        with self._lock:
            plan = self._plans.get(gang)
            if plan is not None:
                plan.released = True

    def to_nudge(self) -> list[tuple[str, Pod]]:
        """Planned members not yet nudged (so kube-scheduler retries them now); marks them."""
        with self._lock:
            snapshot = self._cache.snapshot()
            out = []
            for plan in self._plans.values():
                if plan.victims and self._victims_left(plan):
                    continue  # nudged once the victims are gone
                for uid in plan.members:
                    pod = snapshot.pods.get(uid)
                    if uid not in plan.nudged and pod is not None and not snapshot.holds_node(pod):
                        plan.nudged.add(uid)
                        out.append((plan.gang, pod))
            return out

    # -- the cycle -----------------------------------------------------------------------

    def cycle(self, *, force: bool = False) -> list[str]:
        """Plan every ready gang in fair order; returns the gangs that got a new plan.

        Skips the work when nothing changed since the last cycle (unless ``force``).
        """
        with self._lock:
            now = self._clock()
            if (
                not force
                and self._cache.generation == self._last_generation
                and not any(p.expires <= now for p in self._plans.values())
            ):
                return []
            if not self._plans and not self._cache.gang_member_count:
                self._last_generation = self._cache.generation
                return []
            self.cycles += 1
            snapshot = self._cache.snapshot()
            gangs = gangs_of(snapshot, self._gang_memo)
            if len(self._queue_memo) > 2 * len(snapshot.gang_members) + 1024:
                members = snapshot.gang_members
                self._queue_memo = {u: m for u, m in self._queue_memo.items() if u in members}
            self._tidy(snapshot, gangs, now)
            config = self._queues.config
            usage = measure(
                self._cache.queue_usage(),
                snapshot.view.allocatable.sum(axis=0),
                config,
                self._scheduler_name,
            )
            by_queue: dict[str, list[Gang]] = {}
            for gang in gangs.values():
                if gang.running or gang.key in self._plans:
                    continue
                queue = self._queue_of(gang, config)
                by_queue.setdefault(queue, []).append(gang)
            for line in by_queue.values():
                line.sort(key=lambda g: (-g.priority, g.created, g.key))
            planned = []
            self._head = None
            while by_queue:
                # Weighted DRF across queues (hierarchically), priority then age within one.
                queue = min(
                    by_queue,
                    key=lambda q: (order_key(usage, q) if q in config.queues else (), q),
                )
                gang = by_queue[queue].pop(0)
                if not by_queue[queue]:
                    del by_queue[queue]
                if self._plan_core(gang, now, usage, queue):
                    planned.append(gang.key)
            if self._head is None:
                self._cache.set_holds("", {}, 0.0)
            # Only running or planned gangs can take elastic members (see ``_plan_extras``).
            extras = [g for g in gangs.values() if g.running or g.key in self._plans]
            for gang in sorted(extras, key=lambda g: (-g.priority, g.created, g.key)):
                self._plan_extras(gang, now, usage, self._queue_of(gang, config))
            self._last_generation = self._cache.generation
            return planned

    def _queue_of(self, gang: Gang, config: QueueConfig) -> str:
        names = {self._pod_queue(p, config) for p in gang.members}
        if len(names) > 1:
            gang.problem = (
                gang.problem or f"members name different queues ({', '.join(sorted(names))})"
            )
        return min(names) or config.default_queue

    def _pod_queue(self, pod: Pod, config: QueueConfig) -> str:
        """``queue_name`` of ``pod`` (``""`` for none), remembered per pod object and config."""
        hit = self._queue_memo.get(pod.uid)
        if hit is None or hit[0] is not pod or hit[1] is not config:
            name = queue_name(pod, config, self._scheduler_name) or ""
            hit = self._queue_memo[pod.uid] = (pod, config, name)
        return hit[2]

    def _allocate(self, view: NodeView, members: Sequence[Pod], gang: Gang) -> TopologyAllocation:
        """``allocate_topology`` for a gang's core, remembering failures on ``view``.

        Placement depends only on the view, the members' signatures, the gang's topology ask
        and where its running members are, so a gang shaped like one that just failed on the
        same view fails the same way (the usual queue of identical jobs behind a full
        cluster): its answer is rebuilt without placing it again. A failure caused by the ask
        (not capacity) carries its ``reason``.
        """
        if view is not self._failed_view:
            self._failed_view, self._failed = view, {}
        ask, problem = ask_of(gang.members)
        placement = self._cache.snapshot().placement if gang.bound else {}
        pinned = sorted({placement.get(p.uid) or p.node_name for p in gang.bound} - {""})
        signatures = [_signature(p) for p in members]
        key = (frozenset(Counter(signatures).items()), ask, problem, tuple(pinned))
        failed = self._failed.get(key)
        if failed is not None:
            pool = list(zip(signatures, members, strict=True))
            out = []
            for wanted in failed[0]:
                i = next(i for i, (sig, _) in enumerate(pool) if sig == wanted)
                out.append(pool.pop(i)[1])
            return TopologyAllocation(unplaced=out, reason=failed[1])
        if problem:
            allocation = TopologyAllocation(unplaced=list(members), reason=problem)
        else:
            tree = tree_for(view.table, self._topology_keys)
            allocation = allocate_topology(
                view, members, tree=tree, ask=ask, strategy=self._strategy, pinned=pinned
            )
        if not allocation.complete:
            self._failed[key] = ([_signature(p) for p in allocation.unplaced], allocation.reason)
        return allocation

    def _tidy(self, snapshot: Snapshot, gangs: dict[str, Gang], now: float) -> None:
        """Drop plans whose gang is gone, done, or late; forget stale reasons."""
        for key in list(self._plans):
            plan = self._plans[key]
            gang = gangs.get(key)
            if gang is None:
                self._release(key, "gang is gone")
                continue
            live = {p.uid for p in gang.members}
            unbound = [
                u for u in plan.members if u in live and u not in {p.uid for p in gang.bound}
            ]
            if not unbound:
                del self._plans[key]  # every planned member holds its node: plan fulfilled
            elif any(u not in live for u in plan.members if u in plan.core) and not gang.running:
                self._release(key, "a planned member was deleted")
            elif plan.expires <= now and not gang.running:
                self._release(
                    key, f"plan expired: the gang did not start within {self._plan_ttl:g}s"
                )
        for key in list(self._reasons):
            if key not in gangs:
                del self._reasons[key]

    def _plan_core(self, gang: Gang, now: float, usage: QueueUsage, queue: str) -> bool:
        if gang.problem:
            self._reasons[gang.key] = gang.problem
            return False
        missing = gang.min_member - len(gang.bound)
        if len(gang.members) < gang.min_member:
            self._reasons[gang.key] = (
                f"waiting for members: {len(gang.members)} of {gang.min_member} exist"
            )
            return False
        core = gang.pending[:missing]
        demand = demand_of(core)
        blocked = admit(usage, queue, demand)
        if not blocked.ok:
            self._reasons[gang.key] = blocked.reason
            return False
        view = self._view_for(gang.key, core)
        allocation = self._allocate(view, core, gang)
        # Its topology ask, not capacity, blocks it: preemption is not topology-aware, so it
        # would free room outside the domain it asks for.
        asked = allocation.reason
        if not allocation.complete and not asked and self._preempt(gang, core, queue, usage, now):
            return True
        if not allocation.complete:
            reason = asked or why_unplaced(view, allocation, gang.min_member)
            if self._head is None and (not asked or self._waits_for_domain(gang)):
                # First in line and blocked by capacity (or by its required domain): hold the
                # soonest-freeing room for it (inside one such domain).
                self._head = self._reserve_head(gang.key, core, self._domains_for(gang, view))
                if self._head is not None:
                    wait = max(self._head.start - self._wall(), 0.0)
                    nodes = ", ".join(sorted(self._head.holds))
                    reason += f"; reserved {nodes}, expected to start in {wait:.0f}s"
            self._reasons[gang.key] = reason
            return False
        reserved = self._cache.reserve(allocation.placed)
        if not reserved.ok:
            self._reasons[gang.key] = f"plan could not be reserved ({reserved}); retrying"
            return False
        usage.add(queue, demand)
        ttl = gang.timeout or self._plan_ttl
        self._plans[gang.key] = Plan.of(gang, allocation.placed, now, now + ttl)
        self._reasons.pop(gang.key, None)
        return True

    def _preempt(
        self, gang: Gang, core: Sequence[Pod], queue: str, usage: QueueUsage, now: float
    ) -> bool:
        """Plan ``gang`` onto room that evicting whole lower-priority gangs (or, for a queue
        below its guarantee, borrowed work) would free; queue those evictions."""
        if not self._preemption:
            return False
        config = self._queues.config
        limits = config.queues.get(queue)
        reclaimable = limits is not None and np.asarray(limits.guaranteed).any()
        lowest = self._lowest_running_priority()
        if not reclaimable and (lowest is None or lowest >= max(p.priority for p in core)):
            return False  # only strictly lower-priority work can give way, and none runs
        wall = self._wall()
        self._blocked = {k: t for k, t in self._blocked.items() if t > wall}
        snapshot, all_units = self._running_units(config, wall)
        taken = {uid for plan in self._plans.values() for uid in plan.victims}
        units = [
            u
            for u in all_units
            if u.key not in self._blocked and not any(p.uid in taken for p in u.pods)
        ]
        priority = max(p.priority for p in core)
        found = preempt.victims_for(
            snapshot, core, priority, units, now=wall, strategy=self._strategy
        )
        why = f"preempted by gang {gang.key} (priority {priority})"
        if found is None and queue in config.queues:
            guaranteed = np.asarray(config.queues[queue].guaranteed, np.int64)
            within = (usage.of(queue) + demand_of(core) <= guaranteed) | (guaranteed == 0)
            if guaranteed.any() and within.all():
                found = reclaim.victims_for(
                    snapshot, core, usage, queue, units, strategy=self._strategy
                )
                why = (
                    f"reclaimed by queue {queue} for gang {gang.key} (within its guaranteed share)"
                )
        if found is None:
            return False
        victims, allocation = found
        uids = frozenset(p.uid for u in victims for p in u.pods)
        self._cache.reserve(allocation.placed, force=True)
        usage.add(queue, demand_of(core))
        expires = now + (gang.timeout or self._plan_ttl) + self._plan_ttl
        self._plans[gang.key] = Plan.of(gang, allocation.placed, now, expires, uids)
        names = ", ".join(sorted({u.key for u in victims}))
        self._reasons[gang.key] = f"waiting for {len(uids)} evicted pods to leave ({names})"
        self._evictions.append(Eviction(gang.key, tuple(victims), why))
        return True

    def _lowest_running_priority(self) -> int | None:
        """The lowest priority of any pod holding a node (``None``: none), once per cache
        generation: every gang that does not fit asks, and the answer rarely changes."""
        generation = self._cache.generation
        if self._lowest is None or self._lowest[0] != generation:
            snapshot = self._cache.snapshot()
            held = [p.priority for p in snapshot.pods.values() if snapshot.holds_node(p)]
            self._lowest = (generation, min(held, default=None))
        return self._lowest[1]

    def _running_units(self, config: QueueConfig, wall: float) -> tuple[Snapshot, list[Unit]]:
        """The snapshot and its victim units, computed once per cache generation and second
        (every gang that does not fit asks; protection by age changes by the second)."""
        key = (self._cache.generation, int(wall), id(config))
        if self._units_memo is None or self._units_memo[0] != key:
            snapshot = replace(self._cache.snapshot(), view=self._cache.backfill_view())
            units = running_units(
                snapshot,
                gangs_of(snapshot),
                lambda p: queue_name(p, config, self._scheduler_name),
                now=wall,
                min_runtime=self._min_runtime,
            )
            self._units_memo = (key, snapshot, units)
        return self._units_memo[1], self._units_memo[2]

    def _victims_left(self, plan: Plan) -> int:
        """How many of ``plan``'s victims are still there."""
        left = 0
        for uid in plan.victims:
            pod = self._cache.pod(uid)
            if pod is not None and not pod.terminal:
                left += 1
        return left

    def take_evictions(self) -> list[Eviction]:
        """The evictions decided since the last call (the loop carries them out)."""
        with self._lock:
            out, self._evictions = self._evictions, []
            return out

    def eviction_refused(self, eviction: Eviction, unit_key: str, why: str) -> None:
        """A PodDisruptionBudget (or the API) refused evicting ``unit_key``: leave that work
        alone for a while and plan the preemptor again, choosing other victims."""
        with self._lock:
            self._blocked[unit_key] = self._wall() + 60.0
            self._release(eviction.preemptor, f"eviction of {unit_key} refused ({why})")

    def _view_for(self, gang: str, pods: Sequence[Pod]) -> NodeView:
        """The held room is off limits unless ``gang`` owns it or ``pods`` end before it starts."""
        owner, holds, until = self._cache.holds
        if holds and (gang == owner or may_backfill(pods, self._wall(), until)):
            return self._cache.backfill_view()
        return self._cache.view()

    def _waits_for_domain(self, gang: Gang) -> bool:
        """Whether ``gang`` waits only because no domain of its required level has room (a
        valid ``topology-required`` ask and no running members pinning it elsewhere)."""
        ask, problem = ask_of(gang.members)
        return ask is not None and ask.required and not problem and not gang.bound

    def _domains_for(self, gang: Gang, view: NodeView) -> list[np.ndarray] | None:
        """Row masks of the domains a ``topology-required`` gang could be reserved in (the
        ``_DOMAINS_TRIED`` with the most GPUs that could hold it; none for an unknown level),
        or None: the gang asks for no domain, anywhere will do."""
        ask, problem = ask_of(gang.members)
        if ask is None or not ask.required or problem:
            return None
        tree = tree_for(view.table, self._topology_keys)
        level = tree.level(ask.level)
        if level is None:
            return []  # an unknown level: nowhere to hold room
        need = np.asarray(demand_of(gang.pending[: gang.min_member - len(gang.bound)]))
        capacity = tree.sums(level, view.allocatable)
        big_enough = np.flatnonzero((capacity >= need).all(axis=1))
        order = big_enough[np.argsort(-capacity[big_enough, 0], kind="stable")]
        return [tree.ids[level] == d for d in order[:_DOMAINS_TRIED].tolist()]

    def _reserve_head(
        self, gang: str, core: Sequence[Pod], domains: list[np.ndarray] | None = None
    ) -> Reservation | None:
        """Hold the soonest-freeing room for ``gang`` (inside one of ``domains`` if given)."""
        snapshot = replace(self._cache.snapshot(), view=self._cache.backfill_view())
        options = [
            reserve_for(
                snapshot,
                gang,
                core,
                now=self._wall(),
                default_runtime=self._default_runtime,
                strategy=self._strategy,
                within=mask,
            )
            for mask in (domains if domains is not None else [None])
        ]
        found = [r for r in options if r is not None]
        reservation = min(found, key=lambda r: r.start) if found else None
        if reservation is not None:
            self._cache.set_holds(gang, reservation.holds, reservation.start)
        return reservation

    def backfill_ok(self, pod: Pod) -> bool:
        """Whether a pod scheduled on its own may use held room (it ends before it is due)."""
        owner, holds, until = self._cache.holds
        return bool(holds) and may_backfill([pod], self._wall(), until)

    @property
    def reservation(self) -> Reservation | None:
        """The head-of-line reservation made by the last cycle, if any."""
        return self._head

    def _plan_extras(self, gang: Gang, now: float, usage: QueueUsage, queue: str) -> None:
        """Elastic members beyond min-member, placed one by one where room is left."""
        if gang.problem or not (gang.running or gang.key in self._plans):
            return
        plan = self._plans.get(gang.key)
        planned = set(plan.members) if plan else set()
        room = (
            gang.limit
            - len(gang.bound)
            - len([u for u in planned if u not in {p.uid for p in gang.bound}])
        )
        extras = [p for p in gang.pending if p.uid not in planned][: max(room, 0)]
        for pod in extras:
            if not admit(usage, queue, demand_of([pod])).ok:
                self._reasons[gang.key] = "elastic members wait for quota"
                break
            allocation = allocate(self._cache.view(), [pod], strategy=self._strategy)
            node = allocation.placed.get(pod.uid)
            if not node or not self._cache.reserve({pod.uid: node}).ok:
                self._reasons[gang.key] = "elastic members wait for free capacity"
                break
            if plan is None:
                plan = self._plans[gang.key] = Plan(
                    gang=gang.key, members={}, core=frozenset(), min_member=gang.min_member,
                    created=now, expires=now + (gang.timeout or self._plan_ttl), released=True,
                )  # fmt: skip
            plan.members[pod.uid] = node
            usage.add(queue, demand_of([pod]))

    def _release(self, gang: str, reason: str) -> None:
        plan = self._plans.pop(gang, None)
        if plan is not None:
            self._cache.unreserve(plan.members)
        self._reasons[gang] = reason

    # -- debug ---------------------------------------------------------------------------

    def describe(self) -> list[dict[str, Any]]:
        """Every gang with its state, members seen/bound, plan, age and current reason."""
        with self._lock:
            snapshot = self._cache.snapshot()
            gangs = gangs_of(snapshot)
            now_wall = time.time()
            rows = []
            for key in sorted(gangs):
                gang = gangs[key]
                plan = self._plans.get(key)
                if gang.running and not gang.pending:
                    state = "running"
                elif plan is not None and plan.released:
                    state = "binding" if not gang.running else "running"
                elif plan is not None:
                    state = "planned"
                else:
                    state = "running" if gang.running else "waiting"
                names = {p.uid: p.name for p in gang.members}
                rows.append(
                    {
                        "gang": key,
                        "state": state,
                        "minMember": gang.min_member,
                        "maxMember": gang.max_member,
                        "members": len(gang.members),
                        "bound": len(gang.bound),
                        "priority": gang.priority,
                        "ageSeconds": round(max(now_wall - gang.created, 0.0), 1)
                        if gang.created
                        else None,
                        "plan": {names.get(u, u): n for u, n in plan.members.items()}
                        if plan
                        else {},
                        "elastic": sorted(
                            names.get(u, u) for u in plan.members if u not in plan.core
                        )
                        if plan
                        else [],
                        "reason": self._reasons.get(key, ""),
                    }
                )
            return rows
