"""GPU shares and device ids through a real kube-scheduler 1.20 and kube-apiserver.

Pods ask for a share of one GPU with ``muster.io/gpu-fraction`` and no ``nvidia.com/gpu``
request (kube-scheduler sees nothing to count); Muster accounts per device, writes the chosen
indices with the Binding (``muster.io/gpu-ids``, copied onto the pod by the API server), and a
restarted Muster rebuilds the same per-device books from the API alone.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from controlplane import create_gpu_node, wait_for
from harness import make_namespace, node_names, wait_for_failure, wait_nodes

from app.main import create_app
from app.settings import Settings
from tests.conftest import running


def share_pod(name: str, fraction: str, namespace: str, group: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"muster.io/gpu-fraction": fraction},
        },
        "spec": {
            "schedulerName": "muster",
            "nodeSelector": {"e2e": group},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.9",
                    # What Muster's webhook adds to GPU-share pods (the webhook itself is
                    # tested in test_webhook_e2e): routes the pod to Muster.
                    "resources": {
                        "requests": {"cpu": "10m", "muster.io/gpu-share": "1"},
                        "limits": {"muster.io/gpu-share": "1"},
                    },
                }
            ],
        },
    }


def devices_by_node(muster: Any, nodes: list[str]) -> dict[str, list[float]]:
    return {
        n["name"]: [d["free"] for d in n["gpus"]["devices"]]
        for n in muster.get("/debug/nodes").json()["nodes"]
        if n["name"] in nodes
    }


def test_gpu_shares_never_exceed_a_device_and_survive_a_restart(cluster: Any) -> None:
    cp, core, muster = cluster
    ns = make_namespace(core, "share")
    nodes = node_names("share", 2)
    for name in nodes:
        create_gpu_node(core, name, gpus=2, labels={"e2e": "share"})
    wait_nodes(muster, nodes)
    # One 0.6 share per device: 4 fit. The other 2 must wait although each node still has
    # 0.8 GPU free in total (0.4 on each device).
    names = [f"s-{i}" for i in range(6)]
    for name in names:
        core.create_namespaced_pod(ns, share_pod(name, "0.6", ns, "share"))

    def bound() -> list[Any] | None:
        pods = [p for p in core.list_namespaced_pod(ns).items if p.spec.node_name]
        return pods if len(pods) == 4 else None

    pods = wait_for(bound, 90, "4 shares to be bound")
    load: Counter[tuple[str, int]] = Counter()
    for p in pods:
        ids = p.metadata.annotations.get("muster.io/gpu-ids")
        assert ids is not None and ids.isdigit(), (p.metadata.name, p.metadata.annotations)
        load[(p.spec.node_name, int(ids))] += 6
    assert set(load.values()) == {6}, load  # every device 0.6 full, none over 1.0
    assert len(load) == 4
    message = wait_for_failure(
        core, ns, "of one nvidia.com/gpu", "a FailedScheduling event about shares"
    )
    assert "needs 0.6 of one nvidia.com/gpu, at most 0.4 free on one GPU" in message
    pending = [p for p in core.list_namespaced_pod(ns).items if not p.spec.node_name]
    assert len(pending) == 2

    # A second Muster started from the API alone holds exactly the same per-device books.
    before = devices_by_node(muster, nodes)
    assert all(abs(f - 0.4) < 1e-9 for frees in before.values() for f in frees), before
    with running(create_app(Settings(mode="cluster"), api_client=cp.api_client())) as fresh:
        wait_for(lambda: fresh.get("/readyz").status_code == 200, 30, "the fresh Muster to sync")
        assert devices_by_node(fresh, nodes) == before
        holders = {
            (n["name"], d["index"]): sorted(d["pods"])
            for n in fresh.get("/debug/nodes").json()["nodes"]
            if n["name"] in nodes
            for d in n["gpus"]["devices"]
        }
        again = {
            (n["name"], d["index"]): sorted(d["pods"])
            for n in muster.get("/debug/nodes").json()["nodes"]
            if n["name"] in nodes
            for d in n["gpus"]["devices"]
        }
        assert holders == again
