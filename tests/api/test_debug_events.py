"""``GET /debug/events``: the decision journal over HTTP, paged by sequence number."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from app.core.state.cache import ClusterCache
from app.core.state.gateway import InMemoryGateway
from app.core.state.journal import KINDS
from app.main import create_app
from app.services import Services
from app.settings import Settings
from app.wiring import build_graph
from tests.conftest import running
from tests.factories import pod_json


def _gang(client: httpx.Client, name: str, size: int) -> None:
    """kube-scheduler's part for a gang of ``size`` 1-GPU members: filter, then bind all."""
    labels = {"muster.io/pod-group": name, "muster.io/min-member": str(size)}
    pods = [pod_json(f"{name}-{i}", gpu=1, labels=labels) for i in range(size)]
    binds = []
    nodes = ["h100-0", "a100-0", "cpu-0"]
    for pod in pods:  # standalone Muster learns pods from filter: the gang is complete after
        client.post("/filter", content=json.dumps({"Pod": pod, "NodeNames": nodes}))
    for pod in pods:
        body = {"Pod": pod, "NodeNames": nodes}
        (node,) = client.post("/filter", content=json.dumps(body)).json()["NodeNames"]
        binds.append(
            {
                "PodName": pod["metadata"]["name"],
                "PodNamespace": "default",
                "PodUID": pod["metadata"]["uid"],
                "Node": node,
            }
        )
    with ThreadPoolExecutor(size) as pool:  # the barrier holds each call until all arrive
        answers = list(pool.map(lambda b: client.post("/bind", content=json.dumps(b)), binds))
    assert [a.json() for a in answers] == [{"Error": ""}] * size


def test_events_page_by_sequence_number() -> None:
    with running(create_app()) as client:
        empty = client.get("/debug/events").json()
        assert (empty["events"], empty["latest"], empty["next"], empty["missed"]) == ([], 0, 0, 0)
        _gang(client, "a", 2)
        _gang(client, "b", 2)
        page = client.get("/debug/events").json()
        assert [(e["seq"], e["kind"], e["gang"]) for e in page["events"]] == [
            (1, "plan", "default/a"),
            (2, "gang-started", "default/a"),
            (3, "plan", "default/b"),
            (4, "gang-started", "default/b"),
        ]
        first = page["events"][0]
        assert first["queue"] == "default" and len(first["nodes"]) == 1
        assert first["victims"] == [] and first["gpuSecondsLost"] == 0
        assert page["latest"] == 4 and page["next"] == 4 and page["missed"] == 0
        totals = page["totals"]
        assert totals["counts"]["plan"] == 2 and totals["counts"]["gang-started"] == 2
        assert totals["victims"] == {"preemption": 0, "reclaim": 0}

        after = client.get("/debug/events", params={"since": 2, "limit": 1}).json()
        assert [e["seq"] for e in after["events"]] == [3] and after["next"] == 3
        rest = client.get("/debug/events", params={"since": after["next"]}).json()
        assert [e["seq"] for e in rest["events"]] == [4]
        none = client.get("/debug/events", params={"since": 4}).json()
        assert none["events"] == [] and none["next"] == 4
        restarted = client.get("/debug/events", params={"since": 40}).json()
        assert restarted["events"] == [] and restarted["next"] == 4  # start over from latest
        newest = client.get("/debug/events", params={"limit": 1}).json()
        assert [e["seq"] for e in newest["events"]] == [4]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": -1}, "since"),
        ({"since": "x"}, "since"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "ten"}, "limit"),
    ],
)
def test_bad_parameters_get_422_naming_them(params: dict[str, object], field: str) -> None:
    with running(create_app()) as client:
        answer = client.get("/debug/events", params=params)
        assert answer.status_code == 422
        assert answer.json()["field"] == field  # the same {error, field} as every 4xx
        assert answer.json()["error"].startswith(f"{field}: ")


def test_the_schema_is_published() -> None:
    with running(create_app()) as client:
        spec = client.get("/openapi.json").json()
        get = spec["paths"]["/debug/events"]["get"]
        assert {p["name"] for p in get["parameters"]} == {"since", "limit"}
        schemas = spec["components"]["schemas"]
        ref = schemas["EventOut"]["properties"]["kind"]["$ref"]
        assert set(schemas[ref.rsplit("/", 1)[1]]["enum"]) == {str(k) for k in KINDS}


def test_a_server_built_without_a_journal_says_so() -> None:
    cache = ClusterCache()
    gateway = InMemoryGateway(cache)
    extender = build_graph(Settings(), cache, gateway).extender
    services = Services(Settings(), cache, gateway, extender)  # no journal handed over
    with running(create_app(services=services)) as client:
        answer = client.get("/debug/events")
        assert answer.status_code == 503
        assert "without a decision journal" in answer.json()["error"]
        assert client.get("/metrics").status_code == 200  # the rest of /metrics still works
