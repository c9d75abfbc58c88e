"""Runtime detection of what the API server serves, and the ungate patch's shape."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import ApiClient, Configuration

from app.k8s.features import server_version, serves_scheduling_gates, version_of
from app.k8s.gateway import KubeGateway, ungate_patch
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


def test_kube_gateway_sends_the_ungate_patch_as_a_json_patch() -> None:
    calls: list[tuple[Any, ...]] = []

    class Response:
        def read(self) -> bytes:
            return b"{}"

        def release_conn(self) -> None:
            pass

    class Core:
        def patch_namespaced_pod(self, *args: Any, **kwargs: Any) -> Response:
            calls.append((args, kwargs.get("_content_type")))
            return Response()

    with ApiClient(Configuration()) as api:
        gateway = KubeGateway(api)
        gateway._core = Core()  # type: ignore[assignment]
        gateway.ungate("ml", "p", "u1", ("muster.io/gang",), "muster.io/gang")
    ((args, content_type),) = calls
    assert args[:2] == ("p", "ml")
    assert args[2][-1] == {"op": "replace", "path": "/spec/schedulingGates", "value": []}
    assert content_type == "application/json-patch+json"
