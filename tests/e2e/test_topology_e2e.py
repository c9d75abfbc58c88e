"""Topology-aware gang placement through a real kube-scheduler 1.20 and kube-apiserver.

Nodes carry the default topology labels (spine > block > hostname). A 16-GPU gang of two
8-GPU members must land on two nodes of one block, and a gang that asks for one block with
``muster.io/topology-required`` waits (nothing bound) while no block has room, then starts
whole once one does.
"""

from __future__ import annotations

import time
from typing import Any

from controlplane import create_gpu_node, wait_for
from harness import BindingWatch, delete_now, gpu_pod, make_namespace, wait_for_failure, wait_nodes

SPINE = "network.topology.nvidia.com/spine"
BLOCK = "network.topology.nvidia.com/block"


def member(job: str, i: int, ns: str, extra: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {"muster.io/pod-group": job, "muster.io/min-member": "2", **(extra or {})}
    return gpu_pod(f"{job}-{i}", 8, ns, "topo", labels)


def test_gangs_stay_inside_one_block_or_wait_for_one(cluster: Any) -> None:
    cp, core, muster = cluster
    ns = make_namespace(core, "topo")
    layout = {  # node: (spine, block)
        "topo-0": ("s1", "b1"),
        "topo-1": ("s1", "b2"),
        "topo-2": ("s2", "b3"),
        "topo-3": ("s2", "b3"),
    }
    for name, (spine, block) in layout.items():
        create_gpu_node(core, name, gpus=8, labels={"e2e": "topo", SPINE: spine, BLOCK: block})
    wait_nodes(muster, list(layout))
    with BindingWatch(core, ns) as seen:
        for i in range(2):
            core.create_namespaced_pod(ns, member("wide", i, ns))
        wait_for(lambda: all(f"wide-{i}" in seen.current for i in range(2)), 60, "gang wide")
        nodes = {seen.current[f"wide-{i}"][0] for i in range(2)}
        assert nodes == {"topo-2", "topo-3"}, nodes  # the only block with two free nodes

        # Blocks b1 and b2 have one free node each: 16 GPUs in total, but not in one block.
        required = {"muster.io/topology-required": "block"}
        for i in range(2):
            core.create_namespaced_pod(ns, member("strict", i, ns, required))
        # The member that completes the gang may come to filter while the planner loop is
        # mid-cycle: it is told a cycle is under way (not the outdated '1 of 2'), so its
        # message changes once the cycle is over and kube-scheduler retries it.
        message = wait_for_failure(
            core, ns, "topology: no single block", "the strict gang's reason"
        )
        assert "(gang topo/strict)" in message, message
        assert "no single block has room" in message, message
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert not any(f"strict-{i}" in seen.current for i in range(2))
            time.sleep(0.2)

        for i in range(2):
            delete_now(core, ns, f"wide-{i}")
        wait_for(
            lambda: all(f"strict-{i}" in seen.current for i in range(2)),
            60,
            "gang strict once block b3 is free",
        )
        nodes = {seen.current[f"strict-{i}"][0] for i in range(2)}
        assert nodes == {"topo-2", "topo-3"}, nodes
