"""What keeps a cycle's cost proportional to what changed: gangs rebuilt only when their
members change, queue names read once per pod, a failed placement remembered per view, and
a gang that found no room carried over while it still cannot fit."""

from __future__ import annotations

import itertools
import operator
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from app.core.actions.allocate import FitBound
from app.core.actions.allocate_in_domain import TopologyAllocation
from app.core.gpu.ask import GpuAsk
from app.core.model.gang import Gang, collect_gang, collect_gangs, is_member
from app.core.model.podfacts import PodFact
from app.core.model.queues import QueueConfig
from app.core.model.runtime import declared_runtime
from app.core.model.values import Pod
from app.core.policies.registry import constraint_of
from app.core.state.cache import QueueKey, queue_key
from app.core.state.diff import changed_members
from app.core.state.domains import Ask, ask_of
from app.core.state.queueusage import demand_of, queue_name, resolve
from app.core.state.view import NodeView, Snapshot

if TYPE_CHECKING:
    from app.core.policies.interfaces import GangOrder

T = TypeVar("T")

#: Per gang key: its member pods and their bound state when the gang was built, and the gang.
GangEntries = dict[str, tuple[list[Pod], tuple[bool, ...], "Gang | None"]]


@dataclass
class GangMemo:
    """What ``gangs_of`` keeps from one call to the next: each gang as built, and the
    snapshot it was read from."""

    entries: GangEntries = field(default_factory=dict)
    snapshot: Snapshot | None = None


def gangs_of(snapshot: Snapshot, memo: GangMemo | None = None) -> dict[str, Gang]:
    """Every gang in the snapshot (only gang members are looked at).

    With ``memo`` (kept by the caller from one call to the next), only the gangs with a
    member that changed since the memo's snapshot (``changed_members``: its object, its
    assumed bind, its gang) are built again; the others are copied from the last call. Pods
    are immutable, so they would come out the same. A cycle then costs in proportion to the
    members that changed, not to every member of every gang (thousands wait in a cluster
    several times over capacity, and the loop cycles on every change).
    """
    pods = snapshot.pods
    if memo is None:
        return collect_gangs((pods[uid] for uid in snapshot.gang_members), snapshot.holds_node)
    if memo.snapshot is None:
        _rebuild(memo, snapshot)
    else:
        _patch(memo, memo.snapshot, snapshot, changed_members(memo.snapshot, snapshot))
    memo.snapshot = snapshot
    return {k: _copy(g) for k, (_, _, g) in memo.entries.items() if g is not None}


def _patch(memo: GangMemo, old: Snapshot, new: Snapshot, changed: frozenset[str]) -> None:
    """Build again the gangs of ``memo`` (read from ``old``) with a member in ``changed``."""
    before, after, pods = old.gang_members, new.gang_members, new.pods
    dirty = {before[u] for u in changed if u in before}
    joined: dict[str, list[str]] = {}  # per gang, its changed members now
    for uid in changed:
        key = after.get(uid)
        if key is not None:
            joined.setdefault(key, []).append(uid)
    dirty.update(joined)
    if not dirty:
        return
    entries, holds = memo.entries, new.holds_node
    for key in dirty:
        entry = entries.get(key)
        had = [p.uid for p in entry[0]] if entry is not None else []
        known = set(had)
        uids = [u for u in had if after.get(u) == key]
        uids += [u for u in joined.get(key, ()) if u not in known]
        if uids:
            members = [pods[u] for u in uids]
            state = tuple(map(holds, members))
            entries[key] = (members, state, collect_gang(members, state).get(key))
        else:
            entries.pop(key, None)


def _rebuild(memo: GangMemo, snapshot: Snapshot) -> None:
    """``memo``'s gangs read from every member in ``snapshot``."""
    pods, holds = snapshot.pods, snapshot.holds_node
    groups: dict[str, list[Pod]] = {}
    for uid, key in snapshot.gang_members.items():
        groups.setdefault(key, []).append(pods[uid])
    entries: GangEntries = {}
    for key, members in groups.items():
        state = tuple(map(holds, members))
        entries[key] = (members, state, collect_gang(members, state).get(key))
    memo.entries = entries


