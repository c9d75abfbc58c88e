"""API JSON becomes model values; effective requests follow Kubernetes' rules."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.gpu.ask import GpuAsk
from app.core.model.errors import InvalidInput
from app.core.model.parse import effective_requests, node_from_dict, pod_from_dict
from app.core.model.values import Resources


def c(cpu: str = "0", gpu: str | None = None, limits_only: bool = False, **extra: Any) -> dict:
    requests = {"cpu": cpu}
    if gpu is not None:
        requests["nvidia.com/gpu"] = gpu
    resources = {"limits": requests} if limits_only else {"requests": requests}
    return {"name": "c", "resources": resources, **extra}


REQUESTS = [
    # (case, spec, expected gpu, expected cpu milli)
    ("sum of containers", {"containers": [c("1", "2"), c("500m", "1")]}, 3000, 1500),
    ("limits only default requests", {"containers": [c("1", "4", limits_only=True)]}, 4000, 1000),
    (
        "init container peak wins",
        {"containers": [c("1")], "initContainers": [c("3", "1")]},
        1000,
        3000,
    ),
    (
        "containers win over smaller init",
        {"containers": [c("2", "2")], "initContainers": [c("1")]},
        2000,
        2000,
    ),
    (
        "sidecar adds to containers",
        {"containers": [c("1")], "initContainers": [c("500m", restartPolicy="Always")]},
        0,
        1500,
    ),
    (
        "init after sidecar counts both",
        {
            "containers": [c("100m")],
            "initContainers": [c("1", restartPolicy="Always"), c("2")],
        },
        0,
        3000,
    ),
    ("overhead added", {"containers": [c("1")], "overhead": {"cpu": "250m"}}, 0, 1250),
    ("no containers", {}, 0, 0),
]


@pytest.mark.parametrize(("case", "spec", "gpu", "cpu"), REQUESTS, ids=[r[0] for r in REQUESTS])
def test_effective_requests(case: str, spec: dict, gpu: int, cpu: int) -> None:
    requests = effective_requests(spec)
    assert (requests.gpu, requests.cpu, requests.pods) == (gpu, cpu, 1000)


BAD_PODS = [
    ({"metadata": {}}, "Pod.metadata.name"),
    ({"metadata": {"name": 3}}, "Pod.metadata.name"),
    ({"metadata": {"name": "p"}, "spec": {"containers": {}}}, "Pod.spec.containers"),
    (
        {"metadata": {"name": "p"}, "spec": {"containers": [c("lots")]}},
        "Pod.spec.containers[0].resources.requests.cpu",
    ),
    (
        {"metadata": {"name": "p"}, "spec": {"containers": [c("1", "-2")]}},
        "Pod.spec.containers[0].resources.requests.nvidia.com/gpu",
    ),
    ({"metadata": {"name": "p"}, "spec": {"priority": "high"}}, "Pod.spec.priority"),
    (
        {"metadata": {"name": "p"}, "spec": {"tolerations": [{"key": 1}]}},
        "Pod.spec.tolerations[0].key",
    ),
    (
        {
            "metadata": {"name": "p"},
            "spec": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "k", "operator": "Near"}]}
                            ]
                        }
                    }
                }
            },
        },
        "Pod.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].operator",
    ),
    ({"metadata": {"name": "p", "labels": {"a": 1}}}, "Pod.metadata.labels.a"),
    (
        {"metadata": {"name": "p", "creationTimestamp": "yesterday"}},
        "Pod.metadata.creationTimestamp",
    ),
    ("not an object", "Pod"),
]


@pytest.mark.parametrize(("data", "field"), BAD_PODS)
def test_bad_pod_names_the_field(data: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        pod_from_dict(data)
    assert err.value.field == field


def test_pod_fields() -> None:
    pod = pod_from_dict(
        {
            "metadata": {"name": "p", "namespace": "ml", "uid": "u", "labels": {"a": "b"}},
            "spec": {"nodeName": "n1", "priority": 7, "schedulerName": "muster"},
            "status": {"phase": "Running"},
        }
    )
    assert (pod.key, pod.uid, pod.node_name, pod.priority, pod.phase) == (
        "ml/p",
        "u",
        "n1",
        7,
        "Running",
    )
    assert pod.scheduler_name == "muster" and pod.labels == {"a": "b"}


def test_node_prefers_allocatable_and_reads_taints() -> None:
    node = node_from_dict(
        {
            "metadata": {"name": "n", "labels": {"nvidia.com/gpu.product": "H100"}},
            "spec": {
                "taints": [{"key": "k", "value": "v", "effect": "NoExecute"}],
                "unschedulable": True,
            },
            "status": {
                "capacity": {"nvidia.com/gpu": "8", "cpu": "64"},
                "allocatable": {"nvidia.com/gpu": "7", "cpu": "63", "memory": "1Gi", "pods": "10"},
            },
        }
    )
    assert node.allocatable == Resources(7000, 63000, 2**30 * 1000, 10000)
    assert node.gpu_model == "H100" and node.unschedulable
    assert node.taints[0].effect == "NoExecute"


def test_a_node_keeps_musters_own_annotations_only() -> None:
    notes = {"muster.io/gpu-topology": "nvlink:0-7", "flannel.alpha.coreos.com/public-ip": "x"}
    node = node_from_dict({"metadata": {"name": "n", "annotations": notes}})
    assert node.annotations == {"muster.io/gpu-topology": "nvlink:0-7"}
    with pytest.raises(InvalidInput, match=r"Node.metadata.annotations.other"):
        node_from_dict({"metadata": {"name": "n", "annotations": {"other": 1}}})


def test_node_falls_back_to_capacity() -> None:
    node = node_from_dict({"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "4"}}})
    assert node.allocatable.cpu == 4000


FRACTIONS = [
    # (annotations, labels, gpu request, expected milli or error text)
    ({"muster.io/gpu-fraction": "0.25"}, {}, 0, 250),
    ({"gpu-fraction": "0.5"}, {}, 0, 500),  # KAI's key
    ({}, {"muster.io/gpu-fraction": "0.125"}, 0, 125),
    ({"muster.io/gpu-fraction": "1"}, {}, 0, "whole"),
    ({"muster.io/gpu-fraction": "1.5"}, {}, 0,
     "annotations[muster.io/gpu-fraction]: expected a share of one GPU in (0, 1], got '1.5'"),
    ({"muster.io/gpu-fraction": "half"}, {}, 0, "got 'half'"),
    ({"muster.io/gpu-fraction": "nan"}, {}, 0, "got 'nan'"),
    ({"muster.io/gpu-fraction": "0.0001"}, {}, 0, "below the smallest share, 0.001"),
    ({"gpu-fraction": "0.5"}, {}, 1,
     "annotations[gpu-fraction]: a GPU share cannot be combined with a nvidia.com/gpu request"),
]  # fmt: skip


@pytest.mark.parametrize(("annotations", "labels", "gpu", "expected"), FRACTIONS)
def test_gpu_fraction(annotations: dict, labels: dict, gpu: int, expected: object) -> None:
    from tests.factories import pod_json

    data = pod_json("p", gpu=gpu, annotations=annotations, labels=labels)
    if isinstance(expected, str) and expected != "whole":
        with pytest.raises(InvalidInput) as info:
            pod_from_dict(data)
        assert expected in str(info.value)
        assert str(info.value).startswith("Pod.metadata.")
        # A pod already bound keeps counting what it requests instead of being dropped.
        data["spec"]["nodeName"] = "n1"
        assert pod_from_dict(data).gpu_fraction == 0
        return
    made = pod_from_dict(data)
    if expected == "whole":
        assert (made.gpu_fraction, made.requests.gpu, GpuAsk.of(made)) == (0, 1000, GpuAsk(1, 1000))
    else:
        assert made.gpu_fraction == expected
        assert made.requests.gpu == expected
        assert GpuAsk.of(made) == GpuAsk(1, expected)


def test_gpu_ids_annotation() -> None:
    from tests.factories import pod_json

    for text, ids in [("0,1", (0, 1)), ("3", (3,)), ("", ()), ("x", ()), ("1,1", ()), ("-1", ())]:
        data = pod_json("p", gpu=1, node="n", annotations={"muster.io/gpu-ids": text})
        assert pod_from_dict(data).gpu_ids == ids, text
