"""What an explanation is about (a ``Job``) and the facts every part of one reads: its queue,
the view it would be placed on, the waiting lines, where it would go, and what the plans of
other gangs hold."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.core.actions.allocate_in_domain import TopologyAllocation, allocate_topology
from app.core.actions.backfill import may_backfill
from app.core.cycle.outlook import Outlook
from app.core.model.gang import Gang
from app.core.model.values import Pod
from app.core.state.domains import Ask, tree_for
from app.core.state.releases import without
from app.core.state.view import NodeView

#: How many waiting gangs ahead in line the ETA plays forward (beyond the head of the line).
AHEAD = 8


@dataclass(frozen=True, slots=True)
class Job:
    """What is explained: a gang (known, or one a what-if would submit), or a pod on its own
    (a gang of one without a plan)."""

    key: str
    subject: str
    members: tuple[Pod, ...]
    min_member: int
    bound: tuple[Pod, ...]
    pending: tuple[Pod, ...]
    gang: Gang | None

    @property
    def core(self) -> list[Pod]:
        """The pending members it needs to start (all pending ones for a pod on its own)."""
        return list(self.pending[: max(self.min_member - len(self.bound), 0)])


def gang_job(gang: Gang, subject: str) -> Job:
    """``gang`` as a ``Job`` to explain."""
    return Job(
        gang.key,
        subject,
        tuple(gang.members),
        gang.min_member,
        tuple(gang.bound),
        tuple(gang.pending),
        gang,
    )


def queue_of(o: Outlook, job: Job) -> str:
    names = {o.queue_names.of(p, o.config) for p in job.members} - {""}
    if job.gang is not None and not names:
        return o.config.default_queue
    return min(names) if names else ""


def view_for(o: Outlook, job: Job) -> NodeView:
    """The view the planner would place ``job`` on (held room only for its owner or backfill)."""
    owner, holds, until = o.session.holds
    if holds and (owner == job.key or may_backfill(job.core or job.pending, o.now, until)):
        return o.session.backfill_view()
    return o.session.view()


def waiting_lines(o: Outlook) -> dict[str, list[str]]:
    """Per queue, the gangs that neither run nor have a plan, in the planner's order within
    a queue; kept while the cache and the plans are unchanged."""

    def make() -> dict[str, list[str]]:
        # Per gang, its queue and place in the order are read from its members alone (and
        # the queue config and the order): kept per gang while those are the same objects.
        known: dict[str, tuple[tuple[object, ...], str, Any]] = o.kept.lasting(
            ("line places",), dict
        )
        if len(known) > 2 * len(o.gangs) + 1024:
            known.clear()
        lines: dict[str, list[tuple[Any, str]]] = {}
        for g in o.gangs.values():
            if g.running or g.key in o.plans:
                continue
            inputs = (o.config, o.order, *g.members)
            hit = known.get(g.key)
            if hit is None or not _same_objects(hit[0], inputs):
                hit = known[g.key] = (inputs, queue_of(o, gang_job(g, "")), o.order.key(g))
            lines.setdefault(hit[1], []).append((hit[2], g.key))
        return {
            queue: [k for _, k in sorted(line, key=lambda e: e[0])] for queue, line in lines.items()
        }

    # They read the gangs (the same dict while no member changed, see ``Planner.look``), the
    # plans' keys, the queue config and the order: kept while those are the same.
    return o.kept.across(("lines", frozenset(o.plans)), make, scope=[o.gangs, o.config, o.order])


def _same_objects(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


def place_job(o: Outlook, view: NodeView, job: Job, ask: Ask | None) -> TopologyAllocation:
    """Place ``job``'s core on ``view`` as the planner does (``ask``: its topology ask)."""
    placement = o.session.snapshot.placement
    pinned = sorted({placement.get(p.uid) or p.node_name for p in job.bound} - {""})
    tree = tree_for(view.table, o.topology_keys)
    return allocate_topology(view, job.core, tree=tree, ask=ask, strategy=o.strategy, pinned=pinned)


def without_planned(o: Outlook, view: NodeView, job: Job, ahead: list[Pod]) -> NodeView:
    """``view`` without the pods ``ahead`` (``planned_elsewhere``) hold, once per outlook:
    every waiting gang without a plan of its own frees the same pods, all planned ones, from
    one of two views."""
    key = ("without-planned", id(view), job.key if job.key in o.plans else "")
    hit = o.memo.get(key)
    if hit is not None and hit[0] is view:
        freed: NodeView = hit[1]
        return freed
    freed = without(o.session.snapshot, ahead, view)
    o.memo[key] = (view, freed)
    return freed


def planned_elsewhere(o: Outlook, job: Job) -> list[Pod]:
    """Pods whose room plans of other gangs hold (not yet binding)."""
    snapshot = o.session.snapshot
    return [
        snapshot.pods[uid]
        for key, plan in o.plans.items()
        if key != job.key
        for uid in plan.members
        if uid in snapshot.reserved and uid in snapshot.pods
    ]
