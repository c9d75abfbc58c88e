"""What could give way: running work cut into units that are evicted whole.

A unit is either a whole running gang (every member holding a node), one elastic member of a
running gang beyond its min-member (those give way first), or a pod running on its own. Units
younger than their protection (``app.core.policies.minruntime``) are never offered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from app.core.actions.allocate import AlikeFit, Allocation, FitBound, allocate
from app.core.gpu.ask import GpuOvercommit
from app.core.model.gang import Gang
from app.core.model.values import Pod
from app.core.policies.interfaces import Protection
from app.core.state.releases import releases, without
from app.core.state.view import NodeView, Snapshot


@dataclass(frozen=True, slots=True)
class Unit:
    """Pods that are evicted together. ``key`` names the gang (or ``pod:ns/name``)."""

    key: str
    queue: str | None
    pods: tuple[Pod, ...]
    priority: int
    elastic: bool
    started: float

    @property
    def gpus(self) -> int:
        """Milli-GPUs the unit holds."""
        return sum(p.requests.gpu for p in self.pods)

    def work_lost(self, now: float) -> float:
        """Pod-seconds of running time an eviction would throw away."""
        return max(now - self.started, 0.0) * len(self.pods)


def running_units(
    snapshot: Snapshot,
    gangs: dict[str, Gang],
    queue_of: Callable[[Pod], str | None],
    *,
    now: float,
    protection: Protection,
    protected_until: list[float] | None = None,
    lone: LoneMemo | None = None,
) -> list[Unit]:
    """Every unprotected unit of running work that Muster manages (pods with a queue);
    ``protected_until`` (if given) receives when each unit still protected stops being so.
    ``lone``: what was found for pods on their own in earlier calls with the same
    ``queue_of`` and ``protection`` (kept per pod object and start; updated here)."""
    units: list[Unit] = []
    started = {uid: snapshot.bound_at.get(uid, now) for uid in snapshot.placement}

    def start_of(pod: Pod) -> float:
        return pod.started or started.get(pod.uid, now)

    in_gangs: set[str] = set()
    for gang in gangs.values():
        bound = [p for p in gang.bound if p.node_name or snapshot.holds_node(p)]
        in_gangs.update(p.uid for p in gang.members)
        if not bound:
            continue
        queue = queue_of(bound[0])
        if queue is None:
            continue
        first = min(start_of(p) for p in bound)
        seconds = protection.seconds(bound, queue, gang=True)
        if now - first < seconds:
            if protected_until is not None:
                protected_until.append(first + seconds)
            continue  # protected while young
        extras = sorted(bound, key=start_of, reverse=True)[: max(len(bound) - gang.min_member, 0)]
        for pod in extras:
            units.append(Unit(gang.key, queue, (pod,), gang.priority, True, start_of(pod)))
        units.append(Unit(gang.key, queue, tuple(bound), gang.priority, False, first))
    if lone is not None and len(lone) > 2 * len(snapshot.pods) + 1024:
        lone.clear()  # uids of gone pods pile up
    for uid, pod in snapshot.pods.items():
        if uid in in_gangs or pod.terminal or pod.deleting or not snapshot.holds_node(pod):
            continue
        unit, seconds = _lone(pod, start_of(pod), queue_of, protection, lone)
        if unit is None:
            continue
        if now - unit.started < seconds:
            if protected_until is not None:
                protected_until.append(unit.started + seconds)
            continue
        units.append(unit)
    return units


def _lone(pod: Pod, start: float, queue_of: Callable[[Pod], str | None],
          protection: Protection, lone: LoneMemo | None) -> tuple[Unit | None, float]:  # fmt: skip
    """The unit of ``pod`` running on its own since ``start`` (None: it has no queue) and its
    protection in seconds, from ``lone`` when found there for the same pod and start."""
    hit = lone.get(pod.uid) if lone is not None else None
    if hit is not None and hit[0] is pod and hit[1] == start:
        return hit[2], hit[3]
    queue = queue_of(pod)
    if queue is None:
        unit, seconds = None, 0.0
    else:
        seconds = protection.seconds([pod], queue, gang=False)
        unit = Unit(f"pod:{pod.key}", queue, (pod,), pod.priority, False, start)
    if lone is not None:
        lone[pod.uid] = (pod, start, unit, seconds)
    return unit, seconds


#: What a lone pod is in ``running_units`` at some instant: nothing (not running on its own,
#: or without a queue), protected until a time, or its unit.
LoneState = tuple[str, float, "Unit | None"]


def lone_state(
    snapshot: Snapshot,
    uid: str,
    queue_of: Callable[[Pod], str | None],
    *,
    now: float,
    protection: Protection,
    lone: LoneMemo | None = None,
) -> LoneState:
    """What pod ``uid`` (not a gang member) adds to ``running_units(snapshot, ...)`` at
    ``now``: ``("none", 0, None)``, ``("young", until, None)`` or ``("unit", 0, unit)``."""
    pod = snapshot.pods.get(uid)
    if pod is None or pod.terminal or pod.deleting or not snapshot.holds_node(pod):
        return ("none", 0.0, None)
    start = pod.started or (snapshot.bound_at.get(uid, now) if uid in snapshot.placement else now)
    unit, seconds = _lone(pod, start, queue_of, protection, lone)
    if unit is None:
        return ("none", 0.0, None)
    if now - start < seconds:
        return ("young", start + seconds, None)
    return ("unit", 0.0, unit)


def same_unit(a: Unit, b: Unit) -> bool:
    """Whether ``a`` and ``b`` are alike to every victim search: key, queue, priority, kind,
    start, and each pod's uid and requests (where pods sit is the snapshot's to say)."""
    facts = (a.key, a.queue, a.priority, a.elastic, a.started)
    return (
        facts == (b.key, b.queue, b.priority, b.elastic, b.started)
        and len(a.pods) == len(b.pods)
        and all(
            p.uid == q.uid and p.requests == q.requests for p, q in zip(a.pods, b.pods, strict=True)
        )
    )


#: Per uid, for a pod on its own: the pod object and start it was found for, its unit (None:
#: it has no queue) and its protection in seconds.
LoneMemo = dict[str, tuple[Pod, float, "Unit | None", float]]


def freed(snapshot: Snapshot, units: Iterable[Unit]) -> NodeView:
    """``snapshot.view`` with every pod of ``units`` gone (resources and GPU devices)."""
    return without(snapshot, (pod for unit in units for pod in unit.pods))


def cheapest_set(
    snapshot: Snapshot,
    members: Sequence[Pod],
    candidates: Sequence[Unit],
    *,
    strategy: str = "binpack",
) -> tuple[list[Unit], Allocation] | None:
    """The shortest prefix of ``candidates`` (cheapest first) whose eviction lets ``members``
    fit, with every unit that turns out unnecessary dropped again; ``None`` if even evicting
    all of them would not make room (then nothing should be evicted at all)."""

    gone = _Freer(snapshot, candidates)
    alike = AlikeFit.of(snapshot.view, members, strategy)
    # Most sets tried leave too little room; the quick bound says so without an allocation
    # (it is False only where ``allocate`` would leave a member out: the same answers).
    # Members placed alike need no allocation at all to know (``AlikeFit``).
    bound = FitBound(snapshot.view, members) if alike is None else None

    def attempt(units: Sequence[Unit]) -> Allocation:
        return allocate(gone.freed(units), members, strategy=strategy)

    # What the view takes but on the rows the candidates are on, which each set of victims
    # changes alone (``AlikeFit``'s count is a sum over rows).
    rest = 0
    if alike is not None:
        rows, view = gone.rows, snapshot.view
        rest = alike.room(view) - alike.room_of(rows, view.used[rows], view.gpu_free[rows])

    def fits(units: Sequence[Unit]) -> bool:
        if alike is not None:
            return rest + alike.room_of(gone.rows, *gone.rows_freed(units)) >= alike.limit
        assert bound is not None
        view = gone.freed(units)
        return bound.possible(view) and allocate(view, members, strategy=strategy).complete

    if not candidates or not fits(candidates):
        return None
    low, high = 1, len(candidates)
    while low < high:
        mid = (low + high) // 2
        if fits(candidates[:mid]):
            high = mid
        else:
            low = mid + 1
    chosen = list(candidates[:low])
    if alike is not None and gone.terms is not None:
        chosen = _drop_many(chosen, gone, alike, rest)
    else:
        for unit in reversed(candidates[:low]):  # most expensive first
            trial = [u for u in chosen if u is not unit]
            if trial and fits(trial):
                chosen = trial
    return chosen, attempt(chosen)


def _drop_many(chosen: list[Unit], gone: _Freer, alike: AlikeFit, rest: int) -> list[Unit]:
    """``cheapest_set``'s last pass for alike members on per-pod terms: each unit of
    ``chosen``, most expensive first, dropped when the others still make room. The next few
    sets to try (each without one unit) are judged at once, more at a time while none makes
    room; up to the first that makes room they are what the pass one by one tries, so it
    goes on from there."""
    order = list(reversed(chosen))
    masks = gone.masks(order)  # per unit in ``order``: its pods
    left = np.ones(len(order), dtype=bool)  # the units of ``order`` still chosen
    held = masks.sum(axis=0)  # per pod: how many chosen units hold it
    i, step = 0, 1
    while i < len(order):
        at = np.arange(i, min(i + step, len(order)))
        keeps = (held[None, :] - masks[at]) > 0
        used, gpu_free, over = gone.terms_freed(keeps)
        room = rest + alike.rooms_of(gone.rows, used, gpu_free)
        dropped = None
        for j, k in enumerate(at.tolist()):
            if int(left.sum()) == 1:  # the last unit: no set without it is tried
                continue
            if over[j]:
                raise GpuOvercommit("releasing pods would leave a device with over 1000 free")
            if room[j] >= alike.limit:
                dropped = k
                break
        if dropped is None:
            i, step = int(at[-1]) + 1, step * 2
            continue
        left[dropped] = False
        held = held - masks[dropped]
        i, step = dropped + 1, 1
    return [u for u, kept in zip(order, left.tolist(), strict=True) if kept][::-1]


class _Freer:
    """``freed(snapshot, units)`` for any units among ``candidates``, without a pass over their
    pods each time: the pods' releases are gathered once, and each call picks its pods' rows
    (the same sums, so the same view)."""

    def __init__(self, snapshot: Snapshot, candidates: Sequence[Unit]) -> None:
        self._view = snapshot.view
        index, placement = snapshot.view.index, snapshot.placement
        position: dict[str, int] = {}
        pods: list[Pod] = []
        for unit in candidates:
            for pod in unit.pods:
                node = placement.get(pod.uid)
                if node and node in index and pod.uid not in position:
                    position[pod.uid] = len(pods)
                    pods.append(pod)
        self._releases = releases(snapshot, pods)
        self._rows = {
            id(unit): [position[p.uid] for p in unit.pods if p.uid in position]
            for unit in candidates
        }

        #: The rows the candidates' pods are on (ascending): ``freed`` differs there alone.
        self.rows = np.unique(self._releases.rows)
        # Per pod, what it frees there, when that is small enough to hold (a few nodes'
        # worth of candidates, as a fix's focus gives; not a planner's whole cluster).
        small = len(self._releases) * len(self.rows) <= TERMS
        self.terms = self._releases.row_terms(self._view) if small else None

    def freed(self, units: Sequence[Unit]) -> NodeView:
        """``snapshot.view`` with every pod of ``units`` (some of the candidates) gone."""
        return self._releases.only(self._keep(units)).freed(self._view)

    def rows_freed(self, units: Sequence[Unit]) -> tuple[np.ndarray, np.ndarray]:
        """``freed(units)``'s ``used`` and ``gpu_free`` on ``rows`` (elsewhere it is the
        snapshot's view)."""
        keep = self._keep(units)
        if self.terms is not None:
            return self.terms.freed(keep)
        rows, used, gpu_free = self._releases.only(keep).freed_rows(self._view)
        out = self._view.used[self.rows], self._view.gpu_free[self.rows]
        at = np.searchsorted(self.rows, rows)
        out[0][at], out[1][at] = used, gpu_free
        return out

    def masks(self, units: Sequence[Unit]) -> np.ndarray:
        """Per unit of ``units`` (candidates), which of the candidates' pods it holds."""
        out = np.zeros((len(units), len(self._releases)), dtype=np.int64)
        for i, unit in enumerate(units):
            out[i, self._rows[id(unit)]] = 1
        return out

    def terms_freed(self, keeps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``rows_freed`` of the pods each row of boolean ``keeps`` marks (one more leading
        axis), and per row whether ``freed`` would refuse it (``RowTerms.freed_many``; needs
        ``terms``)."""
        assert self.terms is not None
        return self.terms.freed_many(keeps)

    def _keep(self, units: Sequence[Unit]) -> np.ndarray:
        keep = np.zeros(len(self._releases), dtype=bool)
        keep[[row for unit in units for row in self._rows[id(unit)]]] = True
        return keep


#: Candidates' pods times their rows up to which ``_Freer`` holds each pod's terms.
TERMS = 1 << 14
