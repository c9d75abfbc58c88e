"""Bad requests get a 4xx naming the problem; nothing a client sends gives a 500."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.main import create_app
from tests.conftest import running
from tests.factories import pod_json

POD = pod_json("p", gpu=1)


def body(**fields: object) -> str:
    return json.dumps(fields)


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with running(create_app()) as c:
        yield c


BAD = [
    ("/filter", "", 400, ""),
    ("/filter", "{not json", 400, ""),
    ("/filter", "[]", 400, ""),
    ("/filter", body(NodeNames=["h100-0"]), 422, "Pod"),
    ("/filter", body(Pod=POD), 422, "NodeNames"),  # neither NodeNames nor Nodes
    ("/filter", body(Pod=None, NodeNames=[]), 422, "Pod"),
    ("/filter", body(Pod=POD, NodeNames="h100-0"), 422, "NodeNames"),
    ("/filter", body(Pod=POD, NodeNames=[1, 2]), 422, "NodeNames[0]"),
    ("/filter", body(Pod={"metadata": {}}, NodeNames=[]), 422, "Pod.metadata.name"),
    (
        "/filter",
        body(Pod=pod_json("p", gpu="-4"), NodeNames=["h100-0"]),
        422,
        "Pod.spec.containers[0].resources.requests.nvidia.com/gpu",
    ),
    (
        "/prioritize",
        body(Pod=pod_json("p", cpu="lots"), NodeNames=["h100-0"]),
        422,
        "Pod.spec.containers[0].resources.requests.cpu",
    ),
    (
        "/filter",
        body(
            Pod=POD,
            Nodes={"items": [{"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "x"}}}]},
        ),
        422,
        "Nodes.items[0].status.allocatable.cpu",
    ),
    ("/filter", body(Pod=POD, Nodes={"items": "nope"}), 422, "Nodes.items"),
    (
        "/filter",
        body(
            Pod=pod_json("p", annotations={"muster.io/gpu-fraction": "1.5"}),
            NodeNames=["h100-0"],
        ),
        422,
        "Pod.metadata.annotations[muster.io/gpu-fraction]",
    ),
    (
        "/prioritize",
        body(Pod=pod_json("p", gpu=1, annotations={"gpu-fraction": "0.5"}), NodeNames=["h100-0"]),
        422,
        "Pod.metadata.annotations[gpu-fraction]",
    ),
    (
        "/filter",
        body(
            Pod=POD,
            Nodes={
                "items": [
                    {"metadata": {"name": "n"}, "status": {"allocatable": {"memory": "-1Gi"}}}
                ]
            },
        ),
        422,
        "Nodes.items[0].status.allocatable.memory",
    ),
    ("/bind", body(PodName="p", PodNamespace="default", PodUID="u"), 422, "Node"),
    ("/bind", body(PodName=1, PodNamespace="d", PodUID="u", Node="n"), 422, "PodName"),
    ("/bind", body(PodName="", PodNamespace="d", PodUID="u", Node="n"), 422, "PodName"),
    ("/preempt", body(Pod=POD), 422, "NodeNameToMetaVictims"),
    (
        "/preempt",
        body(Pod=POD, NodeNameToMetaVictims={"n": {"Pods": [{}]}}),
        422,
        "NodeNameToMetaVictims.n.Pods[0].UID",
    ),
    (
        "/preempt",
        body(
            Pod=POD,
            NodeNameToVictims={
                "n": {"Pods": [{"metadata": {"name": "v"}, "spec": {"priority": "x"}}]}
            },
        ),
        422,
        "NodeNameToVictims.n.Pods[0].spec.priority",
    ),
]


@pytest.mark.parametrize(("path", "payload", "status", "field"), BAD)
def test_bad_request_is_named(
    client: httpx.Client, path: str, payload: str, status: int, field: str
) -> None:
    response = client.post(path, content=payload, headers={"Content-Type": "application/json"})
    assert response.status_code == status, response.text
    answer = response.json()
    assert answer["field"] == field
    assert answer["error"]
    if field:
        assert field in answer["error"]


def test_unknown_node_fails_only_that_node(client: httpx.Client) -> None:
    answer = client.post("/filter", content=body(Pod=POD, NodeNames=["h100-0", "nowhere"])).json()
    assert answer["NodeNames"] == ["h100-0"]
    assert answer["FailedAndUnresolvableNodes"] == {"nowhere": "unknown node"}
    assert answer["FailedNodes"] == {}


def test_bind_of_unknown_pod_is_a_bind_error(client: httpx.Client) -> None:
    answer = client.post(
        "/bind", content=body(PodName="x", PodNamespace="d", PodUID="never-seen", Node="h100-0")
    ).json()
    assert "unknown to Muster" in answer["Error"]


def test_lowercase_keys_are_accepted(client: httpx.Client) -> None:
    answer = client.post(
        "/filter", content=json.dumps({"pod": POD, "nodenames": ["h100-0"]})
    ).json()
    assert answer["NodeNames"] == ["h100-0"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
pod_like = st.fixed_dictionaries(
    {},
    optional={
        "metadata": st.fixed_dictionaries(
            {}, optional={"name": json_values, "uid": json_values, "labels": json_values}
        ),
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "containers": st.lists(
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "resources": st.fixed_dictionaries(
                                {}, optional={"requests": json_values}
                            )
                        },
                    ),
                    max_size=2,
                )
                | json_values,
                "tolerations": json_values,
                "nodeSelector": json_values,
                "affinity": json_values,
                "priority": json_values,
            },
        ),
    },
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    path=st.sampled_from(["/filter", "/prioritize", "/preempt", "/bind"]),
    payload=st.fixed_dictionaries(
        {},
        optional={
            "Pod": pod_like | json_values,
            "NodeNames": st.lists(st.sampled_from(["h100-0", "cpu-0", "x"]), max_size=3)
            | json_values,
            "Nodes": json_values,
            "NodeNameToMetaVictims": json_values,
            "PodName": json_values,
            "PodNamespace": json_values,
            "PodUID": json_values,
            "Node": json_values,
        },
    ),
)
def test_never_a_500(client: httpx.Client, path: str, payload: dict) -> None:
    response = client.post(path, content=json.dumps(payload))
    assert response.status_code < 500, response.text
    assert response.status_code in (200, 400, 422)
