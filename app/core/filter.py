"""The filter verb's decision: which candidate nodes may take a pod, and why not the others.

Failures split the way kube-scheduler's own preemption needs them:

* ``failed`` (FailedNodes): the node lacks free resources now; evicting pods there could help,
  so kube-scheduler may consider preemption on it.
* ``unresolvable`` (FailedAndUnresolvableNodes): no eviction can help (unknown node, cordon,
  taint, selector or affinity mismatch, or a request larger than the node's whole capacity), so
  kube-scheduler must not evict anything on its behalf.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from app.core.cache import NodeView
from app.core.model import Node, Pod
from app.core.policies import nodeaffinity, nodeunschedulable, resourcefit, taints

UNKNOWN_NODE = "unknown node"

#: Per-node checks in the order they are reported; each returns a reason or ``None``.
NodeCheck = Callable[[Node, Pod], "str | None"]
NODE_CHECKS: tuple[NodeCheck, ...] = (nodeunschedulable.check, taints.check, nodeaffinity.check)


@dataclass(slots=True)
class FilterResult:
    """Feasible node names, in request order, and reasons for the rest."""

    feasible: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)


def _node_check(node: Node, pod: Pod) -> str | None:
    for check in NODE_CHECKS:
        why = check(node, pod)
        if why is not None:
            return why
    return None


def eligible(view: NodeView, pod: Pod) -> np.ndarray:
    """Per node: do the per-node checks (cordon, taints, selector, affinity) let ``pod`` in?

    Independent of usage, so a planner can compute it once per member and reuse it.
    """
    mask = np.ones(len(view.nodes), dtype=bool)
    if pod.node_selector or pod.required_affinity is not None:
        rows = range(len(view.nodes))
    else:
        rows = np.flatnonzero(view.special).tolist()
    for i in rows:
        if _node_check(view.nodes[i], pod) is not None:
            mask[i] = False
    return mask


def filter_nodes(view: NodeView, pod: Pod, names: Sequence[str]) -> FilterResult:
    """Decide every candidate in ``names`` for ``pod`` against ``view``.

    Resource fit is computed for all candidates at once; the per-node checks run only where
    they can matter (tainted or cordoned nodes, or a pod with a selector or affinity).
    """
    result = FilterResult()
    if not names:
        return result
    get = view.index.get
    rows = np.fromiter((get(n, -1) for n in names), dtype=np.int64, count=len(names))
    known = rows >= 0
    safe_rows = np.where(known, rows, 0)
    ok = known.copy()
    if len(view.nodes):
        ok &= resourcefit.fits(view, safe_rows, pod.requests)
        needs_look = view.special[safe_rows] & known
        if pod.node_selector or pod.required_affinity is not None:
            needs_look = known
    else:
        needs_look = known
    if ok.all() and not needs_look.any():
        result.feasible = list(names)
        return result
    requests = pod.requests
    for j in np.flatnonzero(~ok | needs_look):
        name = names[j]
        row = int(rows[j])
        if row < 0:
            result.unresolvable[name] = UNKNOWN_NODE
            continue
        why = _node_check(view.nodes[row], pod)
        if why is not None:
            result.unresolvable[name] = why
        elif not ok[j]:
            too_big = resourcefit.never_fits(view, row, requests)
            if too_big is not None:
                result.unresolvable[name] = too_big
            else:
                result.failed[name] = resourcefit.reason(view, row, requests)
    rejected = result.failed.keys() | result.unresolvable.keys()
    result.feasible = [n for n in names if n not in rejected]
    return result
