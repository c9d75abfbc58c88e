"""When a waiting job would start: the planner's order played forward over the declared ends of
the running work (``gang_eta``)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import cast

import numpy as np

from app.core.actions.backfill import Ending, EndingMemo, ending, may_backfill, reserve_for
from app.core.cycle.headofline import domains_for
from app.core.cycle.outlook import Outlook
from app.core.gpu.ask import GpuAsk
from app.core.insight.forward import FreedViews, Occupant, earliest
from app.core.insight.jobs import AHEAD, Job, gang_job, queue_of, view_for, waiting_lines
from app.core.model.categories import Category
from app.core.model.gang import Gang
from app.core.model.runtime import declared_runtime, expected_end
from app.core.model.values import RESOURCE_NAMES
from app.core.policies.proportion import admit
from app.core.policies.registry import constraint_of
from app.core.state.domains import ask_of
from app.core.state.queueusage import demand_of, queue_name
from app.core.state.view import NodeView, Snapshot


def gang_eta(o: Outlook, gang: Gang, category: Category) -> float | None:
    """Seconds until waiting ``gang``, blocked by ``category``, is expected to start (as
    ``Explanation.eta_seconds``; ``None``: unknown)."""
    return job_eta(o, gang_job(gang, f"gang {gang.key}"), category)


def job_eta(o: Outlook, job: Job, category: Category) -> float | None:
    """Seconds until ``job`` is expected to start: once running work (and work planned to
    start) has run for its declared or default runtime, the room it needs is free and, for a
    job its queue does not admit yet, the queue's own work has ended. None: never, as far as
    the snapshot tells (missing members, constraints, a queue that never admits it)."""
    if category == Category.NONE:
        return 0.0
    if category in (Category.GANG_INCOMPLETE, Category.CONSTRAINTS):
        return None
    if o.head is not None and o.head.gang == job.key:
        return max(o.head.start - o.now, 0.0)
    start = _room_free_at(o, job)
    if start is not None and category == Category.QUOTA:
        admitted = _admitted_at(o, job)
        start = None if admitted is None else max(start, admitted)
    return None if start is None else max(start - o.now, 0.0)


def _room_free_at(o: Outlook, job: Job) -> float | None:
    """When the room ``job`` needs is free. Room held for the head of the line stays taken
    until the head has run there, unless ``job`` may backfill it (it would end before the head
    is due)."""
    owner, holds, until = o.session.holds
    head = o.gangs.get(owner)
    ahead = _ahead(o, job)
    ask, _ = ask_of(job.members)
    required = ask is not None and ask.required
    if ahead and not required and owner != job.key:
        if holds and head is not None:
            start = _backfill_start(o, job, until)
            if start is not None:
                return start
        return _after_line(o, job, ahead)
    if not holds or owner == job.key or head is None:
        return _free_at(o, job, view_for(o, job))
    start = _backfill_start(o, job, until)
    if start is not None:
        return start
    backfill = o.session.backfill_view()
    released = max(until, o.now) + max(declared_runtime(p) or o.default_runtime
                                       for p in head.members)  # fmt: skip
    held = _free_at(o, job, o.session.view())
    if held is not None and held < released:
        return held
    after = _free_at(o, job, backfill)
    return None if after is None else max(after, released)


def _backfill_start(o: Outlook, job: Job, until: float) -> float | None:
    """When ``job`` could start in room held for the head of the line, if it declares
    runtimes that end before the head is due then (None: it may not backfill)."""
    if not may_backfill(job.core, o.now, until):
        return None  # not even if it started now
    start = _free_at(o, job, o.session.backfill_view())
    return start if start is not None and may_backfill(job.core, start, until) else None


def _ahead(o: Outlook, job: Job) -> list[Gang]:
    """The first ``AHEAD`` gangs before ``job`` in its queue's line that may start before it:
    complete, consistent, admitted by their queue now, and not the head of the line (whose
    room is held)."""
    if job.gang is None:
        return []
    queue = queue_of(o, job)
    line = waiting_lines(o).get(queue, [])
    if job.key in line:
        before = line[: line.index(job.key)]
    else:  # a job not submitted yet (what-if): where the gang order puts it
        mine = o.order.key(job.gang)
        before = [k for k in line if o.order.key(o.gangs[k]) < mine]
    owner = o.session.holds[0]
    out = []
    for key in before:
        gang = o.gangs[key]
        core = gang.pending[: max(gang.min_member - len(gang.bound), 0)]
        if key == owner or gang.problem or len(gang.members) < gang.min_member or not core:
            continue
        if not admit(o.usage, queue, demand_of(core)).ok:
            continue
        out.append(gang)
        if len(out) == AHEAD:
            break
    return out


def _after_line(o: Outlook, job: Job, ahead: Sequence[Gang]) -> float | None:
    """When ``job`` fits once the head of the line and the gangs ``ahead`` of it have taken
    their room, each from its own expected start for its runtime (``forward``)."""
    view = o.session.backfill_view()
    snapshot = replace(o.session.snapshot, view=view)
    order = _ending(o, snapshot)
    owner, holds, _ = o.session.holds
    head = o.gangs.get(owner) if holds else None
    freed_views = FreedViews(view, order)
    # Where the last plays found each count (a guess that is tried first; see ``earliest``).
    hints: dict[Hashable, object] = o.kept.lasting(("line hints",), dict)

    def chain() -> tuple[float, float, list[Occupant]]:
        """The occupants, and when they were found and until when they stay right: the play
        only moves with the clock once a gang in it would start (or end), or if one fits at
        once (its room then moves with the clock), or if the ends read the clock."""
        occupants: list[Occupant] = []
        horizon = math.inf if order.timeless else o.now
        for gang in [*([head] if head is not None else []), *ahead]:
            core = gang.pending[: max(gang.min_member - len(gang.bound), 0)]
            found = earliest(view, order, core, occupants, now=o.now, strategy=o.strategy,
                             freed_views=freed_views, hints=hints)  # fmt: skip
            if found is None:
                continue
            start, allocation = found
            runtime = max(declared_runtime(p) or o.default_runtime for p in core)
            since = o.now if gang is head else start  # the head's room is held already
            occupants.append(Occupant(since, start + runtime, tuple(core), allocation))
            horizon = o.now if start <= o.now else min(horizon, start)
        return o.now, horizon, occupants

    key = ("line", owner if head is not None else "", tuple(g.key for g in ahead),
           o.default_runtime, o.strategy)  # fmt: skip
    # The replay reads the view, the running pods' order by end (kept as the same objects
    # while the pods that hold room keep their rows, ends and releases) and the members of
    # the gangs in it.
    members = [p for g in [*([head] if head is not None else []), *ahead] for p in g.members]
    scope = [view, order]
    made, horizon, occupants = o.kept.across(key, chain, scope=scope, same=members)
    if not (made == o.now or made < o.now < horizon):
        made, horizon, occupants = chain()
        o.kept.put_across(key, (made, horizon, occupants), scope=scope, same=members)

    def start() -> float | None:
        found = earliest(view, order, job.core, occupants, now=o.now, strategy=o.strategy,
                         freed_views=freed_views, hints=hints)  # fmt: skip
        return None if found is None else found[0]

    # Alike jobs behind the same line start alike (a start before ``now`` means ``now``).
    shape = tuple((p.requests, GpuAsk.of(p), constraint_of(p)) for p in job.core)
    found = o.kept.across((*key, shape), start, scope=scope, same=[*members, occupants])
    return None if found is None else max(found, o.now)


def _free_at(o: Outlook, job: Job, view: NodeView) -> float | None:
    """When ``job``'s core fits on ``view`` once pods holding or planned for room there have
    run for their runtimes (what ``view`` counts beyond pods, such as holds, stays)."""
    snapshot = replace(o.session.snapshot, view=view)
    # A required domain bounds where the room may free; no domain big enough: never.
    domains = None if job.gang is None else domains_for(job.gang, view, o.topology_keys)
    if domains == []:
        return None
    if domains is None:
        # Alike jobs free alike: kept per shape while the running pods are unchanged (a start
        # before ``now`` means ``now``, so an earlier answer stays right), unless some end
        # reads the clock (a planned pod starts "now": its end moves with the clock).
        order = _ending(o, snapshot)
        if not order.timeless:
            start = _reserved_start(o, job, snapshot)
        else:
            # It reads ``view`` (the view without holds, plus the holds in the key) and the
            # order by end: kept while those are the same objects.
            shape = tuple((p.requests, GpuAsk.of(p), constraint_of(p)) for p in job.core)
            key = ("free at", _view_key(o, view), shape, o.default_runtime, o.strategy)
            start = o.kept.across(
                key,
                lambda: _reserved_start(o, job, snapshot),
                scope=[o.session.backfill_view(), order],
            )
        return None if start is None else max(start, o.now)
    return _reserved_start(o, job, snapshot, domains)


def _reserved_start(
    o: Outlook, job: Job, snapshot: Snapshot, domains: Sequence[np.ndarray] | None = None
) -> float | None:
    masks: list[np.ndarray | None] = list(domains) if domains is not None else [None]
    starts = [
        r.start
        for mask in masks
        if (
            r := reserve_for(
                snapshot,
                job.key,
                job.core,
                now=o.now,
                default_runtime=o.default_runtime,
                strategy=o.strategy,
                within=mask,
                planned_start_now=True,
                order=None if mask is not None else _ending(o, snapshot),
            )
        )
        is not None
    ]
    return min(starts, default=None)


def _view_key(o: Outlook, view: NodeView) -> object:
    """What tells the session's two views apart in memo keys: the holds it counts, if any."""
    if view is o.session.backfill_view():
        return "backfill"
    owner, holds, until = o.session.holds
    return (owner, until, tuple(sorted(holds.items())))


