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
from itertools import compress

import numpy as np

from app.core.gpu.ask import GpuAsk
from app.core.gpu.ledger import device_shortfall
from app.core.model.values import Pod, Resources
from app.core.policies import resourcefit
from app.core.policies.registry import Constraint, check_reasons, constraint_of
from app.core.state.nodetable import is_none
from app.core.state.view import NodeView

UNKNOWN_NODE = "unknown node"


@dataclass(slots=True)
class FilterResult:
    """Feasible node names, in request order, and reasons for the rest.

    ``passed_over``: how many feasible nodes were left out because Muster's pick answers
    alone (``app.core.policies.solepick``). They stay off the wire: kube-scheduler needs no
    word on them, and on a large cluster they would be most of every answer.
    """

    feasible: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    passed_over: int = 0


_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x27D4EB2F165667C5],
                dtype=np.uint64)  # fmt: skip


def _grouped(rows: np.ndarray, format_row: Callable[[np.ndarray], str]) -> list[str]:
    """``format_row`` for each row of a 2-D array, computed once per distinct row.

    Rows are grouped by a 64-bit mix of their values (a 1-D sort, much cheaper than sorting
    rows); the grouping is verified, and exact row comparison takes over on a collision.
    """
    mix = _MIX if rows.shape[1] == len(_MIX) else np.resize(_MIX, rows.shape[1])
    with np.errstate(over="ignore"):
        keys = (rows.astype(np.uint64) * mix).sum(axis=1)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    distinct = rows[first]
    if not (distinct[inverse] == rows).all():
        distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
    texts = np.array([format_row(row) for row in distinct] + [None], dtype=object)[:-1]
    out: list[str] = texts[inverse.reshape(-1)].tolist()
    return out


def filter_nodes(view: NodeView, pod: Pod, names: Sequence[str]) -> FilterResult:
    """Decide every candidate in ``names`` for ``pod`` against ``view``.

    Everything is computed for all candidates at once; reasons are formatted once per distinct
    situation (taint group, free amounts), so a large cluster costs little more than a small one.
    """
    result = FilterResult()
    if not names:
        return result
    names = list(names)
    table = view.table
    rows = table.rows(names)
    known = rows >= 0
    safe = np.where(known, rows, 0) if len(table.nodes) else rows
    need = np.asarray(pod.requests, dtype=np.int64)
    ask = GpuAsk.of(pod)
    devices_short = None
    if len(table.nodes):
        free = table.allocatable[safe] - view.used[safe]
        fits = (free >= need).all(axis=1) & known
        if ask.count:
            # Enough GPU in total is not enough: whole GPUs need fully free devices, a share
            # needs one device with room.
            devices_short = fits & ~view.gpu_fits(ask, safe)
            fits &= ~devices_short
    else:
        free = np.zeros((len(names), 4), dtype=np.int64)
        fits = np.zeros(len(names), dtype=bool)
    checks = check_reasons(view, pod, safe) if len(table.nodes) else None
    ok = fits if checks is None else fits & is_none(checks)
    if ok.all():
        result.feasible = names
        return result
    result.feasible = list(compress(names, ok.tolist()))
    unresolvable: dict[str, str] = {}
    unknown = np.flatnonzero(~known)
    if len(unknown):
        unresolvable.update(dict.fromkeys([names[j] for j in unknown.tolist()], UNKNOWN_NODE))
    if checks is not None:
        bad = np.flatnonzero(known & ~is_none(checks))
        unresolvable.update(
            zip([names[j] for j in bad.tolist()], checks[bad].tolist(), strict=True)
        )
    short = known & ~fits if checks is None else known & ~fits & is_none(checks)
    if devices_short is not None:
        short &= ~devices_short
    if short.any():
        idx = np.flatnonzero(short)
        alloc = table.allocatable[safe[idx]]
        never = (alloc < need).any(axis=1)
        requests = pod.requests
        if never.any():
            j = idx[never]
            texts = _grouped(
                resourcefit.short_only(alloc[never], need),
                lambda row: resourcefit.too_big(requests, row),
            )
            unresolvable.update(zip([names[k] for k in j.tolist()], texts, strict=True))
        if (~never).any():
            j = idx[~never]
            lacking = free[j]
            texts = _grouped(
                resourcefit.short_only(lacking, need),
                lambda row: resourcefit.lacking(requests, row),
            )
            result.failed = dict(zip([names[k] for k in j.tolist()], texts, strict=True))
    if devices_short is not None and devices_short.any():
        j = np.flatnonzero(devices_short & (True if checks is None else is_none(checks)))
        texts = _grouped(view.gpu_free[safe[j]], lambda row: device_shortfall(ask, row.tolist()))
        result.failed.update(zip([names[k] for k in j.tolist()], texts, strict=True))
    result.unresolvable = unresolvable
    return result


