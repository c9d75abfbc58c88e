"""Job-level preemption on a real kube-scheduler 1.20: a full cluster of low-priority gangs, a
high-priority gang arrives; only whole low-priority gangs are evicted (through the Eviction
API) and the preemptor runs whole."""

from __future__ import annotations

import time
from typing import Any

from controlplane import create_gpu_node, wait_for
from harness import (
    BindingWatch,
    FakeKubelet,
    create_priority_classes,
    make_namespace,
    muster_cluster,
    priority_gang,
    wait_nodes,
)

from app.settings import Settings


def job(name: str, size: int, gpus: int, ns: str, priority_class: str) -> list[dict[str, Any]]:
    return priority_gang(name, size, gpus, ns, "preempt", priority_class)


def test_high_priority_gang_evicts_only_whole_low_priority_gangs() -> None:
    settings = Settings(mode="cluster", min_runtime_seconds=0)
    with muster_cluster(settings) as (cp, core, muster):
        create_priority_classes(core, {"low": 10, "high": 1000})
        ns = make_namespace(core, "prio")
        nodes = [f"p-{i}" for i in range(4)]
        for name in nodes:
            create_gpu_node(core, name, gpus=8, labels={"e2e": "preempt"})
        wait_nodes(muster, nodes)
        low_jobs = {f"low{k}": 2 for k in range(4)}  # 4 gangs x 2 pods x 4 GPUs = 32 GPUs
        with (
            BindingWatch(core, ns) as seen,
            FakeKubelet(core, ns, {**low_jobs, "high": 4}, runtime=600.0) as kubelet,
        ):
            for name, size in low_jobs.items():
                for body in job(name, size, 4, ns, "low"):
                    core.create_namespaced_pod(ns, body)
            wait_for(lambda: len(kubelet.started) == 4, 60, "the low-priority gangs to run")
            started = time.monotonic()
            for body in job("high", 4, 4, ns, "high"):  # 16 GPUs: two low gangs must go
                core.create_namespaced_pod(ns, body)
            wait_for(lambda: "high" in kubelet.started or kubelet.error, 90, "the preemptor to run")
            took = time.monotonic() - started
            assert kubelet.error is None, kubelet.error
            wait_for(lambda: all(f"high-{i}" in seen.current for i in range(4)), 10, "the watch")
            live = {p.metadata.name for p in core.list_namespaced_pod(ns).items}
            events = core.list_namespaced_event(ns).items
        print(f"\npreemption: high-priority gang running {took:.1f}s after it arrived")
        # pods that were bound and are gone (grace period 0: eviction deletes them at once)
        evicted = set(seen.placements) - set(seen.current)
        evicted_jobs = {name.rsplit("-", 1)[0] for name in evicted}
        assert evicted_jobs and "high" not in evicted_jobs
        for name in evicted_jobs:  # whole gangs only
            assert {f"{name}-{i}" for i in range(low_jobs[name])} <= evicted
            assert not any(f"{name}-{i}" in live for i in range(low_jobs[name]))
        assert len(evicted_jobs) == 2  # just enough room, no more
        assert all(f"high-{i}" in live and seen.current.get(f"high-{i}") for i in range(4))
        survivors = set(low_jobs) - evicted_jobs
        assert all(f"{j}-{i}" in live for j in survivors for i in range(2))
        preempted = [e for e in events if e.reason == "Preempted"]
        assert {e.involved_object.name for e in preempted} == evicted
        assert all("preempted by gang prio/high (priority 1000)" in e.message for e in preempted)
        assert max(seen.max_gpus[n] for n in nodes) <= 8
