"""Which policies run, in which order, and the code that runs them.

An explicit registry: nothing registers itself by being imported. The filters run in the order
listed (the first reason found is the one reported); a strategy name picks the scorer.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np

from app.core.model.values import Pod, SelectorTerm, Toleration
from app.core.policies import binpack, nodeaffinity, nodeunschedulable, spread, taints
from app.core.policies.interfaces import LabelFilter, NodeFilter, Scorer
from app.core.state.nodetable import is_none
from app.core.state.view import NodeView

#: Usage-independent per-node filters, judged once per taint group.
NODE_FILTERS: tuple[NodeFilter, ...] = (nodeunschedulable.POLICY, taints.POLICY)
#: Usage-independent filters judged on label columns.
LABEL_FILTERS: tuple[LabelFilter, ...] = (nodeaffinity.POLICY,)
#: Scorers by strategy name. ``muster`` (the default) ranks GPU pods with the live GPU placement
#: policy (``app.core.policies.gpuplacement``) in the extender; elsewhere it packs like binpack.
STRATEGIES: Mapping[str, Scorer] = MappingProxyType(
    {"muster": binpack.POLICY, "binpack": binpack.POLICY, "spread": spread.POLICY}
)


def check_reasons(view: NodeView, pod: Pod, rows: np.ndarray) -> np.ndarray | None:
    """Per-node failures of the usage-independent filters for ``rows`` (object array, ``None``
    where a node passes), or ``None`` when every row passes.

    Node filters run once per group of nodes with the same taints; label filters run on label
    columns, all rows at once.
    """
    table = view.table
    out: np.ndarray | None = None
    if len(rows) and table.special.any():
        groups, representatives = table.check_groups
        wanted = groups[rows]
        present = np.unique(wanted)
        for group in present[present > 0].tolist():
            node = representatives[group]
            assert node is not None
            why = next((w for f in NODE_FILTERS if (w := f.check(node, pod)) is not None), None)
            if why is not None:
                if out is None:
                    out = np.full(len(rows), None, dtype=object)
                out[wanted == group] = why
    for label_filter in LABEL_FILTERS:
        if not label_filter.applies(pod):
            continue
        found = label_filter.reasons(table, pod, rows)
        if out is None:
            out = found
        else:
            fill = is_none(out)
            out[fill] = found[fill]
    if out is not None and is_none(out).all():
        return None
    return out


def eligible(view: NodeView, pod: Pod) -> np.ndarray:
    """Per node: do the usage-independent filters let ``pod`` in? (read-only)

    Independent of usage: it depends on the node set and the pod's ``constraint_of`` alone,
    so it is remembered per node table and constraint (a cycle asks for gang after gang of
    alike members).
    """
    return view.table.derived(("eligible", constraint_of(pod)), lambda: _eligible(view, pod))


def _eligible(view: NodeView, pod: Pod) -> np.ndarray:
    reasons = check_reasons(view, pod, np.arange(len(view.nodes)))
    found = np.ones(len(view.nodes), dtype=bool) if reasons is None else is_none(reasons)
    found.setflags(write=False)
    return found


#: What decides which nodes a pod may use regardless of usage: its node selector,
#: tolerations and required affinity.
Constraint = tuple[
    tuple[tuple[str, str], ...], tuple[Toleration, ...], tuple[SelectorTerm, ...] | None
]


def constraint_of(pod: Pod) -> Constraint:
    """``pod``'s node constraints as a key: pods with equal keys share one ``eligible`` mask."""
    return tuple(sorted(pod.node_selector.items())), pod.tolerations, pod.required_affinity


class UnknownStrategy(KeyError, ValueError):
    """A strategy name the registry does not know (a lookup error and a bad value)."""


def scorer(strategy: str) -> Scorer:
    """The scorer of ``strategy``; ``UnknownStrategy`` naming the choices for an unknown one."""
    found = STRATEGIES.get(strategy)
    if found is None:
        raise UnknownStrategy(f"unknown strategy {strategy!r}; choose one of {sorted(STRATEGIES)}")
    return found