#: What ``filter_nodes`` reads of a pod: requests, GPU ask, node constraints.
Shape = tuple[Resources, GpuAsk, Constraint]


@dataclass(slots=True)
class _Answer:
    """One memoised question and its answer; ``ok`` (per candidate: feasible) is made when
    first patched."""

    view: NodeView
    shape: Shape
    names: list[str]
    result: FilterResult
    ok: np.ndarray | None = None


class FilterMemo:
    """``filter_nodes`` that reuses its last answer for the next pod of the same shape (requests,
    GPU ask, node constraints) asked about the same candidates.

    kube-scheduler asks about the pods of one workload one after another, with the same
    candidate list. On the same ``NodeView`` the answer is the same, reasons included. On a
    newer view of the same nodes (a bind or a hold changed a node or two), only the candidates
    whose usage changed are decided again and patched into the last answer
    (``NodeView.changed_rows``): every candidate's answer depends on its own row alone. The
    answer is shared: callers must not change it. Thread-safe (one slot, replaced whole).
    """

    def __init__(self) -> None:
        self._last: _Answer | None = None

    def filter(self, view: NodeView, pod: Pod, names: Sequence[str]) -> FilterResult:
        """``filter_nodes(view, pod, names)``, or the last answer (patched where the view
        changed) if it is the same question."""
        shape: Shape = (pod.requests, GpuAsk.of(pod), constraint_of(pod))
        last = self._last
        if last is not None and last.shape == shape and last.names == names:
            if last.view is view:
                return last.result
            changed = view.changed_rows(last.view)
            if changed is not None:
                answer = _patched(last, view, pod, changed)
                self._last = answer
                return answer.result
        result = filter_nodes(view, pod, names)
        self._last = _Answer(view, shape, list(names), result)
        return result


def _patched(last: _Answer, view: NodeView, pod: Pod, changed: np.ndarray) -> _Answer:
    """``last``'s answer on ``view``: the candidates in ``changed`` rows decided again."""
    names = last.names
    at = np.flatnonzero(np.isin(view.table.rows(names), changed))
    if not len(at):
        return _Answer(view, last.shape, names, last.result, last.ok)
    ok = last.ok
    if ok is None:
        feasible = set(last.result.feasible)
        ok = np.fromiter((n in feasible for n in names), dtype=bool, count=len(names))
    again = [names[i] for i in at.tolist()]
    fresh = filter_nodes(view, pod, again)
    now = set(fresh.feasible)
    ok = ok.copy()
    ok[at] = [n in now for n in again]
    failed, unresolvable = dict(last.result.failed), dict(last.result.unresolvable)
    for name in again:
        failed.pop(name, None)
        unresolvable.pop(name, None)
    failed.update(fresh.failed)
    unresolvable.update(fresh.unresolvable)
    result = FilterResult(list(compress(names, ok.tolist())), failed, unresolvable)
    return _Answer(view, last.shape, names, result, ok)
