"""Measure Muster's memory (RSS) with a large cluster in its cache.

Usage::

    .venv/bin/python scripts/bench_memory.py                      # 5 000 nodes, 50 000 pods
    .venv/bin/python scripts/bench_memory.py --nodes 500 --pods 5000

Each measurement runs in a fresh Python process (so nothing of this script's own work is
counted). The child:

1. builds an idle server — ``create_app`` on the built-in demo cluster (a handful of nodes),
   every route and module loaded — and reads its RSS: the **baseline**;
2. fills the server's own ``ClusterCache`` through the code the watch uses in cluster mode:
   ``app.k8s.sync.ClusterSync`` listing from an in-memory API that serves the objects as the
   API server does (JSON pages of 500 with ``continue`` tokens, objects shaped like real
   kubelet-reported nodes and Job-created pods, managedFields included). The pages are made
   on demand, so only what Muster keeps stays in memory;
3. reads RSS again after a ``gc.collect()`` (the **loaded** figure) and the peak (VmHWM).

Prints the figures and the target (RSS <= 300 MB loaded); it is not a pass/fail test.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TARGET_MB = 300.0
PAGE = 500
GPUS_PER_NODE = 8
PRODUCTS = ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S")
STAMP = "2026-11-25T06:00:00Z"


def rss_mb(field: str = "VmRSS") -> float:
    """This process's resident set (or ``VmHWM``, its peak) in MB, from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


# -- objects shaped like the API server's ----------------------------------------------------


def node_json(i: int) -> dict[str, Any]:
    """A GPU node as a kubelet + GPU Feature Discovery report it (trimmed managedFields)."""
    name = f"gpu-node-{i:05d}"
    product = PRODUCTS[i % len(PRODUCTS)]
    resources = {
        "cpu": "96",
        "memory": "1056587508Ki",
        "pods": "110",
        "ephemeral-storage": "3750157720Ki",
        "nvidia.com/gpu": str(GPUS_PER_NODE),
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "topology.kubernetes.io/region": "us-east-1",
        "topology.kubernetes.io/zone": f"us-east-1{'abc'[i % 3]}",
        "network.topology.nvidia.com/spine": f"spine-{i // 256}",
        "network.topology.nvidia.com/block": f"block-{i // 32}",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(GPUS_PER_NODE),
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/gpu.clique": f"clique-{i // 18}",
    }
    conditions = [
        {"type": t, "status": s, "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP,
         "reason": r, "message": m}
        for t, s, r, m in (
            ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has enough memory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has enough PID"),
            ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        )
    ]  # fmt: skip
    return {
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-4000-8000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "creationTimestamp": STAMP,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "managedFields": [
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": STAMP,
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:capacity": {}}}},
            ],
        },
        "spec": {"podCIDR": f"10.{i // 256}.{i % 256}.0/24", "providerID": f"aws:///i-{i:017x}"},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 256}.{i % 256}"},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.33.4", "containerRuntimeVersion": "containerd://1.7.27",
                         "kernelVersion": "6.8.0-1021-aws", "osImage": "Ubuntu 24.04.1 LTS",
                         "operatingSystem": "linux", "architecture": "amd64",
                         "machineID": f"{i:032x}", "systemUUID": f"ec2{i:029x}",
                         "bootID": f"b{i:031x}", "kubeProxyVersion": "v1.33.4"},
            "images": [{"names": [f"nvcr.io/nvidia/pytorch:24.{k:02d}-py3"],
                        "sizeBytes": 9_000_000_000} for k in range(1, 4)],
        },
    }  # fmt: skip


def pod_json(i: int, nodes: int, fill: float = 1.0) -> dict[str, Any]:
    """Member ``i % 8`` of Job-created gang ``i // 8`` (8 pods of 1 GPU each). Gang ``j`` runs
    on node ``j`` while ``j < fill * nodes`` (every node full at ``fill=1``); later gangs wait."""
    job = f"train-{i // 8:05d}"
    ns = f"team-{(i // 8) % 20:02d}"
    name = f"{job}-{i % 8}-x{i:06x}"
    bound = i // 8 < int(fill * nodes)
    labels = {
        "batch.kubernetes.io/controller-uid": f"c0ffee00-0000-4000-8000-{i // 8:012d}",
        "batch.kubernetes.io/job-name": job,
        "controller-uid": f"c0ffee00-0000-4000-8000-{i // 8:012d}",
        "job-name": job,
        "batch.kubernetes.io/job-completion-index": str(i % 8),
        "muster.io/pod-group": job,
        "muster.io/queue": ns,
    }
    annotations = {
        "muster.io/min-member": "8",
        "batch.kubernetes.io/job-completion-index": str(i % 8),
    }
    requests = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}
    spec: dict[str, Any] = {
        "schedulerName": "muster",
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "priority": 0,
        "enableServiceLinks": True,
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ],
        "containers": [
            {
                "name": "trainer",
                "image": "nvcr.io/nvidia/pytorch:24.03-py3",
                "command": ["torchrun", "--nproc-per-node=1", "train.py"],
                "env": [{"name": "MASTER_ADDR", "value": f"{job}-0"},
                        {"name": "WORLD_SIZE", "value": "8"}],
                "resources": {"requests": requests, "limits": {"nvidia.com/gpu": "1"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
    }  # fmt: skip
    if bound:
        spec["nodeName"] = f"gpu-node-{i // 8:05d}"
    status: dict[str, Any] = {"phase": "Running" if bound else "Pending", "qosClass": "Burstable"}
    if bound:
        status["startTime"] = STAMP
        status["conditions"] = [
            {"type": t, "status": "True", "lastTransitionTime": STAMP}
            for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ]
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"0000beef-0000-4000-8000-{i:012d}",
            "resourceVersion": str(100_000 + i),
            "creationTimestamp": STAMP,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": job, "controller": True,
                 "blockOwnerDeletion": True, "uid": labels["controller-uid"]},
            ],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                 "time": STAMP, "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": {"f:containers": {}}}},
            ],
        },
        "spec": spec,
        "status": status,
    }  # fmt: skip


