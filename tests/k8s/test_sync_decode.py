"""The slim LIST-page and watch-event decoders give ``parse`` exactly what the full JSON would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import ModuleType

import pytest

from app.core.model.errors import InvalidInput
from app.core.model.parse import node_from_dict, pod_from_dict
from app.k8s.reflector import decode_event, decode_page
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


def event(kind: str, obj: object) -> str:
    return json.dumps({"type": kind, "object": obj})


def test_watch_events_convert_the_same_as_from_the_full_json(objects: ModuleType) -> None:
    pods = [objects.pod_json(i, 2, fill=0.5) for i in range(8)]
    pods[2]["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}
    ]
    for kind in ("ADDED", "MODIFIED", "DELETED"):
        for pod in pods:
            decoded = decode_event(event(kind, pod))
            assert decoded["type"] == kind
            assert pod_from_dict(decoded["object"]) == pod_from_dict(pod)
            assert "managedFields" not in decoded["object"]["metadata"]
    node = objects.node_json(1)
    decoded = decode_event(event("MODIFIED", node))["object"]
    assert node_from_dict(decoded) == node_from_dict(node)
    assert "images" not in decoded["status"]
    bookmark = {"kind": "Pod", "metadata": {"resourceVersion": "99"}}
    assert decode_event(event("BOOKMARK", bookmark))["object"]["metadata"] == {
        "resourceVersion": "99"
    }


def test_other_watch_events_are_read_whole() -> None:
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    assert decode_event(event("ERROR", status)) == {"type": "ERROR", "object": status}
    odd = {"metadata": {"name": "p"}, "status": "broken"}
    assert decode_event(event("ADDED", odd)) == {"type": "ADDED", "object": odd}
    assert decode_event('{"type": "ADDED"}') == {"type": "ADDED"}  # no object: _handle says so
    with pytest.raises(ValueError):
        decode_event("{not json")


def test_owner_references_survive_the_slim_decoders(objects: ModuleType) -> None:
    """kube-scheduler spreads a ReplicaSet's or StatefulSet's pods by default, so such a pod
    has soft preferences (no sole pick): the watch's and LIST's pods must say so too, as
    the extender call's full pod does."""
    pod = objects.pod_json(1, 2, fill=0.5)
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "rs-uid"}
    ]
    full = pod_from_dict(pod)
    assert full.soft_preferences
    assert pod_from_dict(decode_event(event("ADDED", pod))["object"]) == full
    assert [pod_from_dict(p) for p in decode_page(page([pod]))["items"]] == [full]
