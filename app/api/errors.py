"""Bad input becomes a 4xx whose message names the problem; nothing a client sends gives a 500."""

from __future__ import annotations

import json
import logging
from typing import TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticCustomError
from starlette.types import Send

from app.core.model.errors import InvalidInput

log = logging.getLogger("muster.api")
M = TypeVar("M", bound=BaseModel)


class BadRequest(Exception):
    """A request Muster cannot act on: 400 when the body as a whole is wrong (empty, not JSON,
    not a JSON object; ``field`` empty), 422 when a field is (``field`` names it), 404 when a
    path parameter names nothing there is."""

    def __init__(self, status: int, message: str, field: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


def _location(loc: tuple[int | str, ...]) -> str:
    """``("Pod", "spec", "containers", 0)`` -> ``Pod.spec.containers[0]``; an empty key is
    ``[""]`` (a JSON object may have one; the field must still be named)."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part == "":
            path += '[""]'
        else:
            path += f".{part}" if path else part
    return path


def parse_body(model: type[M], body: bytes) -> M:
    """Validate a JSON body against ``model``; raise ``BadRequest`` naming the field.

    A model-level rule names its field by raising ``PydanticCustomError`` with ``field`` in
    its context (``one_of``)."""
    if not body.strip():
        raise BadRequest(400, "empty request body; expected a JSON object")
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        if first["type"] == "json_invalid":
            raise BadRequest(400, f"malformed JSON: {first['msg']}") from None
        if not first["loc"] and first["type"] == "model_type":
            kind = type(first["input"]).__name__
            raise BadRequest(400, f"expected a JSON object, got {kind}") from None
        field = _location(tuple(first["loc"])) or str((first.get("ctx") or {}).get("field", ""))
        if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
            # A tagged union (what-if workloads by kind): the tag is the field.
            tag = str((first.get("ctx") or {}).get("discriminator", "")).strip("'")
            field = f"{field}.{tag}" if field and tag else field or tag
        more = f" (and {exc.error_count() - 1} more problems)" if exc.error_count() > 1 else ""
        where = f"{field}: " if field else ""
        raise BadRequest(422, f"{where}{first['msg']}{more}", field) from None


def invalid(exc: InvalidInput) -> BadRequest:
    """``BadRequest`` for a model-translation error from ``app.core.model.parse``."""
    return BadRequest(422, str(exc), exc.field)


def install(app: FastAPI) -> None:
    """Register the handlers that turn errors into clear JSON answers."""

    @app.exception_handler(BadRequest)
    async def _bad_request(request: Request, exc: BadRequest) -> JSONResponse:
        return JSONResponse({"error": exc.message, "field": exc.field}, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _bad_parameter(request: Request, exc: RequestValidationError) -> JSONResponse:
        # Path and query parameters FastAPI checks itself: the same answer as a bad body.
        first = exc.errors()[0]
        loc = tuple(first.get("loc", ()))
        field = _location(loc[1:] if loc and loc[0] in ("path", "query", "body") else loc)
        problem = f"{field}: {first.get('msg', 'invalid')}" if field else first.get("msg", "")
        return JSONResponse({"error": problem, "field": field}, status_code=422)

    @app.exception_handler(json.JSONDecodeError)
    async def _bad_json(request: Request, exc: json.JSONDecodeError) -> JSONResponse:
        return JSONResponse({"error": f"malformed JSON: {exc}", "field": ""}, status_code=400)


def one_of(*names: str) -> PydanticCustomError:
    """The error of a model whose ``names`` are all missing (or null): names the first."""
    listed = " or ".join(names)
    return PydanticCustomError(
        "missing_one_of", f"one of {listed} is required", {"field": names[0]}
    )


async def send_json(
    send: Send, status: int, payload: object, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    """Answer with ``payload`` as JSON from ASGI middleware (which has no Response object)."""
    body = json.dumps(payload).encode()
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*start, *headers]})
    await send({"type": "http.response.body", "body": body})
