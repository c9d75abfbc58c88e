"""Cordoned nodes (``spec.unschedulable``) take only pods that tolerate the cordon taint."""

from __future__ import annotations

from app.core.model.values import Node, Pod, Taint

_CORDON = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")


class NodeUnschedulable:
    """A ``NodeFilter``: cordoned nodes refuse pods that do not tolerate the cordon."""

    name = "nodeunschedulable"

    def check(self, node: Node, pod: Pod) -> str | None:
        """``None`` if the node is schedulable for ``pod``, else the reason."""
        if node.unschedulable and not any(t.tolerates(_CORDON) for t in pod.tolerations):
            return "node is unschedulable (cordoned)"
        return None


POLICY = NodeUnschedulable()
