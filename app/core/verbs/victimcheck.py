"""The preempt verb's check of kube-scheduler's victims (foundation version).

kube-scheduler proposes, per candidate node, the pods it would evict. Muster keeps a node only
if evicting those victims frees enough GPUs for the pod — in total and on the right devices
(whole free devices, or one device with room for a share) — since kube-scheduler does not
count GPUs itself when the extender owns them (``ignoredByScheduler``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from app.core.gpu.ask import GpuAsk, fits_mask, give
from app.core.model.gang import gang_spec
from app.core.model.values import Pod
from app.core.state.view import NodeView, Snapshot


@dataclass(frozen=True, slots=True)
class Victims:
    """Pods kube-scheduler proposes to evict on one node."""

    uids: tuple[str, ...]
    num_pdb_violations: int = 0


def gpus_freed(snapshot: Snapshot, node: str, uids: Sequence[str], given: Mapping[str, Pod]) -> int:
    """Milli-GPUs the victims hold on ``node`` (pods from the request fill cache gaps)."""
    total = 0
    for uid in uids:
        pod = snapshot.pods.get(uid) or given.get(uid)
        if pod is not None and snapshot.placement.get(uid, pod.node_name) == node:
            total += pod.requests.gpu
    return total


def filter_candidates(
    snapshot: Snapshot,
    pod: Pod,
    candidates: Mapping[str, Victims],
    given: Mapping[str, Pod] | None = None,
    *,
    protected_for: Callable[[Pod], float] = lambda _: 0.0,
    now: float | None = None,
) -> dict[str, Victims]:
    """The candidates on which evicting the proposed victims lets the pod's GPUs fit.

    A node is dropped when its victims hold only part of a gang (the rest would sit idle on
    other nodes; whole-gang preemption is the planner's business), or include a pod Muster
    protects (running for less than ``protected_for(pod)`` seconds).
    """
    view: NodeView = snapshot.view
    given = given or {}
    now = time.time() if now is None else now
    kept: dict[str, Victims] = {}
    for node, victims in candidates.items():
        if node not in view.index:
            continue
        if _splits_a_gang(snapshot, given, victims.uids) or _protected(
            snapshot, given, victims.uids, protected_for, now
        ):
            continue
        free = view.free_of(node).gpu + gpus_freed(snapshot, node, victims.uids, given)
        if free >= pod.requests.gpu and _devices_fit(snapshot, pod, node, victims.uids):
            kept[node] = victims
    return kept


def _devices_fit(snapshot: Snapshot, pod: Pod, node: str, uids: Sequence[str]) -> bool:
    """Whether the pod's GPU ask (whole devices, or a share of one) fits ``node``'s devices
    once the cached victims are gone (enough GPU in total is not enough)."""
    ask = GpuAsk.of(pod)
    if not ask.count or any(uid not in snapshot.pods for uid in uids):
        return True  # victims the cache does not know yet: only their totals can be judged
    free = snapshot.view.gpu_free[snapshot.view.index[node]].copy()
    for uid in set(uids):
        held = snapshot.devices.get(uid)
        if held is not None and held.node == node:
            give(free, held.ask, held.devices)
    return bool(fits_mask(free[None, :], ask)[0])


def _splits_a_gang(snapshot: Snapshot, given: Mapping[str, Pod], uids: Sequence[str]) -> bool:
    proposed: dict[str, set[str]] = {}
    for uid in uids:
        pod = snapshot.pods.get(uid) or given.get(uid)
        spec = gang_spec(pod) if pod is not None else None
        if spec is not None:
            proposed.setdefault(spec.key, set()).add(uid)
    for gang, chosen in proposed.items():
        members = {
            uid
            for uid, key in snapshot.gang_members.items()
            if key == gang and snapshot.holds_node(snapshot.pods[uid])
        }
        if not members <= chosen:
            return True
    return False


def _protected(
    snapshot: Snapshot,
    given: Mapping[str, Pod],
    uids: Sequence[str],
    protected_for: Callable[[Pod], float],
    now: float,
) -> bool:
    for uid in uids:
        pod = snapshot.pods.get(uid) or given.get(uid)
        if pod is None:
            continue
        started = pod.started or snapshot.bound_at.get(uid, now)
        if now - started < protected_for(pod):
            return True
    return False
