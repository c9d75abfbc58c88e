"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness: the process answers")
def healthz() -> dict[str, str]:
    """Always ``ok`` while the server runs."""
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the cache holds a complete picture of the cluster")
def readyz(request: Request) -> JSONResponse:
    """200 once the cache has synced (initial list done, or cluster file loaded), else 503."""
    services = request.app.state.muster
    cache = services.cache
    body = {
        "ready": cache.synced,
        "mode": services.settings.describe(),
        "nodes": len(cache.view().nodes),
    }
    return JSONResponse(body, status_code=200 if cache.synced else 503)
