"""Which routes a listener serves.

Muster's routes fall into three roles:

* ``extender`` - ``/filter``, ``/prioritize``, ``/preempt``, ``/bind``: kube-scheduler's calls.
  ``/bind`` creates Bindings, so with a client CA these are served only where the client
  certificate is checked.
* ``webhook`` - ``/mutate``, ``/validate``: the API server's AdmissionReviews (HTTPS, server
  authentication only; both answer from memory and change nothing).
* ``ops`` - everything else: ``/healthz``, ``/readyz``, ``/metrics``, ``/debug/*``,
  ``/explain/*``, ``/whatif``, the OpenAPI document and its viewers, and any route added later
  (a new route is an operations route unless it is listed above).

``RouteGate`` wraps the app for one listener and answers 404 (saying which kind of listener
serves it) for a path of a role the listener does not carry. The lifespan passes through.
"""

from __future__ import annotations

from collections.abc import Collection

from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import send_json

EXTENDER, WEBHOOK, OPS = "extender", "webhook", "ops"
ROLES = frozenset({EXTENDER, WEBHOOK, OPS})

_ROLE_OF_PATH = {
    "/filter": EXTENDER,
    "/prioritize": EXTENDER,
    "/preempt": EXTENDER,
    "/bind": EXTENDER,
    "/mutate": WEBHOOK,
    "/validate": WEBHOOK,
}


def role_of(path: str) -> str:
    """The role of the route at ``path`` (``ops`` unless it is an extender or webhook verb)."""
    return _ROLE_OF_PATH.get(path.rstrip("/") or "/", OPS)


class RouteGate:
    """An ASGI wrapper serving only the routes of ``roles`` (404 for the others)."""

    def __init__(self, app: ASGIApp, roles: Collection[str]) -> None:
        unknown = set(roles) - ROLES
        if unknown:
            raise ValueError(f"unknown listener roles {sorted(unknown)}")
        self.app = app
        self.roles = frozenset(roles)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            role = role_of(scope.get("path", "/"))
            if role not in self.roles:
                await self._refuse(scope, role, send)
                return
        await self.app(scope, receive, send)

    async def _refuse(self, scope: Scope, role: str, send: Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        problem = f"{scope.get('path')} is not served on this listener (it is on the {role} one)"
        await send_json(send, 404, {"error": problem, "field": "path"})
