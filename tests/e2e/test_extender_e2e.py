"""Muster as the extender of a real kube-scheduler 1.20, in cluster mode on a real API server.

etcd + kube-apiserver + kube-scheduler run on loopback (``controlplane.py``); Muster watches the
API server and serves the scheduler's filter / prioritize / preempt / bind calls. Nodes are API
objects with GPU capacity (no kubelet: bound pods stay Pending with ``spec.nodeName`` set).
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import kubernetes.client
import pytest
from controlplane import GPU_RESOURCE, ControlPlane, create_gpu_node, wait_for
from kubernetes import watch

from app.main import create_app
from app.settings import Settings
from tests.conftest import running

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.environ.get("MUSTER_SKIP_E2E") == "1", reason="MUSTER_SKIP_E2E=1"),
]

GPUS_PER_NODE = 8
#: kube-scheduler 1.20 reads v1beta1; the shipped files (scheduler-config/) are v1 for current
#: clusters and otherwise the same extender settings.
SCHEDULER_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1beta1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: "{kubeconfig}"
leaderElection:
  leaderElect: false
healthzBindAddress: "{healthz}"
metricsBindAddress: "{metrics}"
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 2
profiles:
  - schedulerName: muster
extenders:
  - urlPrefix: "MUSTER_URL"
    filterVerb: filter
    prioritizeVerb: prioritize
    preemptVerb: preempt
    bindVerb: bind
    weight: 5
    enableHTTPS: false
    nodeCacheCapable: true
    httpTimeout: 5s
    ignorable: false
    managedResources:
      - name: nvidia.com/gpu
        ignoredByScheduler: true
"""


class BindingWatch:
    """Records every pod's node as the API server reports it, from a watch in a thread."""

    def __init__(self, core: kubernetes.client.CoreV1Api, namespace: str) -> None:
        self.placements: dict[str, tuple[str, int]] = {}
        self.max_gpus: Counter[str] = Counter()
        self._core, self._namespace = core, namespace
        self._watch = watch.Watch()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stopped = False
        self.error: Exception | None = None

    def _run(self) -> None:
        # A short read timeout bounds how long stop() waits; each new watch starts with a full
        # list of ADDED events, which the idempotent bookkeeping absorbs.
        while not self._stopped:
            try:
                for event in self._watch.stream(
                    self._core.list_namespaced_pod, self._namespace, _request_timeout=(5, 3)
                ):
                    self._record(event)
            except Exception as exc:
                if "timed out" not in str(exc).lower() and not self._stopped:
                    self.error = exc
                    return

    def _record(self, event: dict[str, Any]) -> None:
        pod = event["object"]
        if event["type"] == "DELETED" or not pod.spec.node_name:
            return
        gpus = int((pod.spec.containers[0].resources.requests or {}).get(GPU_RESOURCE, "0"))
        with self._lock:
            self.placements[pod.metadata.name] = (pod.spec.node_name, gpus)
            used = Counter[str]()
            for node, n in self.placements.values():
                used[node] += n
            for node, n in used.items():
                self.max_gpus[node] = max(self.max_gpus[node], n)

    def __enter__(self) -> BindingWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stopped = True
        self._watch.stop()
        self._thread.join(timeout=30)
        assert self.error is None, f"binding watch failed: {self.error}"


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[ControlPlane, kubernetes.client.CoreV1Api, httpx.Client]]:
    cp = ControlPlane()
    try:
        cp.start()
        api = cp.api_client()
        core = kubernetes.client.CoreV1Api(api)
        app = create_app(Settings(mode="cluster"), api_client=cp.api_client())
        with running(app) as muster:
            wait_for(lambda: muster.get("/readyz").status_code == 200, 30, "Muster to sync")
            cp.start_scheduler(SCHEDULER_CONFIG.replace("MUSTER_URL", str(muster.base_url) + "/"))
            yield cp, core, muster
        api.close()
    finally:
        cp.stop()


def gpu_pod(name: str, gpus: int, namespace: str, group: str = "") -> dict[str, Any]:
    """A pod for Muster's profile; ``group`` confines it to nodes labelled ``e2e=<group>``."""
    requests = {"cpu": "10m", GPU_RESOURCE: str(gpus)}
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": "muster",
            "nodeSelector": {"e2e": group} if group else {},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": requests, "limits": {GPU_RESOURCE: str(gpus)}},
                }
            ],
        },
    }


def make_namespace(core: kubernetes.client.CoreV1Api, name: str) -> str:
    core.create_namespace({"metadata": {"name": name}})
    return name


def node_names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(count)]


def wait_nodes(muster: httpx.Client, names: list[str]) -> None:
    """Wait until Muster's watch has delivered these nodes to its cache."""

    def known() -> bool:
        return set(names) <= {n["name"] for n in muster.get("/debug/nodes").json()["nodes"]}

    wait_for(known, 30, f"Muster to see nodes {names}")


def binds_by_muster(muster: httpx.Client) -> float:
    text = muster.get("/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('muster_binds_total{result="Bound"}')
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

    def reason() -> str | None:
        events = core.list_namespaced_event(ns).items
        texts = [e.message for e in events if e.reason == "FailedScheduling" and e.message]
        return next((t for t in texts if "nvidia.com/gpu" in t), None)

    message = wait_for(reason, 60, "a FailedScheduling event naming GPUs")
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
