"""Which pods differ between two cache snapshots, so what is derived from placed pods can be
updated for those alone (or shown unchanged) instead of read again from every pod."""

from __future__ import annotations

from collections.abc import Mapping

from app.core.state.cache import Snapshot


def changed_pods(old: Snapshot, new: Snapshot) -> set[str] | None:
    """The uids whose pod object, placement, reservation, assumed bind, bind time, gang or
    GPU devices differ between ``old`` and ``new`` (a pod that came or went counts); ``None``
    when the node table differs (then everything may have changed).

    Pods are compared by identity (a new object for the same pod counts as changed); the
    other per-pod facts by value. Cheap when little changed: mappings that are equal as a
    whole (identity first, per value) are not looked into.
    """
    if old.view.table is not new.view.table:
        return None
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
    return out


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
