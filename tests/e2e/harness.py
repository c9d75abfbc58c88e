"""Shared pieces of the end-to-end tests: Muster as the extender of a real kube-scheduler.

``muster_cluster()`` starts etcd + kube-apiserver (``controlplane.py``), Muster in cluster mode
watching it, and kube-scheduler 1.20 with Muster as its extender, all on loopback.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import httpx
import kubernetes.client
from controlplane import GPU_RESOURCE, ControlPlane, wait_for
from kubernetes import watch

from app.main import create_app
from app.settings import Settings
from tests.conftest import running

GPUS_PER_NODE = 8
#: kube-scheduler 1.20 reads v1beta1; the shipped files (scheduler-config/) are v1 for current
#: clusters and otherwise the same extender settings, backoff and API client rate.
#: ``ControlPlane.start_scheduler`` fills in the kubeconfig, loopback health/metrics addresses
#: and no leader election.
SCHEDULER_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1beta1
kind: KubeSchedulerConfiguration
clientConnection:
  qps: 200
  burst: 400
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 2
profiles:
  - schedulerName: muster
    # Muster preempts whole gangs itself. kube-scheduler 1.20's own pod-level preemption does
    # not count GPUs (ignoredByScheduler), so it finds "candidates" with no victims and then
    # panics in pickOneNodeForPreemption; later releases handle that case.
    plugins:
      postFilter:
        disabled:
          - name: DefaultPreemption
extenders:
  - urlPrefix: "MUSTER_URL"
    filterVerb: filter
    prioritizeVerb: prioritize
    preemptVerb: preempt
    bindVerb: bind
    weight: 20
    enableHTTPS: false
    nodeCacheCapable: true
    httpTimeout: 5s
    ignorable: false
    managedResources:
      - name: nvidia.com/gpu
        ignoredByScheduler: true
      - name: muster.io/gpu-share
        ignoredByScheduler: true
"""


class BindingWatch:
    """Follows every pod of a namespace through a watch in a thread.

    ``placements``: every pod ever bound -> (node, GPUs); ``bound_at``: when the watch first
    saw it bound; ``max_gpus``: the most GPUs ever bound at once per node, counting only pods
    that still existed (deleted pods give their GPUs back).
    """

    def __init__(
        self, core: kubernetes.client.CoreV1Api, namespace: str, group_label: str = ""
    ) -> None:
        self.group_label = group_label
        self.groups: dict[str, str] = {}
        #: the most GPUs held at once by the pods sharing a ``group_label`` value
        self.max_group_gpus: Counter[str] = Counter()
        self.placements: dict[str, tuple[str, int]] = {}
        self.bound_at: dict[str, float] = {}
        self.current: dict[str, tuple[str, int]] = {}
        self.max_gpus: Counter[str] = Counter()
        self._core, self._namespace = core, namespace
        self._watch = watch.Watch()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._stopped = False
        self._resource_version = ""
        self.error: Exception | None = None

    def _run(self) -> None:
        # A short read timeout bounds how long stop() waits; each new watch resumes from the
        # last resourceVersion seen, so no event is lost in between.
        while not self._stopped:
            try:
                kwargs = (
                    {"resource_version": self._resource_version} if self._resource_version else {}
                )
                for event in self._watch.stream(
                    self._core.list_namespaced_pod,
                    self._namespace,
                    _request_timeout=(5, 3),
                    **kwargs,
                ):
                    self._record(event)
            except Exception as exc:
                if "timed out" not in str(exc).lower() and not self._stopped:
                    self.error = exc
                    return

    def _record(self, event: dict[str, Any]) -> None:
        pod = event["object"]
        self._resource_version = pod.metadata.resource_version or self._resource_version
        name = pod.metadata.name
        with self._lock:
            if event["type"] == "DELETED":
                self.current.pop(name, None)
                return
            if not pod.spec.node_name:
                return
            gpus = int((pod.spec.containers[0].resources.requests or {}).get(GPU_RESOURCE, "0"))
            self.placements[name] = (pod.spec.node_name, gpus)
            self.bound_at.setdefault(name, time.monotonic())
            self.current[name] = (pod.spec.node_name, gpus)
            if self.group_label:
                self.groups[name] = (pod.metadata.labels or {}).get(self.group_label, "")
            used = Counter[str]()
            by_group = Counter[str]()
            for pod_name, (node, n) in self.current.items():
                used[node] += n
                by_group[self.groups.get(pod_name, "")] += n
            for node, n in used.items():
                self.max_gpus[node] = max(self.max_gpus[node], n)
            for group, n in by_group.items():
                self.max_group_gpus[group] = max(self.max_group_gpus[group], n)

    def __enter__(self) -> BindingWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stopped = True
        self._watch.stop()
        self._thread.join(timeout=30)
        assert self.error is None, f"binding watch failed: {self.error}"


