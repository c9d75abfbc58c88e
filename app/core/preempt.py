"""The preempt verb's decision (foundation version).

kube-scheduler proposes, per candidate node, the pods it would evict. Muster keeps a node only
if evicting those victims frees enough GPUs for the pod, since kube-scheduler does not count
GPUs itself when the extender owns them (``ignoredByScheduler``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.core.cache import NodeView, Snapshot
from app.core.model import Pod
from app.core.podgroup import gang_spec


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
) -> dict[str, Victims]:
    """The candidates on which evicting the proposed victims lets the pod's GPUs fit.

    A node whose victims include a gang member is dropped: evicting part of a gang would leave
    the rest of it idle (whole-gang preemption is the planner's business).
    """
    view: NodeView = snapshot.view
    given = given or {}
    kept: dict[str, Victims] = {}
    for node, victims in candidates.items():
        if node not in view.index:
            continue
        if any(_in_gang(snapshot, given, uid) for uid in victims.uids):
            continue
        free = view.free_of(node).gpu + gpus_freed(snapshot, node, victims.uids, given)
        if free >= pod.requests.gpu:
            kept[node] = victims
    return kept


def _in_gang(snapshot: Snapshot, given: Mapping[str, Pod], uid: str) -> bool:
    pod = snapshot.pods.get(uid) or given.get(uid)
    return pod is not None and gang_spec(pod) is not None
