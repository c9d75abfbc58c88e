"""Liveness and readiness."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

router = APIRouter(tags=["operations"])


class Health(BaseModel):
    """Liveness answer."""

    status: Literal["ok"]


class Readiness(BaseModel):
    """Readiness answer (200 when ``ready``, else 503); ``role``, ``leader`` and ``election``
    with leader election."""

    ready: bool
    mode: str
    nodes: int
    synced: bool
    role: str | None = None
    leader: str | None = None
    election: dict[str, Any] | None = None


_NOT_READY: dict[int | str, dict[str, Any]] = {
    503: {
        "description": "not ready: the cache has not synced yet (or no plan records read)",
        "model": Readiness,
    }
}


@router.get("/healthz", summary="Liveness: the process answers", response_model=Health)
def healthz() -> dict[str, str]:
    """Always ``ok`` while the server runs."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: the cache holds a complete picture of the cluster",
    response_model=Readiness,
    responses=_NOT_READY,
)
def readyz(request: Request) -> JSONResponse:
    """200 once the cache has synced (initial list done, or cluster file loaded), else 503.

    With leader election, followers are ready too: they forward the extender verbs to the
    leader (``app.api.forward``); ``role`` and ``election`` say who leads. A single replica
    is ready once it has also carried on from the plan records (``Leadership``)."""
    services = request.app.state.muster
    cache = services.cache
    elected = services.leadership is not None and services.leadership.elected
    ready = cache.synced and (elected or services.leading)
    body: dict[str, object] = {
        "ready": ready,
        "mode": services.settings.describe(),
        "nodes": len(cache.view().nodes),
        "synced": cache.synced,
    }
    if services.leadership is not None and services.leadership.elected:
        body["role"] = services.leadership.role
        body["leader"] = services.leader_url
    if services.election is not None:
        body["election"] = services.election.stats()
    return JSONResponse(body, status_code=200 if ready else 503)
