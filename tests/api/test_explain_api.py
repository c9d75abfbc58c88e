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
