"""Decisions written where the next leader finds them: plan records and the held room.

Muster may be killed, or lose its leadership, at any moment. What it decided and started to
carry out must survive in the API server, so the next leader (or the same process restarted)
carries on instead of deciding again over half-done work:

- **A plan** is written on each of its members as ``muster.io/plan`` (one JSON text, the same
  on every member): plan id, gang, min-member, expiry (epoch seconds), every member's planned
  node and GPU devices, the core members, and the victims evicted for it. The planner loop
  writes it before it evicts anything for the plan, and every Binding of a member carries it
  too (the API server copies a Binding's annotations onto the pod in the same write), so a
  gang killed half-way through its binds still names where the rest of it goes.
- **The head-of-line hold** (owner, node -> amount, from when) rides on the leader's Lease
  (``muster.io/hold``), renewed every few hundred milliseconds anyway.

``plans_from`` reads the records back from pods; ``Planner.restore`` turns them into live
plans and reservations before the new leader makes any decision.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.core.cycle.plans import Plan
from app.core.model.labels import PLAN_RECORD
from app.core.model.values import Pod, Resources

#: Record format version; a record of another version is ignored (the gang is planned anew).
VERSION = 1


@dataclass(frozen=True, slots=True)
class PlanRecord:
    """A plan as written on its members; ``expires`` is epoch seconds."""

    id: str
    gang: str
    min_member: int
    expires: float
    members: Mapping[str, str]
    core: frozenset[str]
    devices: Mapping[str, tuple[int, ...]]
    victims: frozenset[str]


@dataclass(frozen=True, slots=True)
class HoldRecord:
    """The head-of-line hold: room on ``holds`` promised to ``owner`` from ``until`` (epoch)."""

    owner: str
    holds: Mapping[str, Resources]
    until: float


def _dump(data: Mapping[str, Any]) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def encode_plan(plan: Plan, expires: float) -> str:
    """The record text of ``plan``, which expires at epoch ``expires``."""
    return _dump(
        {
            "v": VERSION,
            "id": plan.id,
            "gang": plan.gang,
            "min": plan.min_member,
            "expires": round(expires, 3),
            "members": {
                uid: [node, list(plan.devices.get(uid, ()))]
                for uid, node in sorted(plan.members.items())
            },
            "core": sorted(plan.core),
            "victims": sorted(plan.victims),
        }
    )


def record_text(plan: Plan, clock: Callable[[], float], wall: Callable[[], float]) -> str:
    """The record text of ``plan``; the first time, its expiry is fixed in epoch seconds
    (``plan.expires`` counts on ``clock``, the record on ``wall``)."""
    if not plan.expires_at:
        plan.expires_at = wall() + (plan.expires - clock())
    return encode_plan(plan, plan.expires_at)


def decode_plan(text: str) -> PlanRecord | None:
    """The record in ``text``, or None if it is not a record this version can read."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("v") != VERSION:
            return None
        members: dict[str, str] = {}
        devices: dict[str, tuple[int, ...]] = {}
        for uid, (node, chosen) in dict(data["members"]).items():
            members[str(uid)] = str(node)
            if chosen:
                devices[str(uid)] = tuple(int(d) for d in chosen)
        return PlanRecord(
            id=str(data["id"]),
            gang=str(data["gang"]),
            min_member=int(data["min"]),
            expires=float(data["expires"]),
            members=members,
            core=frozenset(str(u) for u in data["core"]),
            devices=devices,
            victims=frozenset(str(u) for u in data.get("victims") or ()),
        )
    except (ValueError, TypeError, KeyError):
        return None


def plans_from(pods: Iterable[Pod]) -> dict[str, PlanRecord]:
    """Gang -> its plan record, read from the live members that carry one.

    Members of one gang may carry records of different plans (a plan dropped and made again
    before every member was written): the one written last wins, which is the one with the
    latest expiry. Members that finished carry nothing that matters.
    """
    found: dict[str, PlanRecord] = {}
    for pod in pods:
        text = pod.annotations.get(PLAN_RECORD)
        if not text or pod.terminal:
            continue
        record = decode_plan(text)
        if record is None or pod.uid not in record.members:
            continue
        known = found.get(record.gang)
        if known is None or (record.expires, record.id) > (known.expires, known.id):
            found[record.gang] = record
    return found


def encode_hold(owner: str, holds: Mapping[str, Resources], until: float) -> str:
    """The record text of the head-of-line hold (empty ``owner``: none)."""
    return _dump(
        {
            "v": VERSION,
            "owner": owner,
            "until": round(until, 3),
            "holds": {node: list(amount) for node, amount in sorted(holds.items())},
        }
    )


def decode_hold(text: str) -> HoldRecord | None:
    """The hold in ``text``; None for none, or a text this version cannot read."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("v") != VERSION or not data.get("owner"):
            return None
        holds = {
            str(node): Resources(*(int(x) for x in amount))
            for node, amount in dict(data["holds"]).items()
        }
        return HoldRecord(str(data["owner"]), holds, float(data["until"]))
    except (ValueError, TypeError, KeyError):
        return None