def _ending(o: Outlook, snapshot: Snapshot) -> Ending:
    """``ending`` of the pods on ``snapshot.view`` (the session's view with or without the
    holds), kept while the cache is unchanged."""
    key = ("ending", _view_key(o, snapshot.view))

    def make() -> Ending:
        memo = o.kept.lasting(("ending entries",), EndingMemo)
        return ending(snapshot, now=o.now, default_runtime=o.default_runtime,
                      planned_start_now=True, memo=memo)  # fmt: skip

    found = o.kept.steady(o.session.snapshot, key, make)
    if found.timeless:
        return found
    # Made once per outlook (its now) when some end reads the clock.
    hit = o.memo.get(key)
    if hit is None:
        hit = o.memo[key] = make()
    return cast(Ending, hit)


def _admitted_at(o: Outlook, job: Job) -> float | None:
    """When ``job``'s queue admits it, once pods counted against queues (holding a node,
    binding or planned) have run for their runtimes; None: not even with all of them gone."""
    queue = queue_of(o, job)
    demand = demand_of(job.core)
    snapshot = o.session.snapshot
    releases = []
    for uid, pod in snapshot.pods.items():
        if pod.terminal or not (snapshot.holds_node(pod) or uid in snapshot.reserved):
            continue
        name = queue_name(pod, o.config, o.scheduler_name)
        if name is None or name not in o.config.queues:
            continue
        started = pod.started or snapshot.bound_at.get(uid, o.now)
        releases.append((expected_end(pod, started, o.default_runtime), name, pod.requests))
    releases.sort(key=lambda r: r[0])
    # Usage after the first k releases, per leaf queue, as running sums (admit is monotone in
    # what is released, so the first k that admits is found by bisection).
    amounts = np.asarray([r[2] for r in releases], np.int64).reshape(-1, len(RESOURCE_NAMES))
    leaves = np.asarray([r[1] for r in releases], dtype=object)
    sums = {q: np.cumsum(amounts * (leaves == q)[:, None], axis=0) for q in set(leaves.tolist())}

    def admitted(k: int) -> bool:
        if not k:
            return admit(o.usage, queue, demand).ok
        used = {name: amount.copy() for name, amount in o.usage.used.items()}
        usage = replace(o.usage, used=used)
        for q, running in sums.items():
            usage.add(q, -running[k - 1])
        return admit(usage, queue, demand).ok

    if not admitted(len(releases)):
        return None
    low = bisect.bisect_left(range(len(releases)), True, key=admitted)
    return max(o.now, releases[low - 1][0]) if low else o.now
