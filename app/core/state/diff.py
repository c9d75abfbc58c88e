"""Which pods differ between two cache snapshots, so what is derived from placed pods can be
updated for those alone (or shown unchanged) instead of read again from every pod."""

from __future__ import annotations

import operator
import threading
from collections import deque
from collections.abc import Mapping

from app.core.state.view import Snapshot

#: The last few answers of ``changed_pods``: the inputs (held, so compared by identity) and
#: the answer (explain asks for the same pair of snapshots from several places).
_RECENT: deque[tuple[tuple[object, ...], frozenset[str] | None]] = deque(maxlen=4)
_LOCK = threading.Lock()


def changed_pods(old: Snapshot, new: Snapshot) -> frozenset[str] | None:
    """The uids whose pod object, placement, reservation, assumed bind, bind time, gang or
    GPU devices differ between ``old`` and ``new`` (a pod that came or went counts); ``None``
    when the node table differs (then everything may have changed).

    Pods are compared by identity (a new object for the same pod counts as changed); the
    other per-pod facts by value. Cheap when little changed: mappings that are equal as a
    whole (identity first, per value) are not looked into.
    """
    inputs = (*_facts(old), *_facts(new))
    with _LOCK:
        for kept, answer in _RECENT:
            if len(kept) == len(inputs) and all(map(operator.is_, kept, inputs)):
                return answer
    answer = _changed(old, new)
    with _LOCK:
        _RECENT.append((inputs, answer))
    return answer


def _facts(snapshot: Snapshot) -> tuple[object, ...]:
    """What ``changed_pods`` reads of a snapshot."""
    s = snapshot
    return (s.view.table, s.pods, s.placement, s.reserved, s.bound_at, s.gang_members,
            s.devices, s.assumed)  # fmt: skip


def _changed(old: Snapshot, new: Snapshot) -> frozenset[str] | None:
    if old.view.table is not new.view.table:
        return None
    said = _logged(old, new)
    if said is not None:
        return said
    out: set[str] = set()
    _differ(old.pods, new.pods, out, by_identity=True)
    for a, b in (
        (old.placement, new.placement),
        (old.reserved, new.reserved),
        (old.bound_at, new.bound_at),
        (old.gang_members, new.gang_members),
        (old.devices, new.devices),
    ):
        _differ(a, b, out, by_identity=False)
    if old.assumed != new.assumed:
        out |= old.assumed ^ new.assumed
    return frozenset(out)


def changed_members(old: Snapshot, new: Snapshot) -> frozenset[str]:
    """The uids whose pod object, assumed bind or gang differ between ``old`` and ``new`` (a
    pod that came or went counts): all a gang is built from (``gangs_of``). Reservations and
    node changes are not looked at."""
    said = _logged(old, new)
    if said is not None:
        return said
    out: set[str] = set()
    _differ(old.pods, new.pods, out, by_identity=True)
    _differ(old.gang_members, new.gang_members, out, by_identity=False)
    if old.assumed != new.assumed:
        out |= old.assumed ^ new.assumed
    return frozenset(out)


def _logged(old: Snapshot, new: Snapshot) -> frozenset[str] | None:
    """The uids the cache's change log says changed from ``old`` to ``new`` (None: not known
    from the log)."""
    log = new.changes
    if log is None or old.changes is not log or old.generation > new.generation:
        return None
    return log.since(old.generation, new.generation)


def _differ(
    old: Mapping[str, object], new: Mapping[str, object], out: set[str], *, by_identity: bool
) -> None:
    if old is new or (not by_identity and old == new):
        return
    if by_identity and len(old) == len(new) and old.keys() == new.keys():
        out.update(k for k, v in new.items() if old[k] is not v)
        return
    missing = object()
    for k, v in new.items():
        was = old.get(k, missing)
        if was is not v and (by_identity or was != v):
            out.add(k)
    out.update(k for k in old if k not in new)
