"""``/explain`` on a running server (the demo cluster): the same story as the planner's."""

from __future__ import annotations

import json

from app.main import create_app
from tests.conftest import running
from tests.factories import pod_json

GANG = {"muster.io/pod-group": "llama", "muster.io/min-member": "5"}
NAMES = ["h100-0", "h100-1", "h100-2", "h100-3", "a100-0", "a100-1", "t4-0", "cpu-0", "cpu-1"]


def test_explain_a_gang_as_it_fills_and_outgrows_the_cluster() -> None:
    with running(create_app()) as client:
        first = pod_json("llama-0", gpu=8, namespace="ml", labels=GANG)
        client.post("/filter", content=json.dumps({"Pod": first, "NodeNames": NAMES}))
        body = client.get("/explain/ml/gang/llama").json()
        assert (body["state"], body["category"]) == ("waiting", "gang-incomplete")
        assert body["summary"] == "1 of 5 members exist; it starts once 4 more are created"
        assert body["gang"] == {"name": "ml/llama", "seen": 1, "needed": 5, "bound": 0}
        assert body["eta_seconds"] is None

        for i in range(1, 5):
            member = pod_json(f"llama-{i}", gpu=8, namespace="ml", labels=GANG)
            client.post("/filter", content=json.dumps({"Pod": member, "NodeNames": NAMES}))
        body = client.get("/explain/ml/llama-3").json()
        # Five 8-GPU members, four 8-GPU nodes: 40 GPUs are free in all (the T4 is tainted),
        # but never 8 together on the A100 nodes.
        assert body["subject"] == "pod ml/llama-3"
        assert body["category"] == "fragmentation", body
        assert body["summary"].startswith("40 nvidia.com/gpu free in total")
        assert body["fixes"][0] == {
            "change": "ask for 10 × 4 GPU instead of 5 × 8",
            "effect": "10 × 4 GPU fits now where 5 × 8 does not",
        }
        assert body["gpus"]["largestNode"]["wholeGpus"] == 8
        assert body["position"] == {"queue": "default", "index": 1, "of": 1}


def test_unknown_and_malformed_subjects() -> None:
    with running(create_app()) as client:
        unknown = client.get("/explain/ml/ghost")
        assert unknown.status_code == 200 and unknown.json()["state"] == "unknown"
        bad = client.get("/explain/Not_A_Namespace/x")
        assert bad.status_code == 422
        assert "namespace" in bad.text
        spec = client.get("/openapi.json").json()
        assert "/explain/{namespace}/gang/{name}" in spec["paths"]


def _template(gpu: int) -> dict[str, object]:
    requests = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": str(gpu)}
    return {"spec": {"containers": [{"name": "main", "resources": {"requests": requests}}]}}


def test_whatif_answers_and_changes_nothing() -> None:
    with running(create_app()) as client:
        job = {"name": "sweep", "namespace": "ml", "pod": _template(8), "replicas": 4}
        answer = client.post("/whatif", json=job)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["subject"], body["fits_now"], body["min_member"]) == ("gang ml/sweep", True, 4)
        assert sorted(m["node"] for m in body["placement"].values()) == [
            "h100-0", "h100-1", "h100-2", "h100-3"
        ]  # fmt: skip
        assert all(m["gpus"] == list(range(8)) for m in body["placement"].values())
        assert client.get("/debug/pods").json()["pods"] == []  # nothing was submitted

        too_big = client.post("/whatif", json={**job, "replicas": 6}).json()
        assert too_big["fits_now"] is False and too_big["victims"] == []
        assert too_big["explanation"]["category"] == "capacity"


def test_whatif_refuses_bad_bodies_naming_the_field() -> None:
    with running(create_app()) as client:
        for body, status, field in [
            (b"not json", 400, ""),
            (b'{"pod": {}, "replicas": 0}', 422, "replicas"),
            (b'{"pod": {"spec": {"containers": 3}}}', 422, "pod.spec.containers"),
            (b'{"workload": {"apiVersion": "v1", "kind": "Pod"}}', 422, "workload.kind"),
            (b'{"pod": {}, "workload": {}}', 422, "workload.kind"),
            (b'{"pod": {}, "workload": {"apiVersion": "batch/v1", "kind": "Job", "metadata": '
             b'{"name": "j"}, "spec": {}}}', 422, "pod"),
            (b'{"workload": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, '
             b'"spec": {"parallelism": 0}}}', 422, "workload.Job.spec.parallelism"),
            (b'{"pod": {}, "topology": {}}', 422, "topology"),
            (b'{"pod": {}, "": 1}', 422, '[""]'),  # an empty key is still named
        ]:
            answer = client.post("/whatif", content=body)
            assert answer.status_code == status, (body, answer.text)
            assert answer.json()["field"] == field, (body, answer.text)
        spec = client.get("/openapi.json").json()
        schema = spec["paths"]["/whatif"]["post"]["requestBody"]["content"]["application/json"]
        assert "$ref" not in str(schema) and "replicas" in schema["schema"]["properties"]
