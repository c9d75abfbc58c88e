"""Cluster files: YAML shorthand, Node objects, openb CSV, and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.model.clusterfile import load_cluster_file
from app.core.model.errors import ClusterFileError
from app.settings import DEMO_CLUSTER
from app.sim.tracedata import openb_file


def write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_yaml_shorthand_and_node_objects(tmp_path: Path) -> None:
    nodes = load_cluster_file(
        write(
            tmp_path,
            """
nodes:
  - {namePrefix: g-, count: 3, gpus: 8, gpuModel: H100, cpu: "32", memory: 64Gi,
     labels: {zone: a}, taints: [{key: k, value: v, effect: NoSchedule}]}
  - metadata: {name: raw}
    status: {allocatable: {cpu: "2", nvidia.com/gpu: "1"}}
""",
        )
    )
    assert [n.name for n in nodes] == ["g-0", "g-1", "g-2", "raw"]
    assert nodes[0].allocatable.gpu == 8000 and nodes[0].gpu_model == "H100"
    assert nodes[0].labels["zone"] == "a" and nodes[0].taints[0].key == "k"
    assert nodes[3].allocatable.gpu == 1000


def test_demo_cluster_loads() -> None:
    assert len(load_cluster_file(DEMO_CLUSTER)) >= 5


def test_openb_csv() -> None:
    nodes = load_cluster_file(openb_file("openb_node_list_gpu_node.csv"))  # fails if not fetched
    assert len(nodes) == 1213
    assert sum(n.allocatable.gpu for n in nodes) == 6212 * 1000
    assert nodes[0].gpu_model == "P100" and nodes[0].allocatable.cpu == 64000


BAD = [
    ("nodes: 3", "c.yaml: nodes: expected a top-level 'nodes' list"),
    ("nodes: [{name: a, gpus: lots}]", "nodes[0].gpus: unparsable quantity 'lots'"),
    ("nodes: [{name: a, gpu: 1}]", "nodes[0].gpu: unknown key"),
    ("nodes: [{count: 2}]", "needs 'name', or 'namePrefix' with 'count'"),
    ("nodes: [{name: a}, {name: a}]", "duplicate node names: a"),
    ("nodes: []", "defines no nodes"),
    ("nodes: [{name: a, cpu: '-1'}]", "negative quantity"),
    ("{{{", "not valid YAML"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_yaml_is_explained(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ClusterFileError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_cluster_file(write(tmp_path, text))


def test_bad_csv_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ClusterFileError, match="missing openb columns: gpu, model"):
        load_cluster_file(write(tmp_path, "sn,cpu_milli,memory_mib\nx,1,1\n", "n.csv"))
    with pytest.raises(ClusterFileError, match="line 2: cpu_milli, memory_mib and gpu must be"):
        load_cluster_file(
            write(tmp_path, "sn,cpu_milli,memory_mib,gpu,model\nx,a,1,1,T4\n", "m.csv")
        )
    with pytest.raises(ClusterFileError, match="cannot read"):
        load_cluster_file(tmp_path / "absent.yaml")
