"""The planner's debug description: every gang with its state, plan and current reason."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.core.cycle.plans import Plan, Reason
from app.core.model.categories import JobState
from app.core.model.gang import Gang


def gang_state(gang: Gang, plan: Plan | None) -> JobState:
    """``running``, ``binding``, ``planned`` or ``waiting``."""
    if gang.running and not gang.pending:
        return JobState.RUNNING
    if plan is not None and plan.released:
        return JobState.BINDING if not gang.running else JobState.RUNNING
    if plan is not None:
        return JobState.PLANNED
    return JobState.RUNNING if gang.running else JobState.WAITING


def describe(
    gangs: Mapping[str, Gang], plans: Mapping[str, Plan], reasons: Mapping[str, Reason], now: float
) -> list[dict[str, Any]]:
    """One row per gang, by key: state, members seen/bound, plan, age (against wall-clock
    ``now``), and the planner's last reason with its code (``Why``)."""
    rows = []
    for key in sorted(gangs):
        gang = gangs[key]
        plan = plans.get(key)
        names = {p.uid: p.name for p in gang.members}
        told = reasons.get(key)
        rows.append(
            {
                "gang": key,
                "state": gang_state(gang, plan),
                "minMember": gang.min_member,
                "maxMember": gang.max_member,
                "members": len(gang.members),
                "bound": len(gang.bound),
                "priority": gang.priority,
                "ageSeconds": round(max(now - gang.created, 0.0), 1) if gang.created else None,
                "plan": {names.get(u, u): n for u, n in plan.members.items()} if plan else {},
                "elastic": sorted(names.get(u, u) for u in plan.members if u not in plan.core)
                if plan
                else [],
                "reason": told.text if told is not None else "",
                "reasonCode": told.why.value if told is not None else None,
                "source": gang.group.display if gang.group is not None else None,
                "conflicts": list(gang.conflicts),
            }
        )
    return rows
