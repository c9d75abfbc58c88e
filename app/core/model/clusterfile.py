"""Standalone cluster files: the nodes Muster schedules onto when no API server is used.

Two formats, chosen by file name:

* ``*.csv`` -- the openb node list (``sn,cpu_milli,memory_mib,gpu,model``); the model becomes
  the ``nvidia.com/gpu.product`` label.
* anything else -- YAML: ``{"nodes": [entry, ...]}`` where an entry is either a Kubernetes Node
  object (has ``metadata``) or Muster's shorthand::

      - name: gpu-a1          # or namePrefix: gpu-  with  count: 16  (gpu-0 .. gpu-15)
        gpus: 8               # nvidia.com/gpu (default 0)
        gpuModel: H100        # label nvidia.com/gpu.product
        cpu: "64"             # quantity (default 64)
        memory: 512Gi         # quantity (default 256Gi)
        pods: 110             # pod slots (default 110)
        labels: {topology.kubernetes.io/zone: a}
        taints: [{key: dedicated, value: infra, effect: NoSchedule}]
        unschedulable: false
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import yaml

from app.core.model.errors import ClusterFileError, InvalidInput
from app.core.model.parse import node_from_dict
from app.core.model.quantity import parse_milli
from app.core.model.values import GPU_PRODUCT_LABEL, Node, Resources

_OPENB_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
_SHORTHAND_KEYS = {
    "name", "namePrefix", "count", "gpus", "gpuModel", "cpu", "memory", "pods", "labels",
    "taints", "unschedulable",
}  # fmt: skip


def load_cluster_file(path: str | Path) -> list[Node]:
    """Read a cluster file; raises ``ClusterFileError`` naming the file, entry and field."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ClusterFileError(str(path), f"cannot read: {exc.strerror}") from exc
    try:
        nodes = parse_openb_csv(text) if path.suffix == ".csv" else parse_yaml(text)
    except InvalidInput as exc:
        raise ClusterFileError(f"{path}: {exc.field}", exc.problem) from exc
    if not nodes:
        raise ClusterFileError(str(path), "defines no nodes")
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})[:5]
        raise ClusterFileError(str(path), f"duplicate node names: {', '.join(dupes)}")
    return nodes


def parse_openb_csv(text: str) -> list[Node]:
    """Nodes from the openb node list CSV."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in _OPENB_COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise InvalidInput("header", f"missing openb columns: {', '.join(missing)}")
    nodes = []
    for line, row in enumerate(reader, start=2):
        where = f"line {line}"
        try:
            cpu, memory, gpus = int(row["cpu_milli"]), int(row["memory_mib"]), int(row["gpu"])
        except (TypeError, ValueError) as exc:
            raise InvalidInput(where, "cpu_milli, memory_mib and gpu must be integers") from exc
        if min(cpu, memory, gpus) < 0:
            raise InvalidInput(where, "negative capacity")
        labels = {"kubernetes.io/hostname": row["sn"]}
        if row["model"]:
            labels[GPU_PRODUCT_LABEL] = row["model"]
        nodes.append(
            Node(
                name=row["sn"],
                allocatable=Resources(gpus * 1000, cpu, memory * 2**20 * 1000, 110_000),
                labels=labels,
            )
        )
    return nodes


def parse_yaml(text: str) -> list[Node]:
    """Nodes from a YAML cluster file (see the module docstring for the schema)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput("", f"not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise InvalidInput("nodes", "expected a top-level 'nodes' list")
    nodes: list[Node] = []
    for i, entry in enumerate(data["nodes"]):
        field = f"nodes[{i}]"
        if not isinstance(entry, dict):
            raise InvalidInput(field, "expected a mapping")
        if "metadata" in entry:
            nodes.append(node_from_dict(entry, field))
            continue
        nodes.extend(_shorthand(entry, field))
    return nodes


def _shorthand(entry: dict[str, Any], field: str) -> list[Node]:
    unknown = sorted(set(entry) - _SHORTHAND_KEYS)
    if unknown:
        raise InvalidInput(f"{field}.{unknown[0]}", "unknown key")
    count = entry.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidInput(f"{field}.count", "expected a positive integer")
    if "name" in entry and count == 1:
        names = [str(entry["name"])]
    elif "namePrefix" in entry:
        names = [f"{entry['namePrefix']}{k}" for k in range(count)]
    else:
        raise InvalidInput(field, "needs 'name', or 'namePrefix' with 'count'")
    labels = entry.get("labels") or {}
    if not isinstance(labels, dict):
        raise InvalidInput(f"{field}.labels", "expected a mapping")
    labels = {str(k): str(v) for k, v in labels.items()}
    if entry.get("gpuModel"):
        labels[GPU_PRODUCT_LABEL] = str(entry["gpuModel"])
    resources = {
        "cpu": entry.get("cpu", "64"),
        "memory": entry.get("memory", "256Gi"),
        "pods": entry.get("pods", 110),
        "nvidia.com/gpu": entry.get("gpus", 0),
    }
    for key, value in resources.items():
        parse_milli(value, f"{field}.{'gpus' if key == 'nvidia.com/gpu' else key}")
    spec = {"taints": entry.get("taints") or [], "unschedulable": entry.get("unschedulable", False)}
    return [
        node_from_dict(
            {
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
                "spec": spec,
                "status": {"allocatable": {k: str(v) for k, v in resources.items()}},
            },
            field,
        )
        for name in names
    ]
