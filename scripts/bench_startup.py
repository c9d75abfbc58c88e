"""How fast a fresh Muster replica is ready against a real API server holding a big cluster.

Usage::

    .venv/bin/python scripts/bench_startup.py                     # 1 000 nodes, 10 000 pods
    .venv/bin/python scripts/bench_startup.py --nodes 100 --pods 1000 --runs 3

Starts the e2e control plane (etcd + kube-apiserver 1.20 on loopback, ``tests/e2e/controlplane.py``;
binaries from ``scripts/provision-k8s.sh``), then times ``muster serve --kubeconfig ...`` as a
subprocess from its start until ``GET /readyz`` answers 200 (initial LIST of nodes, pods and
group objects done, cache synced): first against the empty API server (the **baseline**: Python
start-up, imports, discovery), then after creating ``--nodes`` GPU nodes and ``--pods`` gang
pods (``bench_memory``'s objects: kubelet-shaped nodes with status, Job-shaped pods, most
bound) with a pool of threads. Prints every run, the median, the median CPU seconds the
server used until ready (a figure a busy machine distorts far less than wall time), and the
target (ready <= 5 s); it is not a pass/fail test.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "scripts", ROOT / "tests" / "e2e"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import bench_memory  # noqa: E402
import benchproc  # noqa: E402
from controlplane import ControlPlane, free_ports  # noqa: E402

TARGET_S = 5.0
FILL = 0.8
NAMESPACES = 20


def _for_create(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop what the API server assigns (uid, resourceVersion, timestamps, managedFields)."""
    meta = obj["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    obj["spec"].pop("priority", None)  # the Priority admission plugin sets it
    return obj


def create_all(cp: ControlPlane, nodes: int, pods: int, workers: int) -> float:
    """Create the namespaces, nodes (with status: allowed on create) and pods; seconds taken."""
    import kubernetes.client

    local = threading.local()
    clients: list[Any] = []
    lock = threading.Lock()

    def core() -> Any:
        if not hasattr(local, "core"):
            api = cp.api_client()
            with lock:
                clients.append(api)
            local.core = kubernetes.client.CoreV1Api(api)
        return local.core

    def node(i: int) -> None:
        core().create_node(_for_create(bench_memory.node_json(i)))

    def pod(i: int) -> None:
        body = _for_create(bench_memory.pod_json(i, nodes, FILL))
        core().create_namespaced_pod(body["metadata"]["namespace"], body)

    started = time.monotonic()
    setup = kubernetes.client.CoreV1Api(cp.api_client())
    for k in range(NAMESPACES):
        setup.create_namespace({"metadata": {"name": f"team-{k:02d}"}})
    setup.api_client.close()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for make, count in ((node, nodes), (pod, pods)):
            for future in [pool.submit(make, i) for i in range(count)]:
                future.result()
    for api in clients:
        api.close()
    return time.monotonic() - started


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def time_ready(cp: ControlPlane, timeout: float = 300.0) -> tuple[float, float]:
    """Seconds from starting ``muster serve`` until its /readyz answers 200, and the CPU
    seconds the server used until then (less sensitive to a busy machine)."""
    (port,) = free_ports(1)
    argv = [sys.executable, "-m", "app.cli", "serve", "--kubeconfig", str(cp.kubeconfig),
            "--port", str(port), "--log-level", "WARNING"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=2.0) as client:
            while True:
                try:
                    if client.get("/readyz").status_code == 200:
                        return time.monotonic() - started, cpu_seconds(proc.pid)
                except httpx.TransportError:
                    pass  # not listening yet
                if proc.poll() is not None:
                    raise RuntimeError(f"muster serve exited with code {proc.returncode}")
                if time.monotonic() - started > timeout:
                    raise RuntimeError(f"muster serve not ready within {timeout:.0f} s")
                time.sleep(0.02)  # polling granularity of the figure
    finally:
        benchproc.stop(proc)


def _series(label: str, measure: Callable[[], tuple[float, float]], runs: int) -> float:
    results = [measure() for _ in range(runs)]
    median = statistics.median(t for t, _ in results)
    cpu = statistics.median(c for _, c in results)
    shown = ", ".join(f"{t:.2f}" for t, _ in results)
    print(f"  {label:30} median {median:6.2f} s, CPU {cpu:5.2f} s   (runs: {shown} s)")
    return median


def run(nodes: int, pods: int, runs: int, workers: int) -> tuple[float, float]:
    """Baseline and loaded medians, printed."""
    with ControlPlane() as cp:
        print(f"muster serve start -> /readyz 200 against kube-apiserver 1.20 ({cp.url})")
        baseline = _series("empty API server (baseline)", lambda: time_ready(cp), runs)
        took = create_all(cp, nodes, pods, workers)
        print(f"  created {nodes} nodes and {pods} pods in {took:.1f} s ({workers} threads)")
        loaded = _series(f"{nodes} nodes, {pods} pods", lambda: time_ready(cp), runs)
        print(f"  difference {loaded - baseline:.2f} s; ratio x{loaded / baseline:.2f}"
              f"   (target: ready <= {TARGET_S:g} s)")  # fmt: skip
    return baseline, loaded


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args(argv)
    run(args.nodes, args.pods, args.runs, args.workers)


if __name__ == "__main__":
    main()