def _copy(gang: Gang) -> Gang:
    """``dataclasses.replace(gang)`` (a shallow copy), without its per-field introspection
    (a cycle copies every gang)."""
    return Gang(
        namespace=gang.namespace,
        name=gang.name,
        members=gang.members,
        min_member=gang.min_member,
        max_member=gang.max_member,
        timeout=gang.timeout,
        problem=gang.problem,
        bound=gang.bound,
        pending=gang.pending,
        group=gang.group,
        conflicts=gang.conflicts,
    )


@dataclass(frozen=True, slots=True)
class Core:
    """A gang's core (the members still to place for it to run) and what a cycle reads of
    it: summed requests (read-only), highest priority, each member's declared runtime."""

    pods: tuple[Pod, ...]
    demand: np.ndarray
    priority: int
    runtimes: tuple[float | None, ...]


@dataclass(slots=True)
class _Facts:
    members: list[Pod]  # kept alive: the memo is keyed by its id
    order: tuple[object, tuple[float, float, str]] | None = None
    queues: tuple[QueueConfig, frozenset[str]] | None = None
    core: Core | None = None
    #: ``hold_shape``'s answer, once known (a 1-tuple around it: ``None`` is an answer).
    hold_shape: tuple[tuple[Any, ...] | None] | None = None


def placement_shape(pods: Sequence[Pod]) -> tuple[Any, ...]:
    """What placing ``pods`` depends on: their requests and node constraints."""
    return tuple(sorted((tuple(p.requests), GpuAsk.of(p), constraint_of(p)) for p in pods))


class MemberFacts:
    """What a cycle derives from a gang's members alone — its place in line, the queues its
    members name, its core —, kept per gang while ``gangs_of`` hands out the very same
    members list (no member changed: the list's pods, bound or not, are as they were). With
    thousands of gangs waiting behind a full cluster, every cycle otherwise went over each
    one's members several times to find the gang blocked again."""

    #: Gangs kept at most; past it the memo starts over (lists of gone gangs pile up).
    LIMIT = 1 << 15

    def __init__(self) -> None:
        self._kept: dict[int, _Facts] = {}

    def _of(self, gang: Gang) -> _Facts:
        facts = self._kept.get(id(gang.members))
        if facts is None or facts.members is not gang.members:
            if len(self._kept) >= self.LIMIT:
                self._kept = {}
            facts = self._kept[id(gang.members)] = _Facts(gang.members)
        return facts

    def order(self, gang: Gang, policy: GangOrder) -> tuple[float, float, str]:
        """``policy.key(gang)``."""
        facts = self._of(gang)
        if facts.order is None or facts.order[0] is not policy:
            facts.order = (policy, policy.key(gang))
        return facts.order[1]

    def queues(self, gang: Gang, config: QueueConfig, names: QueueNames) -> frozenset[str]:
        """``names.of_members(gang.members, config)``."""
        facts = self._of(gang)
        if facts.queues is None or facts.queues[0] is not config:
            facts.queues = (config, frozenset(names.of_members(gang.members, config)))
        return facts.queues[1]

    def core(self, gang: Gang) -> Core:
        """The first ``min_member`` minus bound of ``gang``'s pending members, and their sums."""
        facts = self._of(gang)
        if facts.core is None:
            pods = tuple(gang.pending[: gang.min_member - len(gang.bound)])
            demand = demand_of(pods)
            demand.setflags(write=False)
            priority = max((p.priority for p in pods), default=0)
            facts.core = Core(pods, demand, priority, tuple(map(declared_runtime, pods)))
        return facts.core

    def hold_shape(self, gang: Gang) -> tuple[Any, ...] | None:
        """What room held for ``gang`` at the head of the line depends on: its core's
        ``placement_shape``, or ``None`` when it asks for a domain (room is then held per
        domain, ``headofline.domains_for``)."""
        facts = self._of(gang)
        if facts.hold_shape is None:
            ask, problem = ask_of(gang.members)
            wants_domain = ask is not None and ask.required and not problem
            shape = None if wants_domain else placement_shape(self.core(gang).pods)
            facts.hold_shape = (shape,)
        return facts.hold_shape[0]


