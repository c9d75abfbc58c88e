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

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import RedirectResponse

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

router = APIRouter(prefix="/ui", tags=["ui"], include_in_schema=False)


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


@router.get("")
def root() -> RedirectResponse:
    """``/ui`` -> ``/ui/`` (relative, so a path prefix in front of Muster is kept)."""
    return RedirectResponse("ui/", status_code=307)


@router.get("/")
def index(request: Request) -> Response:
    """The dashboard's page; it shows Queues, Gangs, Nodes or Events by the URL's ``#``."""
    return _send(request, _ASSETS["index.html"])


@router.get("/static/{name}")
def static(request: Request, name: str) -> Response:
    """A file of the dashboard (only the files shipped in ``app/ui``)."""
    asset = _ASSETS.get(name)
    if asset is None:
        raise HTTPException(404, f"no dashboard file {name!r}")
    return _send(request, asset)
