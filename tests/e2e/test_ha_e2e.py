"""Two Muster replicas, one leader, on the real control plane and kube-scheduler 1.20.

The replicas are real subprocesses (``ha.MusterProcess``), SIGKILLed for real; a loopback
proxy plays the Service and sends kube-scheduler to the ready replica (the leader). Each test
kills (or switches) the leader at one of the moments that matter and checks that the next
leader carries on from what the API server holds: no gang left partly bound, no GPU device
handed out twice, no preemptor losing the room its victims freed. Timings are printed, never
asserted (scripts/bench_takeover.py measures the takeover).
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest
from controlplane import create_gpu_node, wait_for
from ha import HaCluster, ha_cluster
from harness import BindingWatch, FakeKubelet, delete_now, gpu_pod, make_namespace

PLAN = "muster.io/plan"


@pytest.fixture(scope="module")
def cluster() -> Iterator[HaCluster]:
    with ha_cluster() as running:
        yield running


@pytest.fixture
def ha(cluster: HaCluster, request: pytest.FixtureRequest) -> Iterator[HaCluster]:
    """The shared cluster; every pod a test leaves behind is deleted after it, so that no
    test's leftovers (a waiting gang is first in line) change the next one."""
    yield cluster
    for ns in cluster.core.list_namespace().items:
        name = ns.metadata.name
        if name.startswith("kube-") or name in ("default", "muster-system"):
            continue
        for pod in cluster.core.list_namespaced_pod(name).items:
            delete_now(cluster.core, name, pod.metadata.name)


def gang(
    job: str, size: int, ns: str, group: str, gpus: int = 1, **extra: Any
) -> list[dict[str, Any]]:
    labels = {"muster.io/pod-group": job, "muster.io/min-member": str(size), "job": job}
    pods = [gpu_pod(f"{job}-{i}", gpus, ns, group, labels) for i in range(size)]
    for p in pods:
        p["spec"].update(extra.get("spec", {}))
        p["metadata"].setdefault("annotations", {}).update(extra.get("annotations", {}))
    return pods


def create(core: kubernetes.client.CoreV1Api, ns: str, pods: list[dict[str, Any]]) -> None:
    for p in pods:
        core.create_namespaced_pod(ns, p)


def nodes(ha: HaCluster, group: str, count: int, gpus: int = 8) -> list[str]:
    names = [f"{group}-{i}" for i in range(count)]
    for name in names:
        create_gpu_node(ha.core, name, gpus=gpus, labels={"e2e": group})

    def seen() -> bool:
        return all(
            set(names) <= {str(n["name"]) for n in r.get("/debug/nodes")["nodes"]}
            for r in ha.replicas
            if r.alive
        )

    wait_for(seen, 30, f"every replica to see nodes {names}")
    return names


def whole(seen: BindingWatch, job: str, size: int) -> bool:
    return all(f"{job}-{i}" in seen.current for i in range(size))


def bound_count(seen: BindingWatch, job: str, size: int) -> int:
    return sum(f"{job}-{i}" in seen.current for i in range(size))


def device_conflicts(core: kubernetes.client.CoreV1Api, ns: str) -> list[str]:
    """Every GPU device that two live pods of ``ns`` on one node both hold."""
    held: dict[tuple[str, str], list[str]] = defaultdict(list)
    for pod in core.list_namespaced_pod(ns).items:
        ids = (pod.metadata.annotations or {}).get("muster.io/gpu-ids", "")
        if pod.spec.node_name and ids and not pod.metadata.deletion_timestamp:
            for device in ids.split(","):
                held[(pod.spec.node_name, device)].append(pod.metadata.name)
    return [f"{n}/gpu{d}: {', '.join(p)}" for (n, d), p in held.items() if len(p) > 1]


def carried(ha: HaCluster) -> list[str]:
    """What the new leader carried on when it took over, one line per plan (or hold)."""
    leader = wait_for(ha.leader, 30, "a leader")
    lines: list[str] = leader.get("/debug/leadership")["carried"]
    return lines


def rejoin(ha: HaCluster, dead: Any) -> None:
    """Start the killed replica again; it comes back as a synced follower."""
    dead.start()
    wait_for(dead.synced, 60, "the replica to sync")
    assert dead.get("/debug/leadership")["role"] == "follower"


