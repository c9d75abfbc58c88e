"""Runtime detection of what the API server serves, and the ungate patch's shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from kubernetes.client import ApiClient, Configuration

from app.core.model.errors import GatewayError
from app.k8s.features import server_version, serves_scheduling_gates, version_of
from app.k8s.gateway import KubeGateway, ungate_patch
from tests.conftest import running
from tests.e2e.controlplane import free_ports


@pytest.mark.parametrize(
    ("major", "minor", "version", "gates"),
    [
        ("1", "20", (1, 20), False),
        ("1", "26+", (1, 26), False),
        ("1", "27", (1, 27), True),
        ("1", "30+", (1, 30), True),
        ("2", "0", (2, 0), True),
        ("", "x", None, False),
    ],
)
def test_version_and_gates(
    major: str, minor: str, version: tuple[int, int] | None, gates: bool
) -> None:
    assert version_of(major, minor) == version
    assert serves_scheduling_gates(version) is gates


def test_an_unreachable_api_server_turns_gates_off() -> None:
    configuration = Configuration()
    configuration.host = f"https://127.0.0.1:{free_ports(1)[0]}"
    with ApiClient(configuration) as api:
        assert server_version(api) is None


def test_the_ungate_patch_tests_uid_and_gates_then_keeps_the_others() -> None:
    ops = ungate_patch("u1", ["muster.io/gang", "other.io/x"], "muster.io/gang")
    assert ops == [
        {"op": "test", "path": "/metadata/uid", "value": "u1"},
        {
            "op": "test",
            "path": "/spec/schedulingGates",
            "value": [{"name": "muster.io/gang"}, {"name": "other.io/x"}],
        },
        {"op": "replace", "path": "/spec/schedulingGates", "value": [{"name": "other.io/x"}]},
    ]


@dataclass
class Recorder:
    """What a stand-in API server saw (method, path with query, lower-case headers, JSON
    body), the (status, body) it answers with, and where it listens."""

    url: str = ""
    seen: list[tuple[str, str, dict[str, str], Any]] = field(default_factory=list)
    answer: tuple[int, Any] = (200, {})


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    """A local HTTP server standing in for the API server (answers 200 ``{}``)."""
    record = Recorder()
    app = FastAPI()

    @app.api_route("/{path:path}", methods=["POST", "PATCH", "DELETE"])
    async def answer(request: Request) -> Response:
        query = f"?{request.url.query}" if request.url.query else ""
        headers = {k.lower(): v for k, v in request.headers.items()}
        body = json.loads(await request.body())
        record.seen.append((request.method, request.url.path + query, headers, body))
        status, reply = record.answer
        return JSONResponse(reply, status_code=status)

    with running(app) as client:
        record.url = str(client.base_url).rstrip("/")
        yield record


def _gateway_to(server: Recorder) -> tuple[ApiClient, KubeGateway]:
    configuration = Configuration()
    configuration.host = server.url
    configuration.api_key = {"BearerToken": "Bearer the-token"}  # as kube_config sets it
    api = ApiClient(configuration)
    return api, KubeGateway(api)


def test_kube_gateway_sends_the_ungate_patch_as_a_json_patch(recorder: Recorder) -> None:
    api, gateway = _gateway_to(recorder)
    with api:
        gateway.ungate("ml", "p", "u1", ("muster.io/gang",), "muster.io/gang")
    ((method, path, headers, body),) = recorder.seen
    assert (method, path) == ("PATCH", "/api/v1/namespaces/ml/pods/p")
    assert headers["content-type"] == "application/json-patch+json"
    assert headers["authorization"] == "Bearer the-token"
    assert body[-1] == {"op": "replace", "path": "/spec/schedulingGates", "value": []}


@pytest.mark.parametrize(
    ("call", "method", "path", "content_type"),
    [
        (lambda g: g.bind("ml", "p", "u1", "n1"), "POST",
         "/api/v1/namespaces/ml/pods/p/binding", "application/json"),
        (lambda g: g.check_bind("ml", "p", "u1", "n1"), "POST",
         "/api/v1/namespaces/ml/pods/p/binding?dryRun=All", "application/json"),
        (lambda g: g.evict("ml", "p", "u1", dry_run=True), "POST",
         "/api/v1/namespaces/ml/pods/p/eviction?dryRun=All", "application/json"),
        (lambda g: g.delete_pod("ml", "p", "u1"), "DELETE",
         "/api/v1/namespaces/ml/pods/p", "application/json"),
        (lambda g: g.annotate_pod("ml", "p", {"a": None}), "PATCH",
         "/api/v1/namespaces/ml/pods/p", "application/merge-patch+json"),
        (lambda g: g.event("ml", "p", "u1", "Planned", "m"), "POST",
         "/api/v1/namespaces/ml/events", "application/json"),
    ],
)  # fmt: skip
def test_kube_gateway_requests(
    recorder: Recorder, call: Any, method: str, path: str, content_type: str
) -> None:
    api, gateway = _gateway_to(recorder)
    with api:
        call(gateway)
    ((seen_method, seen_path, headers, _),) = recorder.seen
    assert (seen_method, seen_path) == (method, path)
    assert headers["content-type"] == content_type
    assert headers["authorization"] == "Bearer the-token"


def test_kube_gateway_refusals_carry_the_status_message(recorder: Recorder) -> None:
    recorder.answer = (409, {"kind": "Status", "code": 409, "message": "pod p is already bound"})
    api, gateway = _gateway_to(recorder)
    with api, pytest.raises(GatewayError) as caught:
        gateway.bind("ml", "p", "u1", "n1")
    assert (caught.value.reason, caught.value.message) == ("Conflict", "pod p is already bound")