# -- an in-memory API serving pages ----------------------------------------------------------


class _Body:
    """A response with ``_preload_content=False``: ``data`` and ``release_conn``."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def release_conn(self) -> None:
        pass


class _IdleWatch:
    """A watch stream that stays open, with no events, until ``done`` is set."""

    def __init__(self, done: threading.Event) -> None:
        self._done = done

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        self._done.wait()
        return iter(())

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class PagedApi:
    """``list_node`` / ``list_pod_for_all_namespaces`` as a ``CoreV1Api`` answers them with
    ``_preload_content=False``: JSON pages of ``limit`` objects, made when asked for."""

    def __init__(self, nodes: int, pods: int, done: threading.Event, fill: float = 1.0) -> None:
        self.nodes, self.pods, self.done, self.fill = nodes, pods, done, fill

    def _page(self, count: int, make: Any, kwargs: dict[str, Any]) -> Any:
        if kwargs.get("watch"):
            return _IdleWatch(self.done)
        start = int(kwargs.get("_continue") or 0)
        stop = min(count, start + int(kwargs.get("limit") or count))
        meta: dict[str, Any] = {"resourceVersion": "999999"}
        if stop < count:
            meta["continue"] = str(stop)
        items = [make(i) for i in range(start, stop)]
        return _Body(json.dumps({"kind": "List", "metadata": meta, "items": items}).encode())

    def list_node(self, **kwargs: Any) -> Any:
        return self._page(self.nodes, node_json, kwargs)

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> Any:
        return self._page(self.pods, lambda i: pod_json(i, self.nodes, self.fill), kwargs)


# -- the measuring child ----------------------------------------------------------------------


def measure(nodes: int, pods: int) -> dict[str, float]:
    """Run in a fresh process: baseline RSS, load through ClusterSync, loaded RSS and peak."""
    from app.k8s.sync import ClusterSync
    from app.main import create_app
    from app.settings import Settings

    app = create_app(Settings(demo=True))
    cache = app.state.muster.cache
    gc.collect()
    baseline = rss_mb()
    done = threading.Event()
    sync = ClusterSync(cache, PagedApi(nodes, pods, done))  # type: ignore[arg-type]
    started = time.perf_counter()
    sync.start()
    try:
        if not sync.wait_synced(600):
            raise RuntimeError(f"the cache did not sync: {sync.stats()}")
        took = time.perf_counter() - started
    finally:
        done.set()
        sync.stop()
    snapshot = cache.snapshot()
    if len(snapshot.pods) != pods or len(cache.view().nodes) != nodes:
        held = f"{len(snapshot.pods)} pods, {len(cache.view().nodes)} nodes"
        raise RuntimeError(f"the cache holds {held}")
    gc.collect()
    return {
        "baseline_mb": baseline,
        "loaded_mb": rss_mb(),
        "peak_mb": rss_mb("VmHWM"),
        "load_s": took,
        "nodes": nodes,
        "pods": pods,
    }


def run(nodes: int, pods: int) -> dict[str, float]:
    """Measure in a fresh child process; print and return the figures."""
    proc = subprocess.run(
        [sys.executable, __file__, "--child", "--nodes", str(nodes), "--pods", str(pods)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"measuring child failed:\n{proc.stderr[-3000:]}")
    figures: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    held = figures["loaded_mb"] - figures["baseline_mb"]
    print(f"Muster memory with {nodes} nodes and {pods} pods in the cache (fresh process)")
    print(f"  baseline RSS, idle server         {figures['baseline_mb']:8.1f} MB")
    print(f"  RSS with the cluster cached       {figures['loaded_mb']:8.1f} MB"
          f"   (target <= {TARGET_MB:.0f} MB)")  # fmt: skip
    print(f"  held by the cache                 {held:8.1f} MB"
          f"   ({held * 1024 * 1024 / max(1, pods + nodes):.0f} bytes per object)")  # fmt: skip
    print(f"  peak RSS while listing            {figures['peak_mb']:8.1f} MB")
    print(f"  list + convert + apply            {figures['load_s']:8.2f} s")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.nodes, args.pods)))
    else:
        run(args.nodes, args.pods)


if __name__ == "__main__":
    main()