def test_the_follower_takes_over_after_the_leader_is_killed(ha: HaCluster) -> None:
    ns = make_namespace(ha.core, "takeover")
    names = nodes(ha, "takeover", 2)
    with BindingWatch(ha.core, ns) as seen:
        create(ha.core, ns, gang("first", 4, ns, "takeover"))
        wait_for(lambda: whole(seen, "first", 4), 60, "the first gang to bind")
        before = ha.leader()
        assert before is not None and ha.lease_holder() == before.identity
        dead = ha.kill_leader()
        killed = time.monotonic()
        create(ha.core, ns, gang("second", 4, ns, "takeover", gpus=2))
        wait_for(lambda: whole(seen, "second", 4), 60, "the second gang to bind after the kill")
        took = min(seen.bound_at[f"second-{i}"] for i in range(4)) - killed
        after = ha.leader()
        assert after is not None and after is not dead
        assert ha.lease_holder() == after.identity
        assert after.get("/debug/leadership")["takeovers"] == 1
        print(
            f"\ntakeover: {before.identity} killed, {after.identity} bound a gang {took:.2f}s later"
        )
        rejoin(ha, dead)
    assert max(seen.max_gpus[n] for n in names) <= 8
    assert device_conflicts(ha.core, ns) == []
    # The Service sent kube-scheduler to both replicas; the follower forwarded to the leader.
    assert set(ha.proxy.routed) == {"muster-a", "muster-b"}


def records_on(ha: HaCluster, ns: str, names: list[str]) -> list[str]:
    """The plan records (``muster.io/plan``) the named pods carry so far."""
    annotations = (ha.core.read_namespaced_pod(n, ns).metadata.annotations or {} for n in names)
    return [a[PLAN] for a in annotations if a.get(PLAN)]


def record_of(ha: HaCluster, ns: str, names: list[str]) -> dict[str, Any]:
    """The plan record (``muster.io/plan``) of the gang of the named members, decoded (waited
    for: the loop writes it after the cycle that planned the gang, on the members
    kube-scheduler has tried, or on one of them, and a member may reach the barrier first)."""
    wait_for(lambda: records_on(ha, ns, names), 30, f"a plan record on {ns}/{names}")
    record: dict[str, Any] = json.loads(records_on(ha, ns, names)[0])
    return record


def blocked_gang(ha: HaCluster, ns: str, group: str, job: str, gpus: int) -> list[dict[str, Any]]:
    """A 4-member gang whose last member kube-scheduler itself cannot place for now.

    A pod labelled ``block`` is bound straight onto a node of the group, and the last member
    has a required anti-affinity to it across the group (``topologyKey: e2e``). Muster does
    not judge pod affinity, so it plans all four; the first three reach bind and wait at the
    barrier, the fourth never comes until the blocker goes.
    """
    blocker = gpu_pod(f"{job}-blocker", 0, ns, group, {"block": job})
    blocker["spec"].update(nodeName=f"{group}-0", schedulerName="default-scheduler")
    ha.core.create_namespaced_pod(ns, blocker)
    pods = gang(job, 4, ns, group, gpus=gpus)
    term = {"labelSelector": {"matchLabels": {"block": job}}, "topologyKey": "e2e"}
    pods[3]["spec"]["affinity"] = {
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    }
    return pods


def at_barrier(ha: HaCluster, gang_key: str) -> int:
    leader = ha.leader()
    if leader is None:
        return 0
    rows = leader.get("/debug/gangs")["gangs"]
    return next((int(g["atBarrier"]) for g in rows if g["gang"] == gang_key), 0)