class QueueNames:
    """``queue_name`` of each pod (``""`` for none), remembered per pod object and config."""

    def __init__(self, scheduler_name: str) -> None:
        self._scheduler_name = scheduler_name
        self._memo: dict[str, tuple[Pod, QueueConfig, str]] = {}
        # ``resolve`` per queue key under ``_config`` (the config a cycle reads, one object).
        self._config: QueueConfig | None = None
        self._resolved: dict[QueueKey, str] = {}

    def of_members(self, pods: Iterable[Pod], config: QueueConfig) -> set[str]:
        """``of(pod, config, member=True)`` for each of ``pods`` (a gang's members), as a set:
        each member's queue key is remembered per pod object (a new planner, or a new
        config, reads no labels again), resolved once per distinct key."""
        if config is not self._config:
            self._config, self._resolved = config, {}
        resolved, key_of, names = self._resolved, _MEMBER_KEYS.of, set()
        for pod in pods:
            key = key_of(pod)
            name = resolved.get(key)
            if name is None:
                name = resolved[key] = resolve(key, config, self._scheduler_name) or ""
            names.add(name)
        return names

    def of(self, pod: Pod, config: QueueConfig, *, member: bool | None = None) -> str:
        """The queue ``pod`` names under ``config``; ``member``: whether ``pod`` is known to
        be a gang member (``None``: read from its labels, as ``queue_name`` does)."""
        hit = self._memo.get(pod.uid)
        if hit is None or hit[0] is not pod or hit[1] is not config:
            if member is None:
                name = queue_name(pod, config, self._scheduler_name) or ""
            else:
                name = resolve(queue_key(pod, member), config, self._scheduler_name) or ""
            hit = self._memo[pod.uid] = (pod, config, name)
        return hit[2]

    def prune(self, members: Snapshot) -> None:
        """Forget pods that are gone once the memo grows well past the gang members."""
        live = members.gang_members
        if len(self._memo) > 2 * len(live) + 1024:
            # A copy first: explain threads add to the memo while a cycle prunes it.
            self._memo = {u: m for u, m in list(self._memo.items()) if u in live}


#: ``queue_key`` of a pod known to be a gang member, per pod object.
_MEMBER_KEYS: PodFact[QueueKey] = PodFact(
    lambda pod: queue_key(pod, True), ahead=True, only=is_member
)


def signature(pod: Pod) -> tuple[object, ...]:
    """What ``allocate`` looks at in a member: requests and node constraints."""
    return (pod.requests, tuple(sorted(pod.node_selector.items())), pod.tolerations,
            pod.required_affinity)  # fmt: skip


#: What a gang's core placement depends on besides the view.
PlacementKey = tuple[object, ...]


class FailedPlacements:
    """Placements that failed on one view, by the shape of what was asked.

    Placement depends only on the view, the members' signatures, the gang's topology ask and
    where its running members are, so a gang shaped like one that just failed on the same
    view fails the same way (the usual queue of identical jobs behind a full cluster).
    """

    def __init__(self) -> None:
        self._view: NodeView | None = None
        self._failed: dict[PlacementKey, tuple[list[tuple[object, ...]], str]] = {}

    def place(
        self,
        view: NodeView,
        members: Sequence[Pod],
        ask: tuple[Ask | None, str],
        pinned: Sequence[str],
        compute: Callable[[], TopologyAllocation],
    ) -> TopologyAllocation:
        """``compute()``'s answer, or a failure rebuilt from an equal one on ``view``."""
        if view is not self._view:
            self._view, self._failed = view, {}
        if self._failed:  # else nothing failed on this view yet: no key to look up
            signatures = [signature(p) for p in members]
            key = (frozenset(Counter(signatures).items()), *ask, tuple(pinned))
            failed = self._failed.get(key)
            if failed is not None:
                pool = list(zip(signatures, members, strict=True))
                out = []
                for wanted in failed[0]:
                    i = next(i for i, (sig, _) in enumerate(pool) if sig == wanted)
                    out.append(pool.pop(i)[1])
                return TopologyAllocation(unplaced=out, reason=failed[1])
        allocation = compute()
        if not allocation.complete:
            self._remember(members, ask, pinned, allocation)
        return allocation

    def _remember(
        self,
        members: Sequence[Pod],
        ask: tuple[Ask | None, str],
        pinned: Sequence[str],
        failed: TopologyAllocation,
    ) -> None:
        key = (frozenset(Counter(signature(p) for p in members).items()), *ask, tuple(pinned))
        self._failed[key] = ([signature(p) for p in failed.unplaced], failed.reason)