@contextmanager
def muster_cluster(
    settings: Settings | None = None,
) -> Iterator[tuple[ControlPlane, kubernetes.client.CoreV1Api, httpx.Client]]:
    """Control plane + Muster (cluster mode) + kube-scheduler using Muster; all stopped after."""
    cp = ControlPlane()
    try:
        cp.start()
        api = cp.api_client()
        core = kubernetes.client.CoreV1Api(api)
        # kube-scheduler 1.20 ignores FailedAndUnresolvableNodes: mirror reasons into FailedNodes.
        settings = replace(settings or Settings(mode="cluster"), mirror_unresolvable=True)
        app = create_app(settings, api_client=cp.api_client())
        with running(app) as muster:
            wait_for(lambda: muster.get("/readyz").status_code == 200, 30, "Muster to sync")
            cp.start_scheduler(SCHEDULER_CONFIG.replace("MUSTER_URL", str(muster.base_url) + "/"))
            yield cp, core, muster
        api.close()
    finally:
        cp.stop()


def gpu_pod(
    name: str, gpus: int, namespace: str, group: str = "", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod for Muster's profile; ``group`` confines it to nodes labelled ``e2e=<group>``."""
    requests = {"cpu": "10m", GPU_RESOURCE: str(gpus)}
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
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


def priority_gang(
    name: str, size: int, gpus: int, ns: str, group: str, priority_class: str
) -> list[dict[str, Any]]:
    """The ``size`` members of gang ``name`` (``gpus`` each) in PriorityClass ``priority_class``."""
    labels = {"muster.io/pod-group": name, "muster.io/min-member": str(size), "job": name}
    pods = []
    for i in range(size):
        body = gpu_pod(f"{name}-{i}", gpus, ns, group, labels)
        body["spec"]["priorityClassName"] = priority_class
        pods.append(body)
    return pods


def create_priority_classes(core: kubernetes.client.CoreV1Api, values: dict[str, int]) -> None:
    """Create a PriorityClass for each name with its value."""
    scheduling = kubernetes.client.SchedulingV1Api(core.api_client)
    for name, value in values.items():
        scheduling.create_priority_class({"metadata": {"name": name}, "value": value})


def scheduling_failures(core: kubernetes.client.CoreV1Api, ns: str) -> list[str]:
    """The messages of every ``FailedScheduling`` event in ``ns``."""
    events = core.list_namespaced_event(ns).items
    return [e.message or "" for e in events if e.reason == "FailedScheduling"]


def wait_for_failure(
    core: kubernetes.client.CoreV1Api, ns: str, needle: str, what: str, timeout: float = 60
) -> str:
    """The first ``FailedScheduling`` message in ``ns`` containing ``needle`` (waits
    ``timeout`` seconds)."""
    return wait_for(
        lambda: next((m for m in scheduling_failures(core, ns) if needle in m), None),
        timeout,
        what,
    )


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


def delete_now(core: kubernetes.client.CoreV1Api, ns: str, name: str) -> None:
    """Delete without grace: there is no kubelet to confirm a graceful deletion."""
    try:
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    except kubernetes.client.ApiException as exc:
        if exc.status != 404:  # already gone is fine
            raise


class FakeKubelet:
    """Starts a job once all its pods are bound (marks them Running), and after ``runtime``
    seconds (``runtimes[job]`` if given) completes it by deleting its pods."""

    def __init__(
        self,
        core: kubernetes.client.CoreV1Api,
        ns: str,
        jobs: dict[str, int],
        runtime: float,
        runtimes: dict[str, float] | None = None,
    ) -> None:
        self.core, self.ns, self.jobs, self.runtime = core, ns, jobs, runtime
        self.runtimes = runtimes or {}
        self.started: dict[str, float] = {}
        self.finished: set[str] = set()
        self.partial_starts: list[str] = []
        self.terminated: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: Exception | None = None

    def _run(self) -> None:
        try:
            while not self._stop.wait(0.2):
                self._step()
        except Exception as exc:  # surfaced by the test
            self.error = exc

    def _step(self) -> None:
        pods = self.core.list_namespaced_pod(self.ns).items
        by_job: dict[str, list[Any]] = {}
        for pod in pods:
            if pod.metadata.deletion_timestamp:  # evicted: confirm termination, as kubelet would
                delete_now(self.core, self.ns, pod.metadata.name)
                self.terminated.add(pod.metadata.name)
                continue
            by_job.setdefault(pod.metadata.labels["job"], []).append(pod)
        now = time.monotonic()
        for job, size in self.jobs.items():
            members = by_job.get(job, [])
            if job in self.finished:
                continue
            if job not in self.started:
                if len(members) == size and all(p.spec.node_name for p in members):
                    self.started[job] = now
                    for p in members:
                        try:
                            self.core.patch_namespaced_pod_status(
                                p.metadata.name, self.ns, {"status": {"phase": "Running"}}
                            )
                        except kubernetes.client.ApiException as exc:
                            if exc.status != 404:  # evicted since the list: fine
                                raise
            elif now - self.started[job] >= self.runtimes.get(job, self.runtime):
                for p in members:
                    delete_now(self.core, self.ns, p.metadata.name)
                self.finished.add(job)

    def __enter__(self) -> FakeKubelet:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
