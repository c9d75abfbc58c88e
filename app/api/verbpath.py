"""The extender verbs called straight from the ASGI call, past FastAPI's router and middleware.

kube-scheduler posts to four paths, one call or two for every pod it places. FastAPI's router
and middleware stack cost about 120 µs of such a call here (352 against 232 µs for a filter
answered from the memo, the app called in process), a third of the verb, and on a busy
machine that time is taken from filter's answer. ``VerbPath`` hands a ``POST`` to one of
those paths to the very handler its route names (``app.api.extender``), and what the handler
raises to the app's own exception handlers (``app.api.errors``), so every answer, an error's
included, is the route's; any other request goes through FastAPI as before. An exception no
handler takes propagates as it would from the route (Starlette's outermost middleware answers
500).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

Handler = Callable[[Request], Awaitable[Response]]
ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]


def post_handlers(routes: Any) -> dict[str, Handler]:
    """Path -> endpoint of every ``POST`` route among ``routes`` that takes the bare request
    and nothing else (a route FastAPI must feed parameters to stays with FastAPI)."""
    out: dict[str, Handler] = {}
    for route in routes:
        if isinstance(route, APIRoute) and "POST" in (route.methods or ()) and _bare(route):
            out[route.path] = cast(Handler, route.endpoint)
    return out


def _bare(route: APIRoute) -> bool:
    """Whether FastAPI feeds ``route``'s handler the request and nothing else (as FastAPI
    reads the handler's signature: no parameter, body, dependency or other injected value)."""
    d = route.dependant
    fed = (d.path_params, d.query_params, d.header_params, d.cookie_params, d.body_params,
           d.dependencies)  # fmt: skip
    injected = (d.background_tasks_param_name, d.response_param_name,
                d.websocket_param_name, d.security_scopes_param_name)  # fmt: skip
    return d.request_param_name is not None and not any(fed) and not any(injected)


class VerbPath:
    """ASGI middleware: ``POST`` to one of ``handlers``' paths runs that handler here (see the
    module); ``app`` serves everything else. ``fastapi`` is the app whose exception handlers
    answer what a handler raises."""

    def __init__(self, app: ASGIApp, fastapi: FastAPI, handlers: Mapping[str, Handler]) -> None:
        self.app = app
        self._fastapi = fastapi
        self._handlers = dict(handlers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = (
            self._handlers.get(scope["path"])
            if scope["type"] == "http" and scope["method"] == "POST"
            else None
        )
        if handler is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await handler(request)
        except Exception as exc:
            answer = self._error_handler(exc)
            if answer is None:
                raise
            response = await answer(request, exc)
        await response(scope, receive, send)

    def _error_handler(self, exc: Exception) -> ErrorHandler | None:
        """The app's handler for ``exc``'s class or its nearest base, as Starlette picks."""
        handlers = self._fastapi.exception_handlers
        for cls in type(exc).__mro__:
            found = handlers.get(cls)
            if found is not None:
                return cast(ErrorHandler, found)
        return None
