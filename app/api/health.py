"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness: the process answers")
def healthz() -> dict[str, str]:
    """Always ``ok`` while the server runs."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: the cache is complete and this replica leads",
    responses={503: {"description": "Not synced yet, or a follower (leader election)"}},
)
def readyz(request: Request) -> JSONResponse:
    """200 once the cache has synced (initial list done, or cluster file loaded) and, with
    leader election, this replica leads; else 503. The Service thus sends kube-scheduler to
    the leader only; followers keep their cache warm and are ready to take over."""
    services = request.app.state.muster
    cache = services.cache
    ready = cache.synced and services.leading
    body: dict[str, object] = {
        "ready": ready,
        "mode": services.settings.describe(),
        "nodes": len(cache.view().nodes),
        "synced": cache.synced,
    }
    if services.leadership is not None and services.leadership.elected:
        body["role"] = services.leadership.role
    if services.election is not None:
        body["election"] = services.election.stats()
    return JSONResponse(body, status_code=200 if ready else 503)
