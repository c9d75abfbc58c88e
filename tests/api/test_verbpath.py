"""The extender verbs past FastAPI's router (``VerbPath``) answer exactly as their routes do."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI, Request, Response

from app.api import extender
from app.api.verbpath import VerbPath, post_handlers
from app.main import create_app
from app.settings import Settings
from tests.conftest import running
from tests.factories import pod_json

POD = pod_json("p", gpu=1)
NAMES = ["h100-0", "a100-0", "t4-0"]


def without_verb_path(app: FastAPI) -> FastAPI:
    """``app`` serving the verbs through FastAPI's routes (before its stack is first built)."""
    app.user_middleware = [m for m in app.user_middleware if m.cls is not VerbPath]
    return app


@pytest.fixture(scope="module")
def clients() -> Iterator[tuple[httpx.Client, httpx.Client]]:
    settings = Settings(demo=True)
    with (
        running(create_app(settings)) as fast,
        running(without_verb_path(create_app(settings))) as routed,
    ):
        yield fast, routed


def test_the_verb_path_serves_exactly_the_extender_verbs() -> None:
    verbs = {"/filter", "/prioritize", "/preempt", "/bind"}
    assert set(post_handlers(extender.router.routes)) == verbs


def test_a_route_fed_parameters_stays_with_fastapi() -> None:
    router = APIRouter()

    @router.post("/bare")
    async def bare(request: Request) -> Response:
        return Response(b"")

    @router.post("/fed")
    async def fed(request: Request, limit: int = 3) -> Response:
        return Response(b"")

    assert set(post_handlers(router.routes)) == {"/bare"}


# (method, path, body): good calls, and every kind of bad one the routes answer themselves.
CALLS: list[tuple[str, str, Any]] = [
    ("POST", "/filter", {"Pod": POD, "NodeNames": NAMES}),
    ("POST", "/prioritize", {"Pod": POD, "NodeNames": NAMES}),
    ("POST", "/preempt", {"Pod": POD, "NodeNameToMetaVictims": {}}),
    ("POST", "/bind", {"PodName": "nope", "PodNamespace": "default", "PodUID": "u", "Node": "x"}),
    ("POST", "/filter", "{not json"),
    ("POST", "/filter", {"Pod": {"metadata": {"name": 5}}, "NodeNames": NAMES}),
    ("POST", "/prioritize", {"NodeNames": NAMES}),
    ("POST", "/bind", {"PodName": "p"}),
    ("POST", "/filter", [1, 2]),
    ("GET", "/filter", None),
    ("POST", "/filter/", {"Pod": POD, "NodeNames": NAMES}),
]


@pytest.mark.parametrize(("method", "path", "body"), CALLS)
def test_each_answer_is_the_routes_answer(
    clients: tuple[httpx.Client, httpx.Client], method: str, path: str, body: Any
) -> None:
    content = body if isinstance(body, str) or body is None else json.dumps(body)
    fast, routed = (
        c.request(method, path, content=content, follow_redirects=False) for c in clients
    )
    assert (fast.status_code, fast.content) == (routed.status_code, routed.content)
    assert fast.headers.get("content-type") == routed.headers.get("content-type")


def test_a_verb_never_reaches_the_router_and_anything_else_does() -> None:
    asyncio.run(_verb_never_reaches_the_router())


async def _verb_never_reaches_the_router() -> None:
    app = create_app(Settings(demo=True))
    reached: list[str] = []

    async def router(scope: dict[str, Any], receive: Any, send: Any) -> None:
        reached.append(f"{scope['method']} {scope['path']}")
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    path = VerbPath(router, app, post_handlers(extender.router.routes))
    transport = httpx.ASGITransport(app=lambda s, r, w: path({**s, "app": app}, r, w))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://muster") as client,
    ):
        answer = await client.post("/filter", json={"Pod": POD, "NodeNames": NAMES})
        assert answer.status_code == 200 and answer.json()["NodeNames"]
        bad = await client.post("/filter", content="{not json")
        assert bad.status_code == 400 and "malformed JSON" in bad.json()["error"]
        assert (await client.get("/filter")).status_code == 204
        assert (await client.post("/explain", json={})).status_code == 204
    assert reached == ["GET /filter", "POST /explain"]
