"""Gangs declared as Volcano and coscheduling PodGroups, on a real API server and kube-scheduler.

The PodGroup CRDs (minimal manifests of our own with the fields Muster reads, shaped like
Volcano's ``scheduling.volcano.sh/v1beta1`` and scheduler-plugins' ``scheduling.x-k8s.io/v1alpha1``)
are installed after Muster has started: discovery must find them. A PodGroup's minMember then
holds its gang until that many members exist, and the gang is bound whole through the real
kube-scheduler; where Muster's own labels say otherwise, Muster's labels win and the
disagreement is reported as Warning events on the pods and on the PodGroup, in /debug/gangs
and in /explain.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kubernetes.client
import pytest
from controlplane import create_gpu_node, wait_for
from harness import (
    BindingWatch,
    gpu_pod,
    make_namespace,
    muster_cluster,
    wait_for_failure,
    wait_nodes,
)

from app.settings import Settings

CONFLICT = "GangSourceConflict"


def crd(group: str, version: str, spec_fields: dict[str, Any]) -> dict[str, Any]:
    """A namespaced ``PodGroup`` CRD of ``group/version`` whose spec has ``spec_fields``."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"podgroups.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": "PodGroup", "listKind": "PodGroupList", "plural": "podgroups",
                      "singular": "podgroup", "shortNames": ["pg"]},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "properties": spec_fields},
                                "status": {"type": "object",
                                           "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }  # fmt: skip


RESOURCE_LIST = {
    "type": "object",
    "additionalProperties": {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    },
}
VOLCANO_CRD = crd(
    "scheduling.volcano.sh",
    "v1beta1",
    {
        "minMember": {"type": "integer", "format": "int32"},
        "minTaskMember": {"type": "object", "additionalProperties": {"type": "integer"}},
        "minResources": RESOURCE_LIST,
        "queue": {"type": "string"},
        "priorityClassName": {"type": "string"},
    },
)
COSCHEDULING_CRD = crd(
    "scheduling.x-k8s.io",
    "v1alpha1",
    {
        "minMember": {"type": "integer", "format": "int32"},
        "minResources": RESOURCE_LIST,
        "scheduleTimeoutSeconds": {"type": "integer", "format": "int32"},
    },
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """Muster looks for gang APIs every 0.5 s, so CRDs installed now are found at once."""
    with muster_cluster(Settings(mode="cluster", group_discovery_seconds=0.5)) as (cp, core, m):
        api = cp.api_client()
        ext = kubernetes.client.ApiextensionsV1Api(api)
        for body in (VOLCANO_CRD, COSCHEDULING_CRD):
            ext.create_custom_resource_definition(body)
        for body in (VOLCANO_CRD, COSCHEDULING_CRD):
            name = body["metadata"]["name"]

            def established(name: str = name) -> bool:
                conditions = ext.read_custom_resource_definition(name).status.conditions or []
                return any(c.type == "Established" and c.status == "True" for c in conditions)

            wait_for(established, 30, f"CRD {name} to be established")
        yield cp, core, m, kubernetes.client.CustomObjectsApi(api)
        api.close()


def stage(cluster: Any, ns: str, api_version: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Namespace ``ns``, a 4-GPU node ``NS-0`` (label ``e2e=NS``) and PodGroup ``ns/ns`` of
    ``api_version`` with ``spec``; returns the PodGroup as ``/debug/groups`` shows it."""
    _, core, muster, custom = cluster
    make_namespace(core, ns)
    create_gpu_node(core, f"{ns}-0", gpus=4, labels={"e2e": ns})
    wait_nodes(muster, [f"{ns}-0"])
    group, version = api_version.split("/")
    body = {"apiVersion": api_version, "kind": "PodGroup", "metadata": {"name": ns}, "spec": spec}
    custom.create_namespaced_custom_object(group, version, ns, "podgroups", body)
    return wait_group(muster, ns, ns)


def wait_group(muster: Any, ns: str, name: str) -> dict[str, Any]:
    """Wait until Muster's watch has the group object (``/debug/groups``)."""

    def found() -> dict[str, Any] | None:
        rows = muster.get("/debug/groups").json()["groups"]
        return next((r for r in rows if (r["namespace"], r["name"]) == (ns, name)), None)

    row: dict[str, Any] = wait_for(found, 30, f"Muster to read PodGroup {ns}/{name}")
    return row


def gang_row(muster: Any, key: str) -> dict[str, Any] | None:
    rows = muster.get("/debug/gangs").json()["gangs"]
    return next((r for r in rows if r["gang"] == key), None)


def test_a_volcano_podgroup_holds_its_gang_until_min_member_exist(cluster: Any) -> None:
    cp, core, muster, _ = cluster
    ns = "train"
    with cp.api_client() as api:
        kubernetes.client.SchedulingV1Api(api).create_priority_class(
            {"metadata": {"name": "train-high"}, "value": 1000}
        )
    spec = {"minMember": 3, "minResources": {"nvidia.com/gpu": "3"},
            "priorityClassName": "train-high"}  # fmt: skip
    group = stage(cluster, ns, "scheduling.volcano.sh/v1beta1", spec)
    assert (group["source"], group["minMember"]) == ("volcano", 3)
    assert group["minResources"]["nvidia.com/gpu"] == "3"
    assert group["priority"] == 1000  # the PriorityClass's value, read from the API

    def member(i: int) -> dict[str, Any]:
        pod = gpu_pod(f"train-{i}", 1, ns, ns)
        # Only Volcano's convention: no Muster labels (no webhook in this harness).
        pod["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "train"}
        return pod

    with BindingWatch(core, ns) as seen:
        for i in range(2):
            core.create_namespaced_pod(ns, member(i))
        # kube-scheduler hears why they wait: the PodGroup's minMember, 3
        wait_for_failure(core, ns, "2 of 3 members exist", "the members to wait for a third")
        row = wait_for(lambda: gang_row(muster, f"{ns}/train"), 30, "the gang in /debug/gangs")
        assert row["minMember"] == 3
        assert row["source"] == f"PodGroup.scheduling.volcano.sh {ns}/train"
        assert row["conflicts"] == []
        assert row["priority"] == 1000
        assert seen.placements == {}, "no member may start before the gang is whole"
        core.create_namespaced_pod(ns, member(2))
        wait_for(lambda: len(seen.placements) == 3, 60, "the gang to be bound whole")
    assert max(seen.max_gpus.values()) <= 4


def test_muster_labels_win_over_a_coscheduling_podgroup_and_it_is_reported(
    cluster: Any,
) -> None:
    _, core, muster, _ = cluster
    ns = "co"
    spec = {"minMember": 3, "scheduleTimeoutSeconds": 30}
    group = stage(cluster, ns, "scheduling.x-k8s.io/v1alpha1", spec)
    assert (group["source"], group["minMember"], group["timeoutSeconds"]) == (
        "coscheduling", 3, 30.0)  # fmt: skip
    labels = {"scheduling.x-k8s.io/pod-group": "co", "muster.io/pod-group": "co",
              "muster.io/min-member": "2"}  # fmt: skip
    with BindingWatch(core, ns) as seen:
        for i in range(2):
            core.create_namespaced_pod(ns, gpu_pod(f"co-{i}", 1, ns, "co", labels))
        # Muster's min-member (2) wins over the PodGroup's minMember (3): both run
        wait_for(lambda: len(seen.placements) == 2, 60, "the gang of two to be bound")
    text = (
        f"gang {ns}/co: muster.io/min-member=2 disagrees with PodGroup.scheduling.x-k8s.io "
        f"{ns}/co minMember 3; muster.io/min-member wins"
    )

    def reported() -> set[tuple[str, str]] | None:
        events = core.list_namespaced_event(ns).items
        found = {(e.involved_object.kind, e.involved_object.name) for e in events
                 if e.reason == CONFLICT and e.message == text and e.type == "Warning"}  # fmt: skip
        return found if len(found) == 3 else None

    found = wait_for(reported, 30, "GangSourceConflict events on the pods and the PodGroup")
    assert found == {("Pod", "co-0"), ("Pod", "co-1"), ("PodGroup", "co")}
    row = gang_row(muster, f"{ns}/co")
    assert row is not None and row["minMember"] == 2
    assert row["source"] == f"PodGroup.scheduling.x-k8s.io {ns}/co"
    assert row["conflicts"] == [text.removeprefix(f"gang {ns}/co: ")]
    answer = muster.get(f"/explain/{ns}/co-0").json()
    assert answer["gang"]["conflicts"] == row["conflicts"]
    assert answer["gang"]["needed"] == 2
