"""Taints and tolerations: a pod may only go where it tolerates every NoSchedule/NoExecute taint."""

from __future__ import annotations

from app.core.model.values import Node, Pod

_BLOCKING = ("NoSchedule", "NoExecute")


class TaintToleration:
    """A ``NodeFilter``: a pod must tolerate every NoSchedule/NoExecute taint of the node."""

    name = "taints"

    def check(self, node: Node, pod: Pod) -> str | None:
        """``None`` if ``pod`` tolerates ``node``'s blocking taints, else the reason."""
        for taint in node.taints:
            if taint.effect not in _BLOCKING:
                continue
            if not any(t.tolerates(taint) for t in pod.tolerations):
                shown = f"{taint.key}={taint.value}" if taint.value else taint.key
                return f"untolerated taint {{{shown}:{taint.effect}}}"
        return None


POLICY = TaintToleration()
