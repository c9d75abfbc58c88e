"""``app.k8s.groups``: group objects reach the cache through discovery and list+watch.

Kubernetes' own gang API (``scheduling.k8s.io`` PodGroup v1alpha2, Workload v1alpha1) needs
1.35+, which cannot run here: these tests feed ``GroupSync`` the documented JSON objects
through a scripted discovery and list/watch (the fakes of ``test_gateway_sync``), next to the
pods' sync. The CRD kinds (Volcano, coscheduling) run against a real API server in
``tests/e2e/test_gang_sources_e2e.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from kubernetes.client import CoreV1Api

from app.core.model.gang import gang_spec
from app.core.model.values import KUBERNETES, VOLCANO, WORKLOAD
from app.core.state.cache import ClusterCache
from app.k8s.groups import GroupSync
from app.k8s.sync import ClusterSync
from tests.k8s.test_gateway_sync import (
    FakeCore,
    FakeResource,
    event_line,
    eventually,
    listing,
    muster_threads,
    node_json,
    pod_json,
)

NS = "default"


class FakeGroupApi:
    """Scripted discovery (``served``: (group, version) -> resource names) and one scripted
    list function per (group, version, plural)."""

    def __init__(self) -> None:
        self.closed = threading.Event()
        self.served_now: dict[tuple[str, str], frozenset[str]] = {}
        self.scripts: dict[tuple[str, str, str], FakeResource] = {}

    def serve(self, group: str, version: str, plural: str, script: list[Any]) -> FakeResource:
        names = self.served_now.get((group, version), frozenset())
        self.served_now[(group, version)] = names | {plural}
        resource = self.scripts[(group, version, plural)] = FakeResource(script, self.closed)
        return resource

    def served(self, group: str, version: str) -> frozenset[str] | None:
        return self.served_now.get((group, version))

    def lister(self, group: str, version: str, plural: str) -> Callable[..., Any]:
        return self.scripts[(group, version, plural)]


def k8s_podgroup(name: str, min_count: int | None, rv: str = "1", **spec: Any) -> dict[str, Any]:
    """A ``scheduling.k8s.io/v1alpha2`` PodGroup as the Kubernetes 1.36 docs show it."""
    policy = {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": {"schedulingPolicy": policy, **spec},
        "status": {},
    }


def workload(name: str, groups: dict[str, int], rv: str = "1") -> dict[str, Any]:
    """A ``scheduling.k8s.io/v1alpha1`` Workload as the Kubernetes 1.35 docs show it."""
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": {
            "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": name},
            "podGroups": [
                {"name": g, "policy": {"gang": {"minCount": n}}} for g, n in groups.items()
            ],
        },
    }


def volcano_podgroup(name: str, min_member: int, rv: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": {"minMember": min_member, "queue": "research"},
    }


def spec_pod(name: str, **spec: Any) -> dict[str, Any]:
    obj = pod_json(name)
    obj["spec"].update(spec)
    return obj


@pytest.fixture
def run() -> Iterator[Callable[..., tuple[ClusterCache, ClusterSync, GroupSync]]]:
    started: list[tuple[ClusterSync, FakeCore, FakeGroupApi]] = []

    def start(
        core: FakeCore, api: FakeGroupApi, **kwargs: Any
    ) -> tuple[ClusterCache, ClusterSync, GroupSync]:
        cache = ClusterCache()
        groups = GroupSync(cache, api, resync_backoff=0.01, rediscover=3600, **kwargs)
        sync = ClusterSync(cache, cast(CoreV1Api, core), resync_backoff=0.01, groups=groups)
        started.append((sync, core, api))
        sync.start()
        return cache, sync, groups

    yield start
    for sync, core, api in started:
        core.closed.set()
        api.closed.set()
        sync.stop(timeout=5)
    assert not muster_threads()


def spec_of(cache: ClusterCache, uid: str) -> Any:
    pod = cache.snapshot().pods.get(uid)
    return gang_spec(pod) if pod is not None else None


def test_kubernetes_podgroup_by_spec_scheduling_group(run: Callable[..., Any]) -> None:
    api = FakeGroupApi()
    api.serve(
        "scheduling.k8s.io",
        "v1alpha2",
        "podgroups",
        [
            listing("7", k8s_podgroup("training-worker-0", 4, priorityClassName="batch")),
            [
                event_line("MODIFIED", k8s_podgroup("training-worker-0", 2, rv="8")),
                event_line("ADDED", k8s_podgroup("plain", None, rv="9")),
            ],
        ],
    )
    pods = [
        spec_pod("w0", uid="w0", schedulingGroup={"podGroupName": "training-worker-0"}),
        spec_pod("p0", uid="p0", schedulingGroup={"podGroupName": "plain"}),
    ]
    core = FakeCore(nodes=[listing("1", node_json("n1"))], pods=[listing("2", *pods)])
    cache, sync, groups = run(core, api, priority_of={"batch": 1000}.get)
    assert sync.wait_synced(10)
    assert groups.served == ["podgroups.scheduling.k8s.io/v1alpha2"]
    # the watch lowers minCount and adds a basic group
    eventually(lambda: spec_of(cache, "w0").min_member == 2, "minCount 2 from the watch")
    eventually(lambda: cache.snapshot().pods["p0"].group is not None, "the basic PodGroup")
    assert gang_spec(cache.snapshot().pods["p0"]) is None  # basic policy: no gang
    assert [g.source for g in cache.groups()] == [KUBERNETES, KUBERNETES]


def test_a_deleted_podgroup_leaves_its_pods_waiting(run: Callable[..., Any]) -> None:
    api = FakeGroupApi()
    api.serve(
        "scheduling.k8s.io",
        "v1alpha2",
        "podgroups",
        [listing("7", k8s_podgroup("g", 2)), [event_line("DELETED", k8s_podgroup("g", 2))]],
    )
    core = FakeCore(
        nodes=[listing("1", node_json("n1"))],
        pods=[listing("2", spec_pod("w0", uid="w0", schedulingGroup={"podGroupName": "g"}))],
    )
    cache, sync, _ = run(core, api)
    assert sync.wait_synced(10)
    spec = eventually(
        lambda: (s := spec_of(cache, "w0")) is not None and s.min_member is None and s,
        "the PodGroup's deletion",
    )
    assert spec.problem == (
        "spec.schedulingGroup.podGroupName names 'g', which the API does not have (yet)"
    )
    assert cache.groups() == []


def test_the_first_list_carries_priority_and_is_there_at_sync(run: Callable[..., Any]) -> None:
    api = FakeGroupApi()
    api.serve("scheduling.k8s.io", "v1alpha2", "podgroups",
              [listing("7", k8s_podgroup("g", 4, priorityClassName="batch"))])  # fmt: skip
    core = FakeCore(
        nodes=[listing("1", node_json("n1"))],
        pods=[listing("2", spec_pod("w0", uid="w0", schedulingGroup={"podGroupName": "g"}))],
    )
    cache, sync, _ = run(core, api, priority_of={"batch": 1000}.get)
    assert sync.wait_synced(10)
    # synced means the group objects are in: no window where the gang lacks its minimum
    pod = cache.snapshot().pods["w0"]
    assert pod.group is not None and pod.group.priority == 1000
    assert gang_spec(pod).min_member == 4  # type: ignore[union-attr]


def test_kubernetes_workload_by_spec_workload_ref(run: Callable[..., Any]) -> None:
    api = FakeGroupApi()
    api.serve("scheduling.k8s.io", "v1alpha1", "workloads",
              [listing("3", workload("train", {"workers": 4, "driver": 1}))])  # fmt: skip
    pods = [
        spec_pod(f"w{i}", uid=f"w{i}", workloadRef={
            "name": "train", "podGroup": "workers", "podGroupReplicaKey": str(i % 2)})
        for i in range(4)
    ]  # fmt: skip
    core = FakeCore(nodes=[listing("1", node_json("n1"))], pods=[listing("2", *pods)])
    cache, sync, groups = run(core, api)
    assert sync.wait_synced(10)
    assert groups.served == ["workloads.scheduling.k8s.io/v1alpha1"]
    specs = [spec_of(cache, f"w{i}") for i in range(4)]
    assert [(s.name, s.min_member) for s in specs] == [
        ("train:workers:0", 4), ("train:workers:1", 4), ("train:workers:0", 4),
        ("train:workers:1", 4),
    ]  # fmt: skip
    assert sorted(g.name for g in cache.groups() if g.source == WORKLOAD) == [
        "train:driver",
        "train:workers",
    ]


def test_discovery_picks_kinds_up_and_drops_them(run: Callable[..., Any]) -> None:
    api = FakeGroupApi()
    core = FakeCore(
        nodes=[listing("1", node_json("n1"))],
        pods=[listing("2", pod_json("a", uid="a"))],
    )
    cache, sync, groups = run(core, api)
    assert sync.wait_synced(10)  # nothing served: ready after the first round
    assert groups.served == []
    # Volcano's CRD appears; a member names a PodGroup of it
    api.serve("scheduling.volcano.sh", "v1beta1", "podgroups",
              [listing("4", volcano_podgroup("vc", 3))])  # fmt: skip
    groups.discover()
    eventually(lambda: [g.name for g in cache.groups()] == ["vc"], "the Volcano PodGroup")
    assert groups.served == ["podgroups.scheduling.volcano.sh/v1beta1"]
    assert cache.groups()[0].queue == "research"
    # the CRD goes: its loop stops and its objects leave the cache
    del api.served_now[("scheduling.volcano.sh", "v1beta1")]
    groups.discover()
    assert groups.served == [] and cache.groups() == []
    assert not [t for t in muster_threads() if t.name == "muster-sync-volcano"]


def test_a_failing_discovery_keeps_what_runs(run: Callable[..., Any]) -> None:
    api = FakeGroupApi()
    api.serve("scheduling.volcano.sh", "v1beta1", "podgroups",
              [listing("4", volcano_podgroup("vc", 3))])  # fmt: skip
    core = FakeCore(nodes=[listing("1", node_json("n1"))], pods=[listing("2")])
    cache, sync, groups = run(core, api)
    assert sync.wait_synced(10)

    def down(group: str, version: str) -> frozenset[str] | None:
        raise ConnectionError("connection refused")

    api.served = down  # type: ignore[method-assign]
    groups.discover()
    assert groups.served == ["podgroups.scheduling.volcano.sh/v1beta1"]
    assert [g.source for g in cache.groups()] == [VOLCANO]
    assert "connection refused" in (groups.stats()["last_error"] or "")
    assert "groups" in sync.stats()
