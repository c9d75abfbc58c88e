"""Gang scheduling on a real kube-scheduler 1.20 with Muster as its extender.

Checks the three things kube-scheduler cannot do alone: two competing gangs never deadlock
half-placed, members rejected before their gang was complete are retried as soon as the gang is
planned (Muster nudges them instead of waiting for kube-scheduler's backoff or flush), and a
stream of gang jobs larger than the cluster runs every job whole — with a small fake kubelet
that starts bound pods and deletes a job's pods when it completes.
"""

from __future__ import annotations

import random
import time
from typing import Any

from controlplane import create_gpu_node, wait_for
from harness import (
    BindingWatch,
    FakeKubelet,
    delete_now,
    gpu_pod,
    make_namespace,
    scheduling_failures,
    wait_nodes,
)


def member(job: str, i: int, size: int, ns: str, group: str, gpus: int = 1) -> dict[str, Any]:
    labels = {"muster.io/pod-group": job, "muster.io/min-member": str(size), "job": job}
    return gpu_pod(f"{job}-{i}", gpus, ns, group, labels)


def bound_of(seen: BindingWatch, job: str, size: int) -> int:
    return sum(1 for i in range(size) if f"{job}-{i}" in seen.current)


def test_seed_case_two_interleaved_gangs_do_not_deadlock(cluster: Any) -> None:
    """One node with 4 GPUs; two jobs of 4 x 1-GPU pods created interleaved."""
    cp, core, muster = cluster
    ns = make_namespace(core, "seed")
    create_gpu_node(core, "seed-0", gpus=4, labels={"e2e": "seed"})
    wait_nodes(muster, ["seed-0"])
    with BindingWatch(core, ns) as seen:
        for i in range(4):
            for job in ("a", "b"):
                core.create_namespaced_pod(ns, member(job, i, 4, ns, "seed"))

        def winner() -> str | None:
            done = [j for j in ("a", "b") if bound_of(seen, j, 4) == 4]
            return done[0] if done else None

        first = wait_for(winner, 60, "one gang to be bound whole")
        loser = "b" if first == "a" else "a"
        # Watch for a while: the other gang must stay wholly pending, never half-placed.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            assert bound_of(seen, loser, 4) == 0
            time.sleep(0.2)
        events = scheduling_failures(core, ns)
        # kube-scheduler's events carry the same headline as /explain: first the room is
        # planned for the other gang, then it is taken.
        assert any(
            f"(gang seed/{loser})" in m and ("priority: " in m or "capacity: " in m) for m in events
        ), events

        started = time.monotonic()
        for i in range(4):
            delete_now(core, ns, f"{first}-{i}")
        wait_for(
            lambda: bound_of(seen, loser, 4) == 4, 30, f"gang {loser} to run once {first} is gone"
        )
        took = time.monotonic() - started
        print(f"\nseed case: gang {loser} bound whole {took:.1f}s after {first} left")
    assert max(seen.max_gpus.values()) <= 4


def test_members_rejected_early_are_retried_once_the_gang_is_planned(cluster: Any) -> None:
    """Two members wait ("2 of 4 exist"); when the other two appear, all four bind at once.

    Creating unassigned pods does not make kube-scheduler 1.20 retry the rejected ones; only
    Muster's nudge does, well before the unschedulable queue's periodic flush.
    """
    cp, core, muster = cluster
    ns = make_namespace(core, "late")
    create_gpu_node(core, "late-0", gpus=8, labels={"e2e": "late"})
    wait_nodes(muster, ["late-0"])
    with BindingWatch(core, ns) as seen:
        for i in range(2):
            core.create_namespaced_pod(ns, member("job", i, 4, ns, "late"))

        def rejected() -> bool:
            msgs = scheduling_failures(core, ns)
            return sum("gang-incomplete: 2 of 4 members exist" in m for m in msgs) >= 1

        wait_for(rejected, 30, "the first members to be rejected while the gang is incomplete")
        started = time.monotonic()
        for i in range(2, 4):
            core.create_namespaced_pod(ns, member("job", i, 4, ns, "late"))
        wait_for(lambda: bound_of(seen, "job", 4) == 4, 20, "all four members to bind")
        took = time.monotonic() - started
        print(f"\nlate members: gang bound whole {took:.1f}s after it became complete")
    spread = max(seen.bound_at.values()) - min(seen.bound_at.values())
    assert spread < 2.0, f"members bound {spread:.1f}s apart"


def test_gang_workload_larger_than_the_cluster_runs_every_job_whole(cluster: Any) -> None:
    """8 nodes x 8 GPUs; 20 jobs of 4-8 one-GPU pods (about twice the capacity)."""
    cp, core, muster = cluster
    ns = make_namespace(core, "load")
    nodes = [f"load-{i}" for i in range(8)]
    for name in nodes:
        create_gpu_node(core, name, gpus=8, labels={"e2e": "load"})
    wait_nodes(muster, nodes)
    rng = random.Random(7)
    jobs = {f"j{k:02d}": rng.randint(4, 8) for k in range(20)}
    assert sum(jobs.values()) > 64
    started = time.monotonic()
    with BindingWatch(core, ns) as seen, FakeKubelet(core, ns, jobs, runtime=2.0) as kubelet:
        for job, size in jobs.items():
            for i in range(size):
                core.create_namespaced_pod(ns, member(job, i, size, ns, "load"))
        wait_for(lambda: kubelet.finished == set(jobs) or kubelet.error, 240, "every job to finish")
        assert kubelet.error is None, kubelet.error
    took = time.monotonic() - started
    print(f"\ngang workload: {len(jobs)} jobs, {sum(jobs.values())} pods finished in {took:.1f}s")
    assert max(seen.max_gpus[n] for n in nodes) <= 8
    for job, size in jobs.items():
        times = [seen.bound_at[f"{job}-{i}"] for i in range(size)]
        assert len(times) == size
        assert max(times) - min(times) < 2.0, f"{job} bound over {max(times) - min(times):.1f}s"
