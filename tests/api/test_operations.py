"""Health, readiness, debug views, metrics and OpenAPI on a running server."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from app.core.model.groupobjects import volcano_podgroup
from app.core.state.bindadmission import BindAdmission
from app.core.state.cache import ClusterCache
from app.core.state.gateway import InMemoryGateway
from app.main import create_app
from app.services import Services
from app.settings import Settings
from app.wiring import build_graph
from tests.conftest import running
from tests.factories import pod_json


def test_health_ready_debug_and_metrics() -> None:
    with running(create_app()) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz")
        assert ready.status_code == 200 and "demo cluster" in ready.json()["mode"]
        pod = pod_json("trainer", gpu=4)
        body = json.dumps({"Pod": pod, "NodeNames": ["h100-0", "a100-0", "cpu-0"]})
        answer = client.post("/filter", content=body).json()
        # Both GPU nodes fit; the pod states no soft preference, so Muster's pick answers alone
        # (the other fitting node is passed over: counted, not named).
        assert answer["NodeNames"] == ["h100-0"] and answer["FailedNodes"] == {}
        feasible = ["h100-0", "a100-0"]
        scores = client.post(
            "/prioritize", content=json.dumps({"Pod": pod, "NodeNames": feasible})
        ).json()
        # The default policy gives 10 to exactly one node (its pick) and less to the rest.
        assert sorted(e["Score"] for e in scores)[-2:][1] == 10
        assert sorted(e["Score"] for e in scores)[0] < 10
        bind = {
            "PodName": "trainer",
            "PodNamespace": "default",
            "PodUID": pod["metadata"]["uid"],
            "Node": "a100-0",  # any feasible node binds
        }
        assert client.post("/bind", content=json.dumps(bind)).json() == {"Error": ""}

        nodes = {n["name"]: n for n in client.get("/debug/nodes").json()["nodes"]}
        gpus = nodes["a100-0"]["gpus"]
        assert {k: gpus[k] for k in ("total", "used", "free")} == {
            "total": 4.0,
            "used": 4.0,
            "free": 0.0,
        }
        assert gpus["devices"] == [
            {"index": d, "free": 0.0, "pods": ["default/trainer"]} for d in range(4)
        ]
        assert gpus["topology"]["devices"] == 4
        assert nodes["a100-0"]["free"]["nvidia.com/gpu"] == "0" and nodes["a100-0"]["pods"] == 1
        pods = client.get("/debug/pods").json()["pods"]
        assert [(p["name"], p["node"], p["state"]) for p in pods] == [
            ("trainer", "a100-0", "bound")
        ]

        text = client.get("/metrics").text
        families = {f.name: f for f in text_string_to_metric_families(text)}
        requests = {
            (s.labels["verb"], s.labels["code"]): s.value
            for s in families["muster_extender_requests"].samples
            if s.name.endswith("_total")
        }
        assert requests == {("filter", "200"): 1, ("prioritize", "200"): 1, ("bind", "200"): 1}
        latency = [
            s
            for s in families["muster_extender_request_duration_seconds"].samples
            if s.name.endswith("_count")
        ]
        assert {s.labels["verb"]: s.value for s in latency} == {
            "filter": 1,
            "prioritize": 1,
            "bind": 1,
        }
        feasible_count = [
            s.value
            for s in families["muster_filter_nodes"].samples
            if s.labels.get("result") == "feasible"
        ]
        assert feasible_count == [1]
        passed_over = [
            s.value
            for s in families["muster_filter_nodes"].samples
            if s.labels.get("result") == "passed_over"
        ]
        assert passed_over == [1]
        devices = {s.labels["state"]: s.value for s in families["muster_gpu_devices"].samples}
        assert devices == {"idle": 37, "shared": 0, "full": 4}  # demo: 41 GPUs, 4 taken

        share = pod_json("notebook", annotations={"muster.io/gpu-fraction": "0.25"})
        client.post("/filter", content=json.dumps({"Pod": share, "NodeNames": ["a100-1"]}))
        bind = {"PodName": "notebook", "PodNamespace": "default",
                "PodUID": share["metadata"]["uid"], "Node": "a100-1"}  # fmt: skip
        assert client.post("/bind", content=json.dumps(bind)).json() == {"Error": ""}
        families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
        devices = {s.labels["state"]: s.value for s in families["muster_gpu_devices"].samples}
        assert devices == {"idle": 36, "shared": 1, "full": 4}
        (free,) = families["muster_gpu_free_on_shared_devices"].samples
        assert free.value == 0.75
        assert client.get("/docs").status_code == 200
        paths = client.get("/openapi.json").json()["paths"]
        assert {"/filter", "/prioritize", "/preempt", "/bind", "/debug/nodes"} <= set(paths)
        assert "Pod" in json.dumps(paths["/filter"]["post"]["requestBody"])


def test_bad_request_is_counted_with_its_code() -> None:
    with running(create_app()) as client:
        client.post("/filter", content="{")
        text = client.get("/metrics").text
    assert 'muster_extender_requests_total{code="400",verb="filter"} 1.0' in text


def test_readyz_is_503_until_synced() -> None:
    cache = ClusterCache()
    gateway = InMemoryGateway(cache)
    extender = build_graph(Settings(), cache, gateway).extender
    services = Services(Settings(), cache, gateway, extender)
    with running(create_app(services=services)) as client:
        assert client.get("/readyz").status_code == 503
        cache.mark_synced()
        assert client.get("/readyz").status_code == 200


def test_each_app_has_its_own_state() -> None:
    first, second = create_app(), create_app()
    assert first.state.muster.cache is not second.state.muster.cache
    assert first.state.metrics.registry is not second.state.metrics.registry


def test_debug_groups_lists_the_group_objects() -> None:
    app = create_app()
    cache = app.state.muster.cache
    (vc,) = volcano_podgroup(
        {"metadata": {"name": "train", "namespace": "team-a"},
         "spec": {"minMember": 4, "queue": "research", "minResources": {"nvidia.com/gpu": "4"}}},
        "scheduling.volcano.sh/v1beta1",
    )  # fmt: skip
    cache.upsert_groups([vc])
    with running(app) as client:
        body = client.get("/debug/groups").json()
    assert body["count"] == 1
    (row,) = body["groups"]
    assert row["object"] == "PodGroup.scheduling.volcano.sh team-a/train"
    assert (row["source"], row["minMember"], row["queue"]) == ("volcano", 4, "research")
    assert row["minResources"]["nvidia.com/gpu"] == "4" and row["problem"] == ""


def test_debug_binds_says_whether_gangs_bind_after_dry_runs() -> None:
    """Standalone: no API server, no dry runs. With a ``BindAdmission`` (cluster mode), what
    it knows: dry runs until the configurations are listed, then only while one sees Bindings."""
    with running(create_app()) as client:
        assert client.get("/debug/binds").json() == {
            "mode": None, "known": True, "seeBindings": [], "dryRun": False,
        }  # fmt: skip
        assert "muster_bind_dry_run 0.0" in client.get("/metrics").text
    cache = ClusterCache()
    gateway = InMemoryGateway(cache)
    admission = BindAdmission()
    extender = build_graph(Settings(), cache, gateway, bind_admission=admission).extender
    services = Services(Settings(), cache, gateway, extender, bind_admission=admission)
    with running(create_app(services=services)) as client:
        assert client.get("/debug/binds").json()["dryRun"] is True  # nothing listed yet
        admission.replace("validating-webhooks", {"guard": ("guard/binds.example.com",)})
        admission.mark_known()
        assert client.get("/debug/binds").json() == {
            "mode": "auto", "known": True, "seeBindings": ["guard/binds.example.com"],
            "dryRun": True,
        }  # fmt: skip
        assert "muster_bind_dry_run 1.0" in client.get("/metrics").text
        admission.delete("validating-webhooks", "guard")
        assert client.get("/debug/binds").json()["dryRun"] is False
        assert "muster_bind_dry_run 0.0" in client.get("/metrics").text
