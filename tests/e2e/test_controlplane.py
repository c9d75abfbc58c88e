"""Smoke test: the real kube-scheduler 1.20 schedules GPU pods onto API-only nodes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import kubernetes.client
import pytest
from controlplane import (
    DEFAULT_SCHEDULER_CONFIG,
    GPU_RESOURCE,
    ControlPlane,
    create_gpu_node,
    wait_for,
)

NAMESPACE = "default"
GPUS_PER_NODE = 8
SCHEDULE_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def control_plane() -> Iterator[ControlPlane]:
    cp = ControlPlane()
    try:
        cp.start()
        cp.start_scheduler(DEFAULT_SCHEDULER_CONFIG)
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def core_v1(control_plane: ControlPlane) -> Iterator[kubernetes.client.CoreV1Api]:
    with control_plane.api_client() as api:
        yield kubernetes.client.CoreV1Api(api)


def gpu_pod(name: str, gpus: int) -> dict[str, object]:
    resources = {"cpu": "100m", GPU_RESOURCE: str(gpus)}
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": resources, "limits": {GPU_RESOURCE: str(gpus)}},
                }
            ]
        },
    }


def test_default_scheduler_binds_gpu_pods(
    control_plane: ControlPlane, core_v1: kubernetes.client.CoreV1Api
) -> None:
    for i in range(2):
        create_gpu_node(core_v1, f"gpu-node-{i}", gpus=GPUS_PER_NODE)
    names = [f"train-{i}" for i in range(3)]
    for name in names:
        core_v1.create_namespaced_pod(NAMESPACE, gpu_pod(name, gpus=4))

    def all_bound() -> dict[str, str] | None:
        pods = {n: core_v1.read_namespaced_pod(n, NAMESPACE) for n in names}
        placed = {n: p.spec.node_name for n, p in pods.items()}
        return placed if all(placed.values()) else None

    placement = wait_for(all_bound, SCHEDULE_TIMEOUT, "3 pods to be bound")
    gpus_per_node = Counter[str]()
    for node in placement.values():
        gpus_per_node[node] += 4
    assert set(gpus_per_node) <= {"gpu-node-0", "gpu-node-1"}
    assert max(gpus_per_node.values()) <= GPUS_PER_NODE, gpus_per_node

    core_v1.create_namespaced_pod(NAMESPACE, gpu_pod("too-big", gpus=16))

    def failed_scheduling() -> str | None:
        events = core_v1.list_namespaced_event(
            NAMESPACE, field_selector="involvedObject.name=too-big"
        ).items
        return next((e.message for e in events if e.reason == "FailedScheduling"), None)

    message = wait_for(failed_scheduling, SCHEDULE_TIMEOUT, "FailedScheduling for too-big")
    assert GPU_RESOURCE in message, message
    assert core_v1.read_namespaced_pod("too-big", NAMESPACE).spec.node_name is None
    assert "too-big" in control_plane.scheduler_log()
