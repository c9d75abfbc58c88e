"""The running work as units of eviction (a gang whole, or a pod on its own), kept and patched
across outlooks while the running pods stay the same."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, cast

from app.core.actions.victims import (
    LoneMemo,
    Unit,
    lone_state,
    running_units,
    same_unit,
)
from app.core.cycle.outlook import Outlook
from app.core.model.values import Pod
from app.core.state.diff import changed_pods
from app.core.state.view import Snapshot

#: How long the running units (and the priority fixes found with them) are kept at most while
#: the running pods stay the same: victims are ordered by work lost, which grows with time.
UNITS_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Units:
    """The running units found on ``snapshot`` at ``since`` (``running_units``), kept until
    ``young`` (the first protected one comes of age) or ``UNITS_SECONDS``: the units of
    gangs, and per pod running on its own, its unit. ``token`` is the same object while later
    snapshots' units stay alike (``same_unit``)."""

    snapshot: Snapshot
    key: tuple[object, ...]
    config: object
    protection: object
    since: float
    young: float
    gangs: list[Unit]
    lone: dict[str, Unit]
    token: object
    units: list[Unit] = field(default_factory=list)
    #: The same object while the units are brought up to date from the last ones.
    lineage: object = None
    #: Per node, the pods running there on their own whose units are in ``lone``.
    by_node: dict[str, frozenset[str]] = field(default_factory=dict)

    def on(self, nodes: set[str]) -> list[Unit]:
        """The units with a pod on one of ``nodes``: the gangs' in their order, then the
        lone pods' by node."""
        placement = self.snapshot.placement
        out = [u for u in self.gangs if any(placement.get(p.uid) in nodes for p in u.pods)]
        for node in sorted(nodes):
            out.extend(self.lone[uid] for uid in sorted(self.by_node.get(node, ())))
        return out

    #: The groups (priority, kind, GPUs) in which some unit has more than one pod: a lone
    #: pod's unit there could be ordered differently by work lost as the clock moves.
    crossing: frozenset[tuple[int, bool, int]] = frozenset()
    #: Whether every unit started by ``since`` and the units of each group have one size.
    timeless: bool = False
    #: How many units there are of each priority (0 for some priorities none has now).
    priorities: Counter[int] = field(default_factory=Counter)

    def fresh(self, now: float) -> bool:
        """Whether the units are still right at ``now`` (as far as the clock goes): until a
        protected one comes of age, and for ``UNITS_SECONDS`` unless their order by work lost
        cannot change (``timeless``: units of one pod each, or alone in their group, that
        started by then keep their order by start as the clock moves)."""
        if self.timeless:
            return self.since <= now < self.young
        return self.since <= now < min(self.young, self.since + UNITS_SECONDS)


def units_of(o: Outlook) -> Units:
    """The running units that could be evicted (``running_units``), kept while the cache is
    unchanged and no protected unit has come of age; after pods changed, the last ones with
    the changed lone pods' units put in, taken out or replaced (see ``_units_since``)."""
    snapshot = o.session.snapshot
    # Units are made of pods holding nodes, cut by their gangs: kept while those pods and
    # each such gang's size, min-member and priority are the same.
    gangs = tuple(
        (k, g.min_member, g.priority, len(g.members)) for k, g in o.gangs.items() if g.bound
    )
    key = ("units", id(o.config), gangs)
    kept = o.kept.steady(snapshot, key, lambda: None)
    if isinstance(kept, Units) and kept.fresh(o.now):
        return kept
    last: list[Units | None] = o.kept.lasting(("units", "last"), lambda: [None])
    found = _units_since(o, last[0], key) if last[0] is not None else None
    if found is None:
        young: list[float] = []
        units = running_units(
            replace(snapshot, view=o.session.backfill_view()),
            dict(o.gangs),
            _queue_of_pod(o),
            now=o.now,
            protection=o.protection,
            protected_until=young,
            lone=lone_memo(o, "queue names"),
        )
        lone = {u.pods[0].uid: u for u in units if u.key.startswith("pod:")}
        gangs_units = units[: len(units) - len(lone)]
        sizes: dict[tuple[int, bool, int], set[int]] = {}
        for unit in units:
            sizes.setdefault(_group(unit), set()).add(len(unit.pods))
        crossing = frozenset(g for g, n in sizes.items() if n != {1})
        timeless = all(len(n) == 1 for n in sizes.values()) and all(
            u.started <= o.now for u in units
        )
        found = Units(snapshot, key, o.config, o.protection, o.now, min(young, default=math.inf),
                      gangs_units, lone, object(), units, object(), _by_node(snapshot, lone),
                      crossing, timeless, Counter(u.priority for u in units))  # fmt: skip
    last[0] = found
    o.kept.put_steady(snapshot, key, found)
    return found


