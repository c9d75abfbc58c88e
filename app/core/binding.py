"""The bind verb: reserve in the cache, create the Binding, undo the reservation on failure."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.cache import ClusterCache
from app.core.errors import BindRejected, GatewayError
from app.core.gateway import Gateway


@dataclass(frozen=True, slots=True)
class BindOutcome:
    """``error`` is empty on success; otherwise it is the text kube-scheduler receives."""

    error: str = ""
    reason: str = "Bound"


class Binder:
    """Binds pods through a ``Gateway``, never letting concurrent binds over-commit a node."""

    def __init__(self, cache: ClusterCache, gateway: Gateway) -> None:
        self._cache = cache
        self._gateway = gateway

    def bind(self, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        """Assume the pod on ``node``, then create its Binding; any failure is an error text."""
        try:
            self._cache.assume(uid, node)
        except BindRejected as exc:
            return BindOutcome(error=str(exc), reason="Rejected")
        try:
            self._gateway.bind(namespace, name, uid, node)
        except GatewayError as exc:
            self._cache.forget(uid)
            return BindOutcome(
                error=f"binding {namespace}/{name} to {node} failed: {exc}", reason=exc.reason
            )
        return BindOutcome()
