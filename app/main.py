"""The app factory: one FastAPI app per call, with its own services (nothing global)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from app import __version__
from app.api import debug, errors, explain, extender, health, metrics, overview, ui, webhook
from app.api.forward import ForwardToLeader, client_for_forwarding
from app.api.schemas import honest
from app.api.verbpath import VerbPath, post_handlers
from app.core.state.gateway import Gateway
from app.services import Services, build_services
from app.settings import Settings


def create_app(
    settings: Settings | None = None,
    *,
    services: Services | None = None,
    gateway: Gateway | None = None,
    api_client: Any = None,
) -> FastAPI:
    """Build a Muster server for ``settings`` (default: standalone on the demo cluster).

    ``services`` (or ``gateway`` / ``api_client``) may be injected by tests. The cluster watch,
    if any, starts with the app's lifespan and stops with it.
    """
    settings = settings or Settings(demo=True)
    services = services or build_services(settings, gateway=gateway, api_client=api_client)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        services.start()
        if services.election is not None:
            app.state.forwarder = client_for_forwarding(settings)
        try:
            yield
        finally:
            services.stop()
            if services.election is not None:
                await app.state.forwarder.aclose()

    app = FastAPI(
        title="Muster",
        version=__version__,
        summary="kube-scheduler extender for gang, queue and GPU-aware scheduling of AI/ML jobs",
        lifespan=lifespan,
    )
    app.state.muster = services
    app.state.metrics = metrics.Metrics(services)  # the HTTP layer's own, per app
    errors.install(app)
    for module in (extender, webhook, debug, overview, explain, health, metrics, ui):
        app.include_router(module.router)
    app.include_router(explain.whatif_router)
    # The verbs kube-scheduler posts to skip FastAPI's router and middleware (same answers).
    verbs = post_handlers(extender.router.routes)
    app.add_middleware(VerbPath, fastapi=app, handlers=verbs)
    if services.election is not None:  # added last: it runs first, on followers it forwards
        app.add_middleware(ForwardToLeader, services=lambda: services, verbs=verbs)
    generate = app.openapi

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = honest(generate())
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]
    return app
