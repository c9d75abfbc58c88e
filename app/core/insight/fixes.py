"""Changes that would let a waiting job start sooner, each checked on the planner's snapshot:
another order or fewer members, a quota, a constraint, backfill, another shape, a priority."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from app.core.actions.allocate import allocate, fits_all
from app.core.actions.backfill import may_backfill
from app.core.actions.victims import (
    Unit,
    freed,
)
from app.core.cycle.makeroom import make_room
from app.core.cycle.outlook import Outlook
from app.core.gpu.ask import MILLI, GpuAsk
from app.core.insight.jobs import Job, gang_job, place_job, planned_elsewhere, queue_of
from app.core.insight.units import FEW_CHANGES, Units, units_of
from app.core.model.categories import Category
from app.core.model.labels import TOPOLOGY_REQUIRED
from app.core.model.quantity import format_milli
from app.core.model.queues import UNLIMITED, Queue
from app.core.model.runtime import EXPECTED_RUNTIME
from app.core.model.values import RESOURCE_NAMES, Pod, Resources
from app.core.policies.proportion import admit
from app.core.policies.registry import constraint_of, eligible
from app.core.state.diff import changed_pods
from app.core.state.domains import ask_of
from app.core.state.queueusage import demand_of
from app.core.state.view import NodeView, Snapshot

#: Blockers another shape of the same job may get around (see ``_shape_fixes``).
_SHAPE_HELPS = frozenset({
    Category.CAPACITY, Category.FRAGMENTATION, Category.TOPOLOGY, Category.RESERVATION,
    Category.PRIORITY,
})  # fmt: skip


#: Blockers that evicting lower-priority work can lift (see ``_priority_fix``).
_ROOM_HELPS = frozenset({Category.CAPACITY, Category.FRAGMENTATION, Category.PRIORITY})


#: A priority fix searches all running units up to this many lower ones (see ``_focus``).
FOCUS_UNITS = 64


@dataclass(frozen=True, slots=True)
class Fix:
    """A change that lets the job start sooner, checked on the snapshot: ``change`` says what
    to do, ``effect`` what then happens; ``cost`` orders fixes (cheapest first)."""

    change: str
    effect: str
    cost: int


def fixes_for(o: Outlook, job: Job, queue: str, view: NodeView, category: Category) -> list[Fix]:
    fixes: list[Fix] = []
    core = job.core
    if category == Category.GANG_INCOMPLETE and job.gang is not None:
        fixes.extend(_fewer_members(o, view, job))
    if category == Category.QUOTA and queue in o.config.queues:
        fixes.extend(_quota_fixes(o, queue, demand_of(core)))
    if category == Category.CONSTRAINTS and core:
        fixes.extend(_constraint_fixes(view, core))
    if category == Category.RESERVATION:
        fixes.extend(_backfill_fix(o, job))
    if category == Category.TOPOLOGY:
        ask, _ = ask_of(job.members)
        level = ask.level if ask is not None else ""
        fixes.append(
            Fix(
                f"drop {TOPOLOGY_REQUIRED}: {level} (or use muster.io/topology-preferred)",
                "it fits now across domains",
                3,
            )
        )
    if category in (
        Category.CAPACITY,
        Category.FRAGMENTATION,
        Category.TOPOLOGY,
        Category.RESERVATION,
        Category.PRIORITY,
    ):
        fixes.extend(_shape_fixes(o, view, job))
    if (
        category in (Category.CAPACITY, Category.FRAGMENTATION, Category.PRIORITY)
        and o.preemption
        and core
    ):
        fixes.extend(_priority_fix(o, job, queue))
    if category == Category.PRIORITY:
        fixes.extend(_order_fix(o, job, queue))
    return fixes


def _order_fix(o: Outlook, job: Job, queue: str) -> list[Fix]:
    """Gangs ahead in its own queue are ordered by priority first: above theirs, it goes first
    (the category check showed it fits once their plans are gone)."""
    snapshot = o.session.snapshot
    ahead = {snapshot.gang_members.get(p.uid, "") for p in planned_elsewhere(o, job)}
    gangs = [o.gangs[k] for k in sorted(ahead) if k in o.gangs]
    if not gangs or any(queue_of(o, gang_job(g, "")) != queue for g in gangs):
        return []
    above = max(g.priority for g in gangs) + 1
    names = ", ".join(g.key for g in gangs)
    return [Fix(f"priority ≥ {above}", f"it would be planned before {names}", 6)]


def _fewer_members(o: Outlook, view: NodeView, job: Job) -> list[Fix]:
    have = len(job.members)
    if not have:
        return []
    trial = replace(job, min_member=have)
    if not place_job(o, view, trial, None).complete:
        return []
    return [Fix(f"set muster.io/min-member to {have}", f"the {have} members that exist fit now", 2)]


def _quota_fixes(o: Outlook, queue: str, demand: np.ndarray) -> list[Fix]:
    fixes: list[Fix] = []
    leaf = o.config.queues[queue]
    if not leaf.borrowing:
        config = replace(o.config, queues={**o.config.queues, queue: replace(leaf, borrowing=True)})
        if admit(replace(o.usage, config=config), queue, demand).ok:
            over = np.maximum(o.usage.of(queue) + demand - np.asarray(leaf.guaranteed), 0)
            fixes.append(
                Fix(
                    f"turn borrowing on for queue {queue}",
                    f"queue {queue} could borrow {_gpus_text(over)} and start it now",
                    4,
                )
            )
    for q in o.config.path(queue):
        held = o.usage.of(q.name) + demand
        limit = np.asarray(q.limit, np.int64)
        short = (limit < UNLIMITED) & (held > limit)
        if not short.any():
            continue
        raised = _with_limit(q, np.where(short, held, limit))
        config = replace(o.config, queues={**o.config.queues, q.name: raised})
        if admit(replace(o.usage, config=config), queue, demand).ok:
            k = int(np.argmax(short))
            name = RESOURCE_NAMES[k]
            fixes.append(
                Fix(
                    f"raise queue {q.name}'s {name} limit to {format_milli(name, int(held[k]))}",
                    "the queue then admits it",
                    5,
                )
            )
    return fixes


def _with_limit(queue: Queue, limit: np.ndarray) -> Queue:
    return replace(queue, limit=Resources(*(int(v) for v in limit.tolist())))


def _constraint_fixes(view: NodeView, core: Sequence[Pod]) -> list[Fix]:
    pod = next((p for p in core if not eligible(view, p).any()), None)
    if pod is None:
        return []
    trials = [
        ("drop its nodeSelector", replace(pod, node_selector={})),
        ("drop its required node affinity", replace(pod, required_affinity=None)),
        ("drop both its nodeSelector and required node affinity",
         replace(pod, node_selector={}, required_affinity=None)),
    ]  # fmt: skip
    for change, trial in trials:
        count = int(eligible(view, trial).sum())
        if count and trial != pod:
            return [Fix(f"{change} ({pod.name})", f"{count} nodes would pass", 3)]
    return []


def _backfill_fix(o: Outlook, job: Job) -> list[Fix]:
    _, holds, until = o.session.holds
    window = int(until - o.now)
    if window <= 0:
        return []
    declared = [
        replace(p, annotations={**p.annotations, EXPECTED_RUNTIME: str(window)}) for p in job.core
    ]
    if not may_backfill(declared, o.now, until):
        return []
    return [
        Fix(
            f"declare {EXPECTED_RUNTIME}: {window} or less",
            "it may then use the held room now, as it ends before the head of the line starts",
            1,
        )
    ]


def _shape_fixes(o: Outlook, view: NodeView, job: Job) -> list[Fix]:
    core = job.core
    if not core or job.bound or len({p.requests for p in core}) != 1:
        return []
    each = core[0].requests.gpu
    if each < MILLI or each % MILLI:
        return []
    total = each * len(core)
    for per in (MILLI * g for g in (8, 4, 2, 1)):  # the fewest, largest members first
        if per == each or total % per:
            continue
        count = total // per
        scale = per / each
        asks = [
            replace(
                core[0],
                uid=f"{core[0].uid}/whatif-{i}",
                requests=core[0].requests._replace(
                    gpu=per,
                    cpu=int(core[0].requests.cpu * scale),
                    memory=int(core[0].requests.memory * scale),
                ),
            )
            for i in range(count)
        ]
        if fits_all(view, asks, o.strategy):
            now, was = f"{count} × {per // MILLI} GPU", f"{len(core)} × {each // MILLI}"
            return [
                Fix(f"ask for {now} instead of {was}", f"{now} fits now where {was} does not", 2)
            ]
    return []


def _priority_fix(o: Outlook, job: Job, queue: str) -> list[Fix]:
    """The lowest priority (of six tried) that would evict some running units for ``job``;
    kept per shape of job while the node view, the running units and queue usage are the
    same."""
    units = units_of(o)
    shape = tuple((p.requests, constraint_of(p), p.priority) for p in job.core)
    # It reads the running units (found at ``since``; ``token`` stays while they are alike),
    # the view without holds (the same object while no pod moved, came, went or changed its
    # requests or devices: so where each unit's pods sit is the same too), queue usage and
    # the queue config.
    used = tuple(sorted((k, v.tobytes()) for k, v in o.usage.used.items()))
    key = ("priority fix", units.since, id(o.config), queue, shape, used, o.strategy)
    return o.kept.across(
        key,
        lambda: _find_priority_fix(o, job, queue, units),
        scope=[units.token, o.session.backfill_view(), o.config],
    )


def _find_priority_fix(o: Outlook, job: Job, queue: str, found: Units) -> list[Fix]:
    snapshot = replace(o.session.snapshot, view=o.session.backfill_view())
    mine = max(p.priority for p in job.core)
    above = {p + 1 for p, count in found.priorities.items() if count and p >= mine}
    for priority in sorted(above)[:6]:
        core = [replace(p, priority=priority) for p in job.core]
        room = make_room(
            snapshot,
            job.key,
            core,
            _focus(o, snapshot, core, found, priority),
            usage=o.usage,
            queue=queue or o.config.default_queue,
            config=o.config,
            now=o.now,
            strategy=o.strategy,
        )
        if room is not None:
            names = ", ".join(sorted({u.key for u in room.victims}))
            return [Fix(f"priority ≥ {priority}", f"it would evict {names} and start", 6)]
    return []


def _focus(
    o: Outlook, snapshot: Snapshot, core: Sequence[Pod], found: Units, priority: int
) -> list[Unit]:
    """The units worth searching for victims: all of them when few, else those on the nodes
    ``core`` takes once every unit below ``priority`` is gone. (The planner's search weighs
    thousands of running pods one by one, seconds on a big cluster; a fix needs one way that
    works, and ``make_room`` still checks it.)"""
    units = found.units
    if sum(n for p, n in found.priorities.items() if p < priority) <= FOCUS_UNITS:
        return list(units)
    view = _freed_below(o, snapshot, found, priority)
    shape = tuple((p.requests, GpuAsk.of(p), constraint_of(p)) for p in core)
    placed = o.kept.across(
        ("focus", shape, o.strategy),
        lambda: allocate(view, core, strategy=o.strategy),
        scope=[view],
    )
    if not placed.complete:
        return list(units)
    # Where each unit sits in the list changes no search (see ``_units_since``).
    return found.on(set(placed.placed.values()))


def _freed_below(o: Outlook, snapshot: Snapshot, found: Units, priority: int) -> NodeView:
    """``freed(snapshot, lower)``: the view without holds and without every unit below
    ``priority``. Kept per priority across snapshots while the units are brought up to date
    from the same ones (``_units_since``) and each pod changed since adds the same to it as
    before: nothing (it is in a unit below ``priority``, or holds no room), or the same
    amount on the same node and devices. A unit below the priority that ends, or starts
    where it ran, so leaves it as it was."""
    kept: dict[int, tuple[Units, NodeView]] = o.kept.lasting(("freed below",), dict)
    hit = kept.get(priority)
    if (
        hit is not None
        and hit[0].lineage is found.lineage
        and _same_residue(hit[0], found, priority)
    ):
        view = hit[1]
    else:
        view = freed(snapshot, [u for u in found.units if u.priority < priority])
    if len(kept) > 16:
        kept.clear()
    kept[priority] = (found, view)
    return view


def _same_residue(old: Units, new: Units, priority: int) -> bool:
    """Whether every pod that differs between ``old``'s and ``new``'s snapshots adds the
    same to ``freed`` of the units below ``priority`` in both (see ``_freed_below``)."""
    changed = changed_pods(old.snapshot, new.snapshot)
    if changed is None or len(changed) > FEW_CHANGES:
        return False
    members = old.snapshot.gang_members, new.snapshot.gang_members
    if any(uid in m for uid in changed for m in members):
        return False  # a gang's units are its own: found again whole
    return all(_residue(old, uid, priority) == _residue(new, uid, priority) for uid in changed)


def _residue(found: Units, uid: str, priority: int) -> tuple[object, ...] | None:
    """What pod ``uid`` adds to the view without holds once the units below ``priority``
    are gone (None: nothing)."""
    snapshot = found.snapshot
    node = snapshot.placement.get(uid)
    row = snapshot.view.index.get(node) if node else None
    pod = snapshot.pods.get(uid)
    if row is None or pod is None:
        return None
    unit = found.lone.get(uid)
    if unit is not None and unit.priority < priority:
        return None
    return (row, pod.requests, snapshot.devices.get(uid))


def _gpus_text(amount: np.ndarray) -> str:
    return f"{format_milli('nvidia.com/gpu', int(amount[0]))} nvidia.com/gpu"
