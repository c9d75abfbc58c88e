"""Queues on a real kube-scheduler 1.20: borrowing, reclaiming the guaranteed share by order,
and limits never exceeded.

Two queues are guaranteed half of a 48-GPU cluster each and may borrow. Queue ``a`` fills the
whole cluster while ``b`` is idle; then ``b`` submits more than its limit allows.
Once ``a`` drains, ``b`` runs up to its limit and no further. As ``a``'s jobs
finish, ``b``'s gangs go first (weighted DRF: ``b`` holds nothing while ``a`` still runs
work), and no queue ever holds more than its limit.

``a``'s jobs end one after another: had they all ended together, ``a`` would hold nothing
either, and DRF would rightly put its older gangs first.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from controlplane import create_gpu_node, wait_for
from harness import BindingWatch, FakeKubelet, gpu_pod, make_namespace, muster_cluster, wait_nodes

from app.settings import Settings

QUEUES = """
defaultQueue: default
queues:
  - {name: default}
  # a's borrowed work is protected while young, so b waits for it to finish (no reclaim)
  - {name: a, guaranteed: {nvidia.com/gpu: 24}, limit: {nvidia.com/gpu: 48}, minRuntime: 10m}
  - {name: b, guaranteed: {nvidia.com/gpu: 24}, limit: {nvidia.com/gpu: 32}}
"""


def job_pods(job: str, queue: str, ns: str) -> list[dict[str, Any]]:
    labels = {
        "muster.io/pod-group": job,
        "muster.io/min-member": "2",
        "muster.io/queue": queue,
        "job": job,
        "queue": queue,
    }
    return [gpu_pod(f"{job}-{i}", 4, ns, "queues", labels) for i in range(2)]


def test_second_queue_goes_first_and_limits_hold(tmp_path: Path) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(QUEUES)
    with muster_cluster(Settings(mode="cluster", queue_file=queues)) as (cp, core, muster):
        ns = make_namespace(core, "teams")
        nodes = [f"q-{i}" for i in range(6)]
        for name in nodes:
            create_gpu_node(core, name, gpus=8, labels={"e2e": "queues"})
        wait_nodes(muster, nodes)
        a_jobs = {f"a{k:02d}": 2 for k in range(10)}  # 80 GPUs of work, 8 per job
        b_jobs = {f"b{k:02d}": 2 for k in range(14)}  # 112 GPUs of work, b's limit is 32
        a_runtimes = {job: 5.0 + 0.2 * k for k, job in enumerate(a_jobs)}
        with (
            BindingWatch(core, ns, group_label="queue") as seen,
            FakeKubelet(core, ns, {**a_jobs, **b_jobs}, 3.0, a_runtimes) as kubelet,
        ):
            for job in a_jobs:
                for body in job_pods(job, "a", ns):
                    core.create_namespaced_pod(ns, body)

            def cluster_full_of_a() -> bool:
                held = sum(g for _, g in seen.current.values())
                return held == 48 and all(seen.groups.get(p) == "a" for p in seen.current)

            wait_for(cluster_full_of_a, 60, "queue a to borrow the whole cluster")
            b_submitted = time.monotonic()
            for job in b_jobs:
                for body in job_pods(job, "b", ns):
                    core.create_namespaced_pod(ns, body)
            b_created = time.monotonic()
            wait_for(
                lambda: kubelet.finished == set(a_jobs) | set(b_jobs) or kubelet.error,
                240,
                "every job to finish",
            )
            assert kubelet.error is None, kubelet.error
            queue_state = muster.get("/debug/queues").json()
        bound = {
            job: min(seen.bound_at[f"{job}-{i}"] for i in range(2)) for job in kubelet.finished
        }
        starts = sorted((t, job) for job, t in bound.items() if t > b_submitted)
        assert seen.max_group_gpus["a"] <= 48
        assert seen.max_group_gpus["b"] <= 32, seen.max_group_gpus
        assert seen.max_group_gpus["b"] == 32  # once a drained, b ran up to its limit
        assert max(seen.max_gpus[n] for n in nodes) <= 8
        rows = {q["name"]: q for q in queue_state["queues"]}
        assert rows["b"]["limit"]["nvidia.com/gpu"] == "32"
    # Order (weighted DRF): b holds nothing and a still runs work when the first room frees.
    after = [(t, job) for t, job in starts if t > b_created]
    assert after and after[0][1].startswith("b"), starts[:6]
