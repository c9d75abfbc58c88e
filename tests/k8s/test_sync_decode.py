"""The slim LIST-page decoder gives ``parse`` exactly what the full JSON would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import ModuleType

import pytest

from app.core.model.errors import InvalidInput
from app.core.model.parse import node_from_dict, pod_from_dict
from app.k8s.sync import decode_page
from tests.scriptload import script_module


@pytest.fixture(scope="module")
def objects() -> Iterator[ModuleType]:
    yield from script_module("bench_memory")  # real-shaped node and pod JSON


def page(items: list[dict], **meta: str) -> bytes:
    return json.dumps({"kind": "List", "metadata": meta, "items": items}).encode()


def test_pods_and_nodes_convert_the_same_as_from_the_full_json(objects: ModuleType) -> None:
    pods = [objects.pod_json(i, 2, fill=0.5) for i in range(16)]
    pods[3]["metadata"]["deletionTimestamp"] = "2026-11-25T07:00:00Z"
    pods[5].setdefault("status", {})["conditions"] = [
        {"type": "Initialized", "status": "True", "lastTransitionTime": None},
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"},
    ]
    body = decode_page(page(pods, resourceVersion="42", **{"continue": "tok"}))
    assert body["metadata"] == {"resourceVersion": "42", "continue": "tok"}
    assert [pod_from_dict(p) for p in body["items"]] == [pod_from_dict(p) for p in pods]
    assert "managedFields" not in body["items"][0]["metadata"]
    assert [p["metadata"]["name"] for p in body["items"] if pod_from_dict(p).unschedulable] == [
        pods[5]["metadata"]["name"]
    ]
    nodes = [objects.node_json(i) for i in range(3)]
    slim = decode_page(page(nodes, resourceVersion="7"))["items"]
    assert [node_from_dict(n) for n in slim] == [node_from_dict(n) for n in nodes]
    assert "images" not in slim[0]["status"]


def test_an_odd_page_falls_back_to_the_full_json_and_parse_names_the_field() -> None:
    odd = {"metadata": {"name": "p", "labels": {"a": 1}}, "status": "broken"}
    body = decode_page(page([odd], resourceVersion="1"))
    assert body["items"] == [odd]
    with pytest.raises(InvalidInput) as info:
        pod_from_dict(body["items"][0])
    assert "status" in info.value.field