def _group(unit: Unit) -> tuple[int, bool, int]:
    """What victim searches order units by before work lost."""
    return (unit.priority, unit.elastic, unit.gpus)


def _queue_of_pod(o: Outlook) -> Callable[[Pod], str | None]:
    return lambda p: o.queue_names.of(p, o.config) or None


#: Changed pods beyond this many: the running units are found again from every pod.
FEW_CHANGES = 1024


def _units_since(o: Outlook, kept: Units, key: tuple[object, ...]) -> Units | None:
    """``kept`` brought to ``o``'s snapshot when the pods changed since are all outside
    gangs and none came of age or became protected: each changed pod's unit put in, taken
    out or replaced. When each adds to the units what it added before (nothing or a unit
    alike), the token stays. None: they must be found again.

    Pods that start running on their own have their units last, not where the pods are in
    the cache: every search orders units by (priority, kind, GPUs, work lost, key), and the
    key of a lone pod's unit is its own, so where it sits in the list changes no answer."""
    if kept.key != key or kept.config is not o.config or kept.protection is not o.protection:
        return None
    if not kept.since <= o.now < kept.young:
        return None  # a protected unit came of age (or the clock went back)
    old, new = kept.snapshot, o.session.snapshot
    changed = changed_pods(old, new)
    if changed is None or len(changed) > FEW_CHANGES:
        return None
    queue_of, memo = _queue_of_pod(o), lone_memo(o, "queue names")
    lone = kept.lone
    alike = True
    for uid in changed:
        if uid in old.gang_members or uid in new.gang_members:
            return None
        before = lone_state(old, uid, queue_of, now=kept.since, protection=o.protection)
        after = lone_state(new, uid, queue_of, now=o.now, protection=o.protection, lone=memo)
        if "young" in (before[0], after[0]) and before[:2] != after[:2]:
            return None  # the first time a protected one comes of age moves
        if before[2] is not None and after[2] is not None and same_unit(before[2], after[2]):
            if lone is kept.lone:
                lone = dict(lone)
            lone[uid] = after[2]  # in the same place: the pod object is new
            continue
        if before[2] is None and after[2] is None:
            continue
        alike = False
        if lone is kept.lone:
            lone = dict(lone)
        lone.pop(uid, None)
        if after[2] is not None:
            lone[uid] = after[2]
    token = kept.token if alike else object()
    since = kept.since
    timeless = kept.timeless and all(
        u.started <= since and _group(u) not in kept.crossing
        for uid in changed
        if (u := lone.get(uid)) is not None
    )
    if not kept.fresh(o.now):
        # Kept too long for victims ordered by work lost: the same units (none came of
        # age), found anew now.
        since, token = o.now, object()
    units = [*kept.gangs, *lone.values()]
    priorities = kept.priorities
    if lone is not kept.lone:  # the changed pods' units out, their units now in
        priorities = Counter(priorities)
        for uid in changed:
            if (unit := kept.lone.get(uid)) is not None:
                priorities[unit.priority] -= 1
            if (unit := lone.get(uid)) is not None:
                priorities[unit.priority] += 1
    by_node = kept.by_node
    if lone is not kept.lone:  # the changed pods' nodes, before and after
        by_node = dict(by_node)
        was = {uid: old.placement.get(uid) for uid in changed if uid in kept.lone}
        now = {uid: new.placement.get(uid) for uid in changed if uid in lone}
        for node in {*was.values(), *now.values()} - {None}:
            assert node is not None
            here = set(by_node.get(node, ()))
            here -= {u for u, n in was.items() if n == node}
            here |= {u for u, n in now.items() if n == node}
            by_node[node] = frozenset(here)
    return replace(kept, snapshot=new, since=since, lone=lone, token=token, units=units,
                   by_node=by_node, timeless=timeless, priorities=priorities)  # fmt: skip


def _by_node(snapshot: Snapshot, lone: dict[str, Unit]) -> dict[str, frozenset[str]]:
    """Per node, the uids of ``lone`` placed there."""
    found: dict[str, set[str]] = {}
    for uid in lone:
        node = snapshot.placement.get(uid)
        if node:
            found.setdefault(node, set()).add(uid)
    return {node: frozenset(uids) for node, uids in found.items()}


def lone_memo(o: Outlook, purpose: str) -> LoneMemo:
    """The memo of lone pods' units for ``running_units`` (one per ``purpose``: per way of
    naming a pod's queue), kept across snapshots while the queue config and the protection
    policy are the same objects (a unit's queue and protection come from them)."""
    held: list[Any] = o.kept.lasting(("lone units", purpose), lambda: [None, None, {}])
    if held[0] is not o.config or held[1] is not o.protection:
        held[:] = [o.config, o.protection, {}]
    return cast(LoneMemo, held[2])
