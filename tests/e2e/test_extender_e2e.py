"""Muster as the extender of a real kube-scheduler 1.20, in cluster mode on a real API server.

etcd + kube-apiserver + kube-scheduler run on loopback (``controlplane.py``); Muster watches the
API server and serves the scheduler's filter / prioritize / preempt / bind calls. Nodes are API
objects with GPU capacity (no kubelet: bound pods stay Pending with ``spec.nodeName`` set).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from controlplane import create_gpu_node, wait_for
from harness import (
    GPUS_PER_NODE,
    BindingWatch,
    binds_by_muster,
    delete_now,
    gpu_pod,
    make_namespace,
    node_names,
    wait_for_failure,
    wait_nodes,
)


def test_gpu_pods_are_bound_by_muster_where_gpus_are_free(cluster: Any) -> None:
    cp, core, muster = cluster
    ns = make_namespace(core, "fit")
    nodes = node_names("fit", 2)
    for name in nodes:
        create_gpu_node(core, name, gpus=GPUS_PER_NODE, labels={"e2e": "fit"})
    wait_nodes(muster, nodes)
    before = binds_by_muster(muster)
    sizes = {"a": 4, "b": 4, "c": 4, "d": 2}  # 14 of 16 GPUs: fits in any arrival order
    for name, gpus in sizes.items():
        core.create_namespaced_pod(ns, gpu_pod(name, gpus, ns, "fit"))

    def placed() -> dict[str, str] | None:
        pods = core.list_namespaced_pod(ns).items
        got = {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name}
        return got if len(got) == len(sizes) else None

    placement = wait_for(placed, 60, "4 GPU pods to be bound")
    used = Counter[str]()
    for name, node in placement.items():
        used[node] += sizes[name]
    assert set(used) <= set(nodes)
    assert all(n <= GPUS_PER_NODE for n in used.values()), used
    assert binds_by_muster(muster) - before == len(sizes)  # Muster made every Binding


def test_pod_too_big_for_any_node_waits_with_musters_reason(cluster: Any) -> None:
    cp, core, muster = cluster
    ns = make_namespace(core, "toobig")
    core.create_namespaced_pod(ns, gpu_pod("huge", 16, ns))
    message = wait_for_failure(core, ns, "nvidia.com/gpu", "a FailedScheduling event naming GPUs")
    assert "needs 16 nvidia.com/gpu, node has 8" in message
    assert core.read_namespaced_pod("huge", ns).spec.node_name is None


def test_burst_of_200_pods_never_overcommits(cluster: Any) -> None:
    """200 pods asking for 1-2 GPUs (~300 GPUs) race for 10 nodes x 8 GPUs."""
    cp, core, muster = cluster
    ns = make_namespace(core, "burst")
    nodes = node_names("burst", 10)
    for name in nodes:
        create_gpu_node(core, name, gpus=GPUS_PER_NODE, labels={"e2e": "burst"})
    wait_nodes(muster, nodes)
    sizes = {f"w-{i}": 1 + i % 2 for i in range(200)}
    with BindingWatch(core, ns) as seen:
        for name, gpus in sizes.items():
            core.create_namespaced_pod(ns, gpu_pod(name, gpus, ns, "burst"))

        def settled() -> bool:
            free = [
                n["gpus"]["free"]
                for n in muster.get("/debug/nodes").json()["nodes"]
                if n["name"] in nodes
            ]
            return sum(free) == 0

        wait_for(settled, 120, "the burst to fill every GPU")
        wait_for(
            lambda: sum(g for _, g in seen.placements.values()) >= 80,
            30,
            "the watch to see 80 GPUs",
        )
    assert max(seen.max_gpus.values()) <= GPUS_PER_NODE, seen.max_gpus
    assert set(seen.max_gpus) <= set(nodes)
    assert sum(g for _, g in seen.placements.values()) == 10 * GPUS_PER_NODE
    pending = [p for p in core.list_namespaced_pod(ns).items if not p.spec.node_name]
    assert len(pending) == len(sizes) - len(seen.placements)


def test_a_stale_copy_of_a_deleted_pod_is_not_learned(cluster: Any) -> None:
    """kube-scheduler 1.20 can keep a bound copy of a pod in its queue (put back as its
    informer had it when Muster bound the pod during an attempt) and send it to filter after
    the pod is deleted. The call goes to the real extender with the pod as the API server last
    served it: Muster answers no node, and the node's GPUs stay free for the next pod."""
    cp, core, muster = cluster
    ns = make_namespace(core, "stale")
    (node,) = node_names("stale", 1)
    create_gpu_node(core, node, gpus=GPUS_PER_NODE, labels={"e2e": "stale"})
    wait_nodes(muster, [node])
    core.create_namespaced_pod(ns, gpu_pod("first", GPUS_PER_NODE, ns, "stale"))

    def bound(name: str) -> dict[str, Any] | None:
        raw = core.read_namespaced_pod(name, ns, _preload_content=False).data
        obj: dict[str, Any] = json.loads(raw)
        return obj if obj["spec"].get("nodeName") else None

    copy = wait_for(lambda: bound("first"), 60, "the first pod to be bound")
    delete_now(core, ns, "first")

    def muster_has(uid: str) -> bool:
        return any(p["uid"] == uid for p in muster.get("/debug/pods").json()["pods"])

    uid = copy["metadata"]["uid"]
    wait_for(lambda: not muster_has(uid), 30, "Muster to see the deletion")
    answer = muster.post("/filter", json={"Pod": copy, "NodeNames": [node]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert not body["NodeNames"]
    told = {**(body.get("FailedNodes") or {}), **(body.get("FailedAndUnresolvableNodes") or {})}
    assert (
        f"pod {ns}/first is no pending pod Muster knows (deleted, or bound to {node})"
        in (told[node])
    )
    assert not muster_has(uid)
    (row,) = (n for n in muster.get("/debug/nodes").json()["nodes"] if n["name"] == node)
    assert row["gpus"]["free"] == GPUS_PER_NODE
    core.create_namespaced_pod(ns, gpu_pod("second", GPUS_PER_NODE, ns, "stale"))
    assert (
        wait_for(lambda: bound("second"), 60, "the second pod to be bound")["spec"]["nodeName"]
        == node
    )
