"""What the planner knows at one instant, for questions that change nothing (explain, what-if).

An ``Outlook`` bundles a planning ``Session`` that is never committed with copies of the
planner's plans, reasons and settings, so the answers are pure functions of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.actions.backfill import Reservation
from app.core.cycle.memos import QueueNames, SnapshotMemo
from app.core.cycle.plans import Plan, Reason
from app.core.cycle.session import Session
from app.core.model.gang import Gang
from app.core.model.queues import QueueConfig
from app.core.policies.interfaces import GangOrder, Protection
from app.core.state.queueusage import QueueUsage


@dataclass(frozen=True)
class Outlook:
    """The planner's state at ``now`` (wall-clock seconds); see the module docstring."""

    session: Session
    gangs: Mapping[str, Gang]
    plans: Mapping[str, Plan]
    #: gang -> what the planner last said about it (``Why`` and text)
    reasons: Mapping[str, Reason]
    head: Reservation | None
    config: QueueConfig
    usage: QueueUsage
    now: float
    strategy: str
    topology_keys: Sequence[str]
    default_runtime: float
    scheduler_name: str
    preemption: bool
    protection: Protection
    #: The order of gangs within a queue (``app.core.policies.gangorder``).
    order: GangOrder
    #: The planner's memo of each pod's queue (``queue_names.of(pod, config)``).
    queue_names: QueueNames
    #: What explain and what-if derive from the snapshot alone, kept from one outlook to the
    #: next while the cache is unchanged (``memo`` lives as long as this outlook only).
    kept: SnapshotMemo
    #: Results computed once per outlook by the questions asked of it (they change nothing).
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
