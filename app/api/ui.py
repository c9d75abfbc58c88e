"""``/ui``: the web dashboard (Queues, Gangs, Nodes, Events), served from files in the package.

The pages are hand-written HTML, CSS and JavaScript modules in ``app/ui`` (package data, so an
installed wheel carries them): nothing is fetched from the internet and nothing is built on the
user's machine. The browser reads the same ``/debug/*`` and ``/explain`` endpoints as curl.
Every URL the pages use is relative, so the dashboard also works behind a path prefix
(``kubectl proxy``, an ingress).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Request, Response
from fastapi import Path as PathParam
from fastapi.responses import RedirectResponse

from app.api.errors import BadRequest
from app.api.schemas import errors

#: Where the dashboard's files live (``app/ui``; see pyproject's package-data).
ASSETS = Path(__file__).resolve().parent.parent / "ui"
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
#: The browser asks again each time, and gets 304 Not Modified while the file is unchanged.
CACHE = "no-cache"

router = APIRouter(prefix="/ui", tags=["ui"])


def _file(*media_types: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of a dashboard file: its bytes, or 304 while unchanged."""
    text = {"schema": {"type": "string"}}
    return {
        200: {"description": "the file", "content": {t.split(";")[0]: text for t in media_types}},
        304: {"description": "unchanged since the ETag in If-None-Match"},
    }


@dataclass(frozen=True, slots=True)
class Asset:
    """One file of the dashboard, read once."""

    body: bytes
    media_type: str
    etag: str


def _load(folder: Path) -> dict[str, Asset]:
    assets = {}
    for path in sorted(folder.iterdir()):
        media_type = TYPES.get(path.suffix)
        if media_type is None or not path.is_file():
            continue
        body = path.read_bytes()
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        assets[path.name] = Asset(body, media_type, etag)
    return assets


_ASSETS = _load(ASSETS)


def _send(request: Request, asset: Asset) -> Response:
    headers = {"ETag": asset.etag, "Cache-Control": CACHE}
    if request.headers.get("if-none-match") == asset.etag:
        return Response(status_code=304, headers=headers)
    return Response(asset.body, media_type=asset.media_type, headers=headers)


@router.get(
    "",
    response_class=RedirectResponse,
    status_code=307,
    responses={307: {"description": "to ui/ (relative)"}},
)
def root() -> RedirectResponse:
    """``/ui`` -> ``/ui/`` (relative, so a path prefix in front of Muster is kept)."""
    return RedirectResponse("ui/", status_code=307)


@router.get("/", response_class=Response, responses=_file(TYPES[".html"]))
def index(request: Request) -> Response:
    """The dashboard's page; it shows Queues, Gangs, Nodes or Events by the URL's ``#``."""
    return _send(request, _ASSETS["index.html"])


@router.get(
    "/static/{name}",
    response_class=Response,
    responses={**_file(*TYPES.values()), **errors(404, e404="no such dashboard file")},
)
def static(
    request: Request,
    name: Annotated[str, PathParam(json_schema_extra={"enum": sorted(_ASSETS)})],
) -> Response:
    """A file of the dashboard (only the files shipped in ``app/ui``)."""
    asset = _ASSETS.get(name)
    if asset is None:
        raise BadRequest(404, f"name: no dashboard file {name!r}", "name")
    return _send(request, asset)