def test_a_gang_half_way_through_its_bind_barrier_binds_whole_as_recorded(ha: HaCluster) -> None:
    ns = make_namespace(ha.core, "barrier")
    names = nodes(ha, "barrier", 2)
    with BindingWatch(ha.core, ns) as seen:
        create(ha.core, ns, blocked_gang(ha, ns, "barrier", "job", gpus=2))
        wait_for(lambda: at_barrier(ha, "barrier/job") >= 2, 60, "members to wait at the barrier")
        record = record_of(ha, ns, [f"job-{i}" for i in range(4)])
        dead = ha.kill_leader()
        assert f"barrier/job: plan {record['id']} carried on (4 members)" in carried(ha)
        assert bound_count(seen, "job", 4) == 0  # nothing bound while the gang is incomplete
        delete_now(ha.core, ns, "job-blocker")
        wait_for(lambda: whole(seen, "job", 4), 60, "the gang to bind whole")
        rejoin(ha, dead)
    by_uid = {p.metadata.uid: p for p in ha.core.list_namespaced_pod(ns).items}
    for uid, (node, devices) in record["members"].items():
        pod = by_uid[uid]
        assert pod.spec.node_name == node  # carried on: the recorded node and devices
        assert pod.metadata.annotations["muster.io/gpu-ids"] == ",".join(map(str, devices))
        assert json.loads(pod.metadata.annotations[PLAN])["id"] == record["id"]
    assert max(seen.max_gpus[n] for n in names) <= 8
    assert device_conflicts(ha.core, ns) == []


def test_a_gang_killed_after_half_its_bindings_is_completed_not_doubled(ha: HaCluster) -> None:
    """The leader dies after two of four Bindings went through (written here, as its binder
    writes them: the recorded node, the GPU ids and the plan); a rival gang arrives that
    would fit in the room the other two members still need."""
    ns = make_namespace(ha.core, "halfbound")
    names = nodes(ha, "halfbound", 2)
    with BindingWatch(ha.core, ns) as seen:
        create(ha.core, ns, blocked_gang(ha, ns, "halfbound", "job", gpus=3))
        wait_for(lambda: at_barrier(ha, "halfbound/job") >= 1, 60, "members at the barrier")
        record = record_of(ha, ns, [f"job-{i}" for i in range(4)])
        text = json.dumps(record, sort_keys=True, separators=(",", ":"))
        dead = ha.kill_leader()
        uids = {p.metadata.name: p.metadata.uid for p in ha.core.list_namespaced_pod(ns).items}
        for name in ("job-0", "job-1"):
            node, devices = record["members"][uids[name]]
            annotations = {"muster.io/gpu-ids": ",".join(map(str, devices)), PLAN: text}
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": ns, "annotations": annotations},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            ha.core.create_namespaced_pod_binding(name, ns, body, _preload_content=False)
        create(ha.core, ns, gang("rival", 2, ns, "halfbound", gpus=3))
        wait_for(ha.leader, 30, "the follower to take over")
        delete_now(ha.core, ns, "job-blocker")
        wait_for(lambda: whole(seen, "job", 4), 60, "the rest of the gang to bind")
        lines = carried(ha)
        rejoin(ha, dead)
    assert f"halfbound/job: plan {record['id']} carried on (4 members)" in lines, lines
    for name, uid in uids.items():
        if name.startswith("job-") and name != "job-blocker":
            node, devices = record["members"][uid]
            assert seen.current[name][0] == node
    assert max(seen.max_gpus[n] for n in names) <= 8
    assert device_conflicts(ha.core, ns) == []


def priority_classes(ha: HaCluster) -> None:
    scheduling = kubernetes.client.SchedulingV1Api(ha.api)
    for name, value in (("ha-low", 10), ("ha-high", 1000)):
        try:
            scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:
                raise


