"""``spec.nodeSelector`` and required node affinity, with Kubernetes' matching rules."""

from __future__ import annotations

import numpy as np

from app.core.model.values import Node, Pod, Requirement, SelectorTerm
from app.core.state.nodetable import NodeTable, is_none


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _matches(requirement: Requirement, value: str | None) -> bool:
    op, values = requirement.operator, requirement.values
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    # Gt / Lt compare integers; anything unparsable never matches.
    if value is None or len(values) != 1:
        return False
    have, bound = _int(value), _int(values[0])
    if have is None or bound is None:
        return False
    return have > bound if op == "Gt" else have < bound


def _term_matches(term: SelectorTerm, node: Node) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False
    fields = {"metadata.name": node.name}
    return all(_matches(r, node.labels.get(r.key)) for r in term.match_expressions) and all(
        _matches(r, fields.get(r.key)) for r in term.match_fields
    )


def check(node: Node, pod: Pod) -> str | None:
    """``None`` if ``node`` satisfies the pod's node selector and required affinity."""
    for key, wanted in pod.node_selector.items():
        if node.labels.get(key) != wanted:
            return f"nodeSelector {key}={wanted} not matched"
    terms = pod.required_affinity
    if terms is not None and not any(_term_matches(term, node) for term in terms):
        return "required node affinity not matched"
    return None


def _vector(requirement: Requirement, values: np.ndarray) -> np.ndarray:
    """``_matches`` over an object array of label values (``None`` = absent)."""
    op = requirement.operator
    present = ~is_none(values)
    if op == "In":
        return present & np.isin(values, list(requirement.values))
    if op == "NotIn":
        return ~present | ~np.isin(values, list(requirement.values))
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return ~present
    return np.fromiter((_matches(requirement, v) for v in values), dtype=bool, count=len(values))


def _term_vector(term: SelectorTerm, table: NodeTable, rows: np.ndarray) -> np.ndarray:
    if not term.match_expressions and not term.match_fields:
        return np.zeros(len(rows), dtype=bool)
    ok = np.ones(len(rows), dtype=bool)
    for r in term.match_expressions:
        ok &= _vector(r, table.column(r.key)[rows])
    for r in term.match_fields:
        values = table.names[rows] if r.key == "metadata.name" else np.full(len(rows), None)
        ok &= _vector(r, values)
    return ok


class NodeAffinity:
    """A ``LabelFilter``: ``spec.nodeSelector`` and required node affinity."""

    name = "nodeaffinity"

    def applies(self, pod: Pod) -> bool:
        """Whether ``pod`` has a node selector or a required affinity."""
        return bool(pod.node_selector) or pod.required_affinity is not None

    def check(self, node: Node, pod: Pod) -> str | None:
        """``None`` if ``node`` satisfies the pod's node selector and required affinity."""
        return check(node, pod)

    def reasons(self, table: NodeTable, pod: Pod, rows: np.ndarray) -> np.ndarray:
        """``check`` for every row in ``rows`` at once: an object array (``None``: ok)."""
        return reasons(table, pod, rows)


POLICY = NodeAffinity()


def reasons(table: NodeTable, pod: Pod, rows: np.ndarray) -> np.ndarray:
    """``check`` for every row in ``rows`` at once: an object array of reasons (``None``: ok)."""
    out = np.full(len(rows), None, dtype=object)
    for key, wanted in pod.node_selector.items():
        bad = (table.column(key)[rows] != wanted) & is_none(out)
        out[bad] = f"nodeSelector {key}={wanted} not matched"
    terms = pod.required_affinity
    if terms is not None:
        ok = np.zeros(len(rows), dtype=bool)
        for term in terms:
            ok |= _term_vector(term, table, rows)
        out[~ok & is_none(out)] = "required node affinity not matched"
    return out