class SnapshotMemo:
    """Values derived from one cache snapshot (``get(snapshot, key, make)``), kept while the
    cache shows that very snapshot: every explain or what-if on an unchanged cluster reads the
    same running pods, so what is derived from them alone is computed once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._values: dict[Hashable, object] = {}
        self._lasting: dict[Hashable, object] = {}
        self._steady_scope: object = None
        self._steady: dict[Hashable, tuple[tuple[object, ...], object]] = {}
        self._across: dict[
            tuple[_Identity, ...], dict[Hashable, tuple[tuple[object, ...], object]]
        ] = {}

    def get(self, snapshot: Snapshot, key: Hashable, make: Callable[[], T]) -> T:
        """The value of ``key`` for ``snapshot``, made by ``make()`` the first time."""
        with self._lock:
            if self._snapshot is not snapshot:
                self._snapshot, self._values = snapshot, {}
            if key in self._values:
                return cast(T, self._values[key])
        value = make()
        self.put(snapshot, key, value)
        return value

    def lasting(self, key: Hashable, make: Callable[[], T]) -> T:
        """A value of ``key`` kept across snapshots (for what checks itself against each new
        one, such as a per-pod memo), made by ``make()`` the first time."""
        with self._lock:
            if key not in self._lasting:
                if len(self._lasting) > 16:
                    self._lasting.clear()
                self._lasting[key] = make()
            return cast(T, self._lasting[key])

    def steady(
        self,
        snapshot: Snapshot,
        key: Hashable,
        make: Callable[[], T],
        *,
        same: Sequence[object] = (),
    ) -> T:
        """The value of ``key``, made by ``make()`` from nodes, node usage, holds and the pods
        that hold or are planned onto nodes, plus the objects ``same`` (compared by identity,
        such as the pending pods it read): kept while all of those are unchanged, across
        snapshots that differ only in pending pods (``Snapshot.placed_generation``), so it is
        what ``make()`` would give now. A snapshot without a placed generation keeps it for
        itself only."""
        scope = _steady_scope(snapshot)
        with self._lock:
            if self._steady_scope != scope:
                self._steady_scope, self._steady = scope, {}
            hit = self._steady.get(key)
            if hit is not None and _identical(hit[0], same):
                return cast(T, hit[1])
        value = make()
        self.put_steady(snapshot, key, value, same=same)
        return value

    def put_steady(
        self, snapshot: Snapshot, key: Hashable, value: object, *, same: Sequence[object] = ()
    ) -> None:
        """Keep ``value`` for ``key`` as ``steady`` does (replacing what was kept)."""
        scope = _steady_scope(snapshot)
        with self._lock:
            if self._steady_scope != scope:
                self._steady_scope, self._steady = scope, {}
            _trim(self._steady)
            self._steady[key] = (tuple(same), value)

    def across(
        self,
        key: Hashable,
        make: Callable[[], T],
        *,
        scope: Sequence[object],
        same: Sequence[object] = (),
    ) -> T:
        """The value of ``key``, made by ``make()`` from the objects ``scope`` and ``same``
        alone (compared by identity: immutable inputs such as a node view, an ``Ending`` or
        pods) and from what ``key`` says: kept across snapshots, placed generations included,
        while those are the very same objects. Values are kept per ``scope`` (the inputs
        many values share), for the ``ACROSS_SCOPES`` scopes used last: what an old view or
        order pins in memory is bounded."""
        with self._lock:
            hit = self._across.get(_scope(scope), {}).get(key)
            if hit is not None and _identical(hit[0], same):
                return cast(T, hit[1])
        value = make()
        self.put_across(key, value, scope=scope, same=same)
        return value

    def put_across(
        self, key: Hashable, value: object, *, scope: Sequence[object], same: Sequence[object] = ()
    ) -> None:
        """Keep ``value`` for ``key`` as ``across`` does (replacing what was kept)."""
        with self._lock:
            where = _scope(scope)
            values = self._across.pop(where, None)
            if values is None:
                values = {}
                while len(self._across) >= ACROSS_SCOPES:
                    del self._across[next(iter(self._across))]
            self._across[where] = values  # the scope used last goes last
            _trim(values)
            values[key] = (tuple(same), value)

    def put(self, snapshot: Snapshot, key: Hashable, value: object) -> None:
        """Keep ``value`` for ``key`` (replacing what was kept) while ``snapshot`` is current."""
        with self._lock:
            if self._snapshot is not snapshot:
                self._snapshot, self._values = snapshot, {}
            _trim(self._values)
            self._values[key] = value


#: How many values ``SnapshotMemo`` keeps per store; beyond it the oldest quarter goes (every
#: waiting gang of a big cluster keeps a few: dropping all at once made the next calls pay
#: for all of them again).
MEMO_VALUES = 2048


#: How many scopes ``SnapshotMemo.across`` keeps values for (the oldest used goes first).
ACROSS_SCOPES = 12


def _scope(objects: Sequence[object]) -> tuple[_Identity, ...]:
    return tuple(_Identity(o) for o in objects)


def _trim(values: dict[Hashable, Any]) -> None:
    if len(values) >= MEMO_VALUES:
        for key in list(itertools.islice(values, MEMO_VALUES // 4)):
            del values[key]


def _identical(kept: Sequence[object], same: Sequence[object]) -> bool:
    return len(kept) == len(same) and all(map(operator.is_, kept, same))


def _steady_scope(snapshot: Snapshot) -> tuple[object, ...]:
    """What ``SnapshotMemo.steady`` values are kept for: the placed generation and the node
    table (or the snapshot itself when it has no placed generation)."""
    if not snapshot.placed_generation:
        return (_Identity(snapshot),)
    return (snapshot.placed_generation, _Identity(snapshot.view.table))


class _Identity:
    """Equal to another only when both wrap the same object (held, so ids are not reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


class StillBlocked:
    """Gangs that found no room, carried to later cycles while they still cannot fit.

    Where a gang's core can go depends only on the view, its member pods and where its bound
    members are (see ``FailedPlacements``). A gang whose members are the very same pod objects
    finds no room again on a view where no node has more room than where it last found none
    (the same node table, no resource less used, no device with more GPU free:
    ``NodeView.roomier_than``), or where the quick bound (``FitBound``) rules its members out:
    a queue of gangs behind a full cluster then costs a cycle a lookup each instead of a
    placement each. The planner clears it on every forced cycle, so a gang the placement
    search would fit only on a smaller view (it is a heuristic for gangs of mixed shapes)
    waits at most that long.
    """

    def __init__(self) -> None:
        # gang key -> its members, the view it found no room on, and its quick bound (made
        # when first needed, for one node table).
        self._failed: dict[str, _Blocked] = {}
        # (id of the view now, id of the earlier one) -> both views (so the ids stay theirs)
        # and whether the first is roomier; a cycle compares a handful of views.
        self._compared: dict[tuple[int, int], tuple[NodeView, NodeView, bool]] = {}

    def begin(self, keep: Iterable[str] | None) -> None:
        """Start a cycle: forget every gang (``keep`` None: a forced cycle) or those whose key
        is not in ``keep`` (gone, or planned)."""
        self._compared = {}
        if keep is None:
            self._failed = {}
        else:
            wanted = set(keep)
            self._failed = {k: v for k, v in self._failed.items() if k in wanted}

    def remember(self, gang: Gang, view: NodeView, core: Sequence[Pod]) -> None:
        """``gang`` found no room on ``view`` for ``core`` (its members still to place)."""
        self._failed[gang.key] = _Blocked(tuple(gang.members), tuple(core), view)

    def still(self, gang: Gang, view: NodeView) -> bool:
        """Whether ``gang`` would find no room on ``view`` for the reason remembered."""
        hit = self._failed.get(gang.key)
        if hit is None:
            return False
        if len(hit.members) != len(gang.members) or any(
            a is not b for a, b in zip(hit.members, gang.members, strict=True)
        ):
            return False
        earlier = hit.view
        if view is earlier:
            return True
        key = (id(view), id(earlier))
        known = self._compared.get(key)
        if known is None:
            known = self._compared[key] = (view, earlier, view.roomier_than(earlier))
        if not known[2]:
            return True
        if hit.bound is None or hit.bound[0] is not view.table:
            hit.bound = (view.table, FitBound(view, hit.core))
        return not hit.bound[1].possible(view)


@dataclass
class _Blocked:
    """What ``StillBlocked`` keeps of one gang."""

    members: tuple[Pod, ...]
    core: tuple[Pod, ...]
    view: NodeView
    bound: tuple[object, FitBound] | None = None