def test_a_preemptor_keeps_the_room_its_victims_free_across_a_kill(ha: HaCluster) -> None:
    """Victims are being evicted (they linger terminating: grace period 30 s, no kubelet)
    when the leader dies; single pods arrive that would take the freed GPUs if the plan were
    lost. Then the victims finish terminating."""
    priority_classes(ha)
    ns = make_namespace(ha.core, "victims")
    names = nodes(ha, "victims", 2)
    slow = {"spec": {"priorityClassName": "ha-low", "terminationGracePeriodSeconds": 30}}
    with BindingWatch(ha.core, ns) as seen:
        for job in ("low0", "low1"):
            create(ha.core, ns, gang(job, 2, ns, "victims", gpus=4, **slow))
        wait_for(lambda: whole(seen, "low0", 2) and whole(seen, "low1", 2), 60, "low gangs")
        high = {"spec": {"priorityClassName": "ha-high"}}
        create(ha.core, ns, gang("high", 2, ns, "victims", gpus=4, **high))

        def evicting() -> list[str]:
            pods = ha.core.list_namespaced_pod(ns).items
            return [p.metadata.name for p in pods if p.metadata.deletion_timestamp]

        victims = wait_for(evicting, 60, "the victims' eviction")
        record = record_of(ha, ns, ["high-0"])
        assert record["victims"]
        dead = ha.kill_leader()
        assert f"victims/high: plan {record['id']} carried on (2 members)" in carried(ha)
        singles = {"spec": {"priorityClassName": "ha-low"}}
        for i in range(4):
            body = gpu_pod(f"single-{i}", 2, ns, "victims", {"job": f"single-{i}"})
            body["spec"].update(singles["spec"])
            ha.core.create_namespaced_pod(ns, body)
        for name in wait_for(evicting, 10, "the victims, still terminating"):
            delete_now(ha.core, ns, name)  # what the kubelet would confirm
        wait_for(lambda: whole(seen, "high", 2), 60, "the preemptor to bind whole")
        rejoin(ha, dead)
    planned = {node for node, _ in record["members"].values()}
    assert {seen.current[f"high-{i}"][0] for i in range(2)} == planned
    victim_jobs = {v.rsplit("-", 1)[0] for v in victims}
    assert len(victim_jobs) == 1 and victims == sorted(
        f"{next(iter(victim_jobs))}-{i}" for i in range(2)
    )
    assert not any(seen.current.get(f"single-{i}", ("", 0))[0] in planned for i in range(4)), (
        "a single pod took the room freed for the preemptor"
    )
    assert max(seen.max_gpus[n] for n in names) <= 8
    assert device_conflicts(ha.core, ns) == []


def refusals(ha: HaCluster, ns: str, name: str) -> list[str]:
    """The FailedScheduling messages about pod ``name``."""
    events = ha.core.list_namespaced_event(ns).items
    return [
        e.message or ""
        for e in events
        if e.reason == "FailedScheduling" and e.involved_object.name == name
    ]


def test_a_head_of_line_hold_survives_a_kill(ha: HaCluster) -> None:
    """hold-0 runs a 4-GPU pod expected to end soon (4 GPUs free), hold-1 a long 8-GPU pod;
    an 8-GPU gang waits first in line, with hold-0 held for it. After the kill, a long
    4-GPU pod that would fit in hold-0's free half must not get it."""
    ns = make_namespace(ha.core, "hold")
    nodes(ha, "hold", 2)
    with BindingWatch(ha.core, ns) as seen:
        soon = gpu_pod("soon", 4, ns, "hold", {"job": "soon"})
        soon["metadata"]["annotations"] = {"muster.io/expected-runtime": "20"}
        soon["spec"]["nodeSelector"]["kubernetes.io/hostname"] = "hold-0"
        ha.core.create_namespaced_pod(ns, soon)
        long = gpu_pod("long", 8, ns, "hold", {"job": "long"})
        ha.core.create_namespaced_pod(ns, long)
        wait_for(lambda: "soon" in seen.current and "long" in seen.current, 60, "running pods")
        create(ha.core, ns, gang("big", 2, ns, "hold", gpus=4))

        def hold() -> Any:
            leader = ha.leader()
            held = leader.get("/debug/leadership")["hold"] if leader else None
            return held if held and held["owner"] == "hold/big" else None

        before = wait_for(hold, 60, "the hold for the big gang")
        wait_for(lambda: "hold/big" in ha.lease_annotations().get("muster.io/hold", ""), 10,
                 "the leader's next renewal to carry the hold on the Lease")  # fmt: skip
        dead = ha.kill_leader()
        assert "hold/big: head-of-line hold on hold-0" in carried(ha)
        after = wait_for(hold, 10, "the hold after the takeover")
        assert after["nodes"] == before["nodes"] == ["hold-0"]
        ha.core.create_namespaced_pod(ns, gpu_pod("late", 4, ns, "hold", {"job": "late"}))
        wait_for(lambda: refusals(ha, ns, "late"), 60, "the late pod to be refused")
        assert "late" not in seen.current
        delete_now(ha.core, ns, "soon")
        wait_for(lambda: whole(seen, "big", 2), 60, "the big gang to bind on the held node")
        rejoin(ha, dead)
    assert {seen.current[f"big-{i}"][0] for i in range(2)} == {"hold-0"}
    assert "late" not in seen.current
    assert device_conflicts(ha.core, ns) == []


