"""What-if against reality on a real kube-scheduler 1.20: ``POST /whatif`` is asked about a
gang that fits now, a gang that needs lower-priority gangs evicted, and a gang that must wait;
then the same pods are created for real, and Muster must do what what-if said: the same nodes
and GPU devices, the same whole gangs evicted, and the waiting gang wholly unbound (until room
frees, when it starts)."""

from __future__ import annotations

from typing import Any

import httpx
import kubernetes.client
from controlplane import create_gpu_node, wait_for
from harness import (
    BindingWatch,
    FakeKubelet,
    create_priority_classes,
    delete_now,
    gpu_pod,
    make_namespace,
    muster_cluster,
    wait_for_failure,
    wait_nodes,
)

from app.settings import Settings

GROUP = "whatif"
PRIORITY = {"low": 10, "high": 1000}
#: Gang -> (members, GPUs each, priority class), in the order they are submitted.
JOBS = {
    "fit": (2, 4, "low"),
    "low1": (2, 4, "low"),
    "low2": (2, 4, "low"),
    "urgent": (2, 4, "high"),
    "later": (1, 8, "low"),
}


def template(ns: str, gpus: int) -> dict[str, Any]:
    return gpu_pod("member", gpus, ns, GROUP)


def members(ns: str, name: str) -> list[dict[str, Any]]:
    size, gpus, priority = JOBS[name]
    labels = {"muster.io/pod-group": name, "muster.io/min-member": str(size), "job": name}
    pods = []
    for i in range(size):
        body = gpu_pod(f"{name}-{i}", gpus, ns, GROUP, labels)
        body["spec"]["priorityClassName"] = priority
        pods.append(body)
    return pods


def what_if(muster: httpx.Client, ns: str, name: str) -> dict[str, Any]:
    size, gpus, priority = JOBS[name]
    body = {"namespace": ns, "name": name, "replicas": size, "pod": template(ns, gpus),
            "priority": PRIORITY[priority]}  # fmt: skip
    response = muster.post("/whatif", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def submit(core: kubernetes.client.CoreV1Api, ns: str, name: str) -> None:
    for body in members(ns, name):
        core.create_namespaced_pod(ns, body)


def placed(muster: httpx.Client, ns: str, name: str) -> list[tuple[str, tuple[int, ...]]]:
    """Where Muster's cache has the gang's members: (node, GPU devices) each, sorted."""
    pods = muster.get("/debug/pods").json()["pods"]
    return sorted(
        (p["node"], tuple(p["gpuIds"]))
        for p in pods
        if p["namespace"] == ns and p["name"].rsplit("-", 1)[0] == name and p["node"]
    )


def promised(answer: dict[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    return sorted((m["node"], tuple(m["gpus"])) for m in answer["placement"].values())


def test_muster_does_what_whatif_said() -> None:
    settings = Settings(mode="cluster", min_runtime_seconds=0)
    with muster_cluster(settings) as (cp, core, muster):
        create_priority_classes(core, PRIORITY)
        ns = make_namespace(core, "whatif")
        nodes = [f"w-{i}" for i in range(3)]
        for node in nodes:
            create_gpu_node(core, node, gpus=8, labels={"e2e": GROUP})
        wait_nodes(muster, nodes)
        sizes = {name: size for name, (size, _, _) in JOBS.items()}
        with (
            BindingWatch(core, ns) as seen,
            FakeKubelet(core, ns, sizes, runtime=3600.0) as kubelet,
        ):

            def running(name: str) -> None:
                wait_for(lambda: name in kubelet.started or kubelet.error, 60, f"{name} to run")
                assert kubelet.error is None, kubelet.error
                wait_for(lambda: len(placed(muster, ns, name)) == sizes[name], 10, "the cache")

            # (a) A gang that fits now: placed where what-if said, devices included.
            fit = what_if(muster, ns, "fit")
            assert fit["fits_now"] and not fit["victims"] and fit["eta_seconds"] == 0.0, fit
            assert set(fit["placement"]) == {"fit-0", "fit-1"}
            submit(core, ns, "fit")
            running("fit")
            assert placed(muster, ns, "fit") == promised(fit)
            for name in ("low1", "low2"):  # fill the cluster with low-priority gangs
                submit(core, ns, name)
                running(name)

            # (b) A high-priority gang: the whole gangs what-if named are evicted, no others,
            # and it runs where what-if said.
            urgent = what_if(muster, ns, "urgent")
            assert not urgent["fits_now"] and urgent["victims"], urgent
            victims = {v["unit"].split("/", 1)[1] for v in urgent["victims"]}
            assert victims < {"fit", "low1", "low2"}
            for victim in urgent["victims"]:
                assert len(victim["pods"]) == sizes[victim["unit"].split("/", 1)[1]]
            submit(core, ns, "urgent")
            running("urgent")
            evicted = {n.rsplit("-", 1)[0] for n in set(seen.placements) - set(seen.current)}
            assert evicted == victims
            assert placed(muster, ns, "urgent") == promised(urgent)

            # (c) A gang that must wait: no member binds while the cluster is full; it starts
            # once a gang leaves.
            later = what_if(muster, ns, "later")
            assert not later["fits_now"] and not later["victims"] and not later["placement"]
            assert later["explanation"]["category"] == "capacity", later["explanation"]
            assert later["eta_seconds"] is not None
            submit(core, ns, "later")
            wait_for_failure(core, ns, f"(gang {ns}/later)", "kube-scheduler to try the gang")
            answer = muster.get(f"/explain/{ns}/gang/later").json()
            assert (answer["state"], answer["category"]) == ("waiting", "capacity"), answer
            assert "later-0" not in seen.placements
            leaving = sorted({"fit", "low1", "low2"} - victims)[0]
            for i in range(sizes[leaving]):
                delete_now(core, ns, f"{leaving}-{i}")
            running("later")
        assert max(seen.max_gpus[n] for n in nodes) <= 8
