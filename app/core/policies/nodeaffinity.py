"""``spec.nodeSelector`` and required node affinity, with Kubernetes' matching rules."""

from __future__ import annotations

from app.core.model import Node, Pod, Requirement, SelectorTerm


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