def test_while_no_replica_runs_pods_wait_and_bind_once_one_is_back(ha: HaCluster) -> None:
    """Both replicas down (the Service has no ready endpoint): kube-scheduler cannot reach
    the extender, records FailedScheduling, and the pods wait; they bind once Muster is back.
    The event text is what README "Operating Muster safely" quotes."""
    ns = make_namespace(ha.core, "down")
    nodes(ha, "down", 1)
    with BindingWatch(ha.core, ns) as seen:
        for replica in ha.replicas:
            replica.kill()
        try:
            wait_for(lambda: ha.proxy.refusing, 10, "the Service to have no ready endpoint")
            create(ha.core, ns, gang("wait", 2, ns, "down"))
            message = wait_for(
                lambda: next((m for m in refusals(ha, ns, "wait-0") if "refused" in m), None),
                60,
                "kube-scheduler's event",
            )
            print(f"\nFailedScheduling while Muster is down: {message}")
            assert "/filter" in message and "connect: connection refused" in message, message
            assert bound_count(seen, "wait", 2) == 0
        finally:
            for replica in ha.replicas:
                replica.start()
        wait_for(lambda: whole(seen, "wait", 2), 90, "the gang to bind once Muster is back")
        wait_for(lambda: all(r.synced() for r in ha.replicas), 60, "both replicas")


class JobController:
    """What a Job controller does for the test's bare pods: a job that has not started gets
    back every member pod that disappeared (a gang rolled back by deleting its bound
    members). Counts the pods it recreated."""

    def __init__(self, ha: HaCluster, ns: str, kubelet: FakeKubelet, pods: dict[str, Any]) -> None:
        self.ha, self.ns, self.kubelet, self.pods = ha, ns, kubelet, pods
        self.recreated = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            live = {p.metadata.name for p in self.ha.core.list_namespaced_pod(self.ns).items}
            busy = self.kubelet.started.keys() | self.kubelet.finished
            for name, body in self.pods.items():
                if name not in live and body["metadata"]["labels"]["job"] not in busy:
                    try:
                        self.ha.core.create_namespaced_pod(self.ns, body)
                        self.recreated += 1
                    except kubernetes.client.ApiException as exc:
                        if exc.status != 409:
                            raise

    def __enter__(self) -> JobController:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(10)


def test_the_contention_workload_finishes_every_job_whole_with_two_kills(ha: HaCluster) -> None:
    """20 nodes x 8 GPUs, sixty 8-pod gangs of 1-GPU pods (3x capacity, shuffled), a fake
    kubelet running each job 3 s; the leader is SIGKILLed after a third and after two thirds
    of the jobs finished (the killed replica rejoins as a follower each time)."""
    ns = make_namespace(ha.core, "contend")
    names = nodes(ha, "contend", 20)
    jobs = {f"j{k:02d}": 8 for k in range(60)}
    order = [(job, i) for job in jobs for i in range(8)]
    random.Random(12).shuffle(order)
    bodies = {f"{job}-{i}": gang(job, 8, ns, "contend")[i] for job, i in order}
    started = time.monotonic()
    kills = []
    with (
        contextlib.ExitStack() as stack,
        BindingWatch(ha.core, ns) as seen,
        FakeKubelet(ha.core, ns, jobs, runtime=3.0) as kubelet,
    ):
        for name in bodies:
            ha.core.create_namespaced_pod(ns, bodies[name])
        controller = JobController(ha, ns, kubelet, bodies)
        stack.enter_context(controller)
        for third in (20, 40):
            wait_for(lambda t=third: len(kubelet.finished) >= t or kubelet.error, 300, "jobs")
            dead = ha.kill_leader()
            kills.append(time.monotonic() - started)
            wait_for(ha.leader, 30, "the follower to take over")
            rejoin(ha, dead)
        wait_for(lambda: kubelet.finished == set(jobs) or kubelet.error, 300, "every job")
        stack.close()
        assert kubelet.error is None, kubelet.error
    took = time.monotonic() - started
    print(
        f"\ncontention with kills at {kills[0]:.0f}s and {kills[1]:.0f}s: "
        f"{len(jobs)} jobs finished whole in {took:.0f}s "
        f"({controller.recreated} pods of rolled-back gangs recreated)"
    )
    assert kubelet.partial_starts == []
    for job in jobs:
        assert all(f"{job}-{i}" in seen.placements for i in range(8))
    assert max(seen.max_gpus[n] for n in names) <= 8
