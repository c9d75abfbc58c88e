"""`muster probe-node` against a real kube-apiserver: the annotation lands on the Node."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import kubernetes.client
import pytest
from controlplane import ControlPlane, create_gpu_node

from app.cli import main
from app.core.gpu.links import from_nvidia_smi, topology_of
from app.core.model.labels import GPU_TOPOLOGY
from app.core.model.parse import node_from_dict

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi" / "a30-pcie-nvlink-pairs.txt"


@pytest.fixture(scope="module")
def control_plane() -> Iterator[ControlPlane]:
    cp = ControlPlane()
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def api(control_plane: ControlPlane) -> Iterator[kubernetes.client.ApiClient]:
    with control_plane.api_client() as client:
        yield client


def probe(control_plane: ControlPlane, node: str) -> int:
    argv = [
        "--from-file",
        str(SAMPLE),
        "--node",
        node,
        "--kubeconfig",
        str(control_plane.kubeconfig),
    ]
    return main(["probe-node", *argv])


def test_probe_node_annotates_the_node(
    control_plane: ControlPlane,
    api: kubernetes.client.ApiClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    core = kubernetes.client.CoreV1Api(api)
    create_gpu_node(core, "probe-gpu-0", gpus=4)
    core.patch_node("probe-gpu-0", {"metadata": {"annotations": {"team": "vision"}}})

    assert probe(control_plane, "probe-gpu-0") == 0

    printed = capsys.readouterr().out.strip()
    stored = core.read_node("probe-gpu-0")
    assert stored.metadata.annotations[GPU_TOPOLOGY] == printed
    assert stored.metadata.annotations["team"] == "vision"  # a merge patch: others stay
    node = node_from_dict(api.sanitize_for_serialization(stored))
    assert topology_of(node) == replace(from_nvidia_smi(SAMPLE.read_text()), source="annotation")


def test_probe_node_for_a_missing_node_exits_2(
    control_plane: ControlPlane, caplog: pytest.LogCaptureFixture
) -> None:
    assert probe(control_plane, "no-such-node") == 2
    assert "node 'no-such-node' not found" in caplog.text
