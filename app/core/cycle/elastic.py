"""Elastic members: a running or planned gang's members beyond min-member, placed one by one
after every waiting gang's core, only where room is left and only within the queue's quota.
"""

from __future__ import annotations

from app.core.actions.allocate import allocate
from app.core.cycle.plans import Plan
from app.core.cycle.session import Session
from app.core.model.gang import Gang
from app.core.policies.proportion import admit
from app.core.state.queueusage import QueueUsage, demand_of


def plan_extras(
    session: Session,
    gang: Gang,
    *,
    usage: QueueUsage,
    queue: str,
    now: float,
    expires: float,
    strategy: str,
) -> str | None:
    """Place ``gang``'s elastic members in ``session`` (its plan gains them; a plan is made
    for a running gang that had none). Returns why the rest wait, or None."""
    if gang.problem or not (gang.running or gang.key in session.plans):
        return None
    plan = session.plans.get(gang.key)
    planned = set(plan.members) if plan else set()
    bound = {p.uid for p in gang.bound}
    room = gang.limit - len(bound) - len([u for u in planned if u not in bound])
    for pod in [p for p in gang.pending if p.uid not in planned][: max(room, 0)]:
        if not admit(usage, queue, demand_of([pod])).ok:
            return "elastic members wait for quota"
        allocation = allocate(session.view(), [pod], strategy=strategy)
        node = allocation.placed.get(pod.uid)
        if not node:
            return "elastic members wait for free capacity"
        session.reserve(gang.key, {pod.uid: node}, allocation.devices)
        if plan is None:
            plan = session.plans[gang.key] = Plan(
                gang=gang.key, members={}, core=frozenset(), min_member=gang.min_member,
                created=now, expires=expires, released=True,
            )  # fmt: skip
        plan.members[pod.uid] = node
        plan.devices.update(allocation.devices)
        usage.add(queue, demand_of([pod]))
    return None
