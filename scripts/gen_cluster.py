"""Generate a synthetic GPU cluster file in Muster's YAML schema (app/core/model/clusterfile.py).

Usage::

    python scripts/gen_cluster.py --nodes 500                 # -> loadtest/clusters/nodes-500.yaml
    python scripts/gen_cluster.py --nodes 5000 --seed 7 --out /tmp/big.yaml

The cluster looks like a real training/inference fleet: nodes come in homogeneous blocks
(one node shape per block, the way GPU capacity is bought and cabled), blocks sit in zones,
and every node carries ``topology.kubernetes.io/zone`` and
``network.topology.nvidia.com/block`` labels. The mix (by node count) is about

* 30 % 8-GPU H100 nodes (192 cpu, 2Ti),
* 25 % 4-GPU A100 nodes (64 cpu, 512Gi),
* 20 % 1-GPU T4 nodes (16 cpu, 64Gi); some T4 blocks are a tainted inference pool,
* 25 % CPU-only nodes (32 cpu, 128Gi),

plus a few individual nodes (about 2 %) that are tainted as unhealthy or cordoned. The same
``--nodes`` and ``--seed`` always give the same file. Blocks are written as ``namePrefix`` +
``count`` entries (compact, fast to load); the odd tainted or cordoned node is its own entry.
"""

from __future__ import annotations

import argparse
import copy
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ZONE_LABEL = "topology.kubernetes.io/zone"
BLOCK_LABEL = "network.topology.nvidia.com/block"
INSTANCE_LABEL = "node.kubernetes.io/instance-type"
DEFAULT_DIR = Path(__file__).resolve().parents[1] / "loadtest" / "clusters"

#: Nodes per block are drawn between these bounds (the last block takes the remainder).
BLOCK_SIZES = (8, 32)
#: Chance that one node of a block is tainted as unhealthy or cordoned.
ODD_NODE_CHANCE = 0.02
#: Share of T4 blocks that form a tainted inference pool.
INFERENCE_POOL_SHARE = 0.4

HEALTH_TAINT = {"key": "nvidia.com/gpu.health", "value": "degraded", "effect": "NoSchedule"}
PRESSURE_TAINT = {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}
INFERENCE_TAINT = {"key": "dedicated", "value": "inference", "effect": "NoSchedule"}


@dataclass(frozen=True, slots=True)
class Shape:
    """One kind of node: its share of the fleet and its capacity."""

    kind: str
    share: float
    gpus: int
    gpu_model: str
    cpu: str
    memory: str
    instance_type: str


SHAPES: tuple[Shape, ...] = (
    Shape("h100", 0.30, 8, "NVIDIA-H100-80GB-HBM3", "192", "2Ti", "p5.48xlarge"),
    Shape("a100", 0.25, 4, "NVIDIA-A100-SXM4-40GB", "64", "512Gi", "a2-highgpu-4g"),
    Shape("t4", 0.20, 1, "Tesla-T4", "16", "64Gi", "g4dn.4xlarge"),
    Shape("cpu", 0.25, 0, "", "32", "128Gi", "m6i.8xlarge"),
)


def shape_counts(nodes: int) -> dict[str, int]:
    """Nodes per shape, summing exactly to ``nodes`` (largest remainder rounding)."""
    exact = {s.kind: s.share * nodes for s in SHAPES}
    counts = {kind: int(value) for kind, value in exact.items()}
    by_remainder = sorted(exact, key=lambda kind: exact[kind] - counts[kind], reverse=True)
    for kind in by_remainder[: nodes - sum(counts.values())]:
        counts[kind] += 1
    return counts


def zone_names(nodes: int) -> list[str]:
    """One zone per 200 nodes, between one and four zones."""
    return [f"zone-{chr(ord('a') + i)}" for i in range(min(4, max(1, nodes // 200)))]


def split_blocks(count: int, rng: random.Random) -> list[int]:
    """Split ``count`` nodes into blocks of ``BLOCK_SIZES`` nodes (the last one may be smaller)."""
    sizes: list[int] = []
    while count > 0:
        size = min(count, rng.randint(*BLOCK_SIZES))
        sizes.append(size)
        count -= size
    return sizes


def _base_entry(shape: Shape, zone: str, block: str) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if shape.gpus:
        entry["gpus"] = shape.gpus
        entry["gpuModel"] = shape.gpu_model
    entry["cpu"] = shape.cpu
    entry["memory"] = shape.memory
    entry["labels"] = {ZONE_LABEL: zone, BLOCK_LABEL: block, INSTANCE_LABEL: shape.instance_type}
    return entry


def block_entries(
    shape: Shape, size: int, zone: str, block: str, rng: random.Random
) -> list[dict[str, Any]]:
    """Entries for one block: a ``namePrefix`` group plus any odd (tainted/cordoned) node.

    Odd nodes are the last indices of the block, so the group keeps names ``prefix0..``.
    """
    prefix = f"{shape.kind}-{zone.removeprefix('zone-')}-{block}-"
    base = _base_entry(shape, zone, block)
    if shape.kind == "t4" and rng.random() < INFERENCE_POOL_SHARE:
        base["taints"] = [dict(INFERENCE_TAINT)]
    odd = sum(rng.random() < ODD_NODE_CHANCE for _ in range(size))
    entries: list[dict[str, Any]] = []
    if size - odd > 0:
        entries.append({"namePrefix": prefix, "count": size - odd, **copy.deepcopy(base)})
    for index in range(size - odd, size):
        entry = {"name": f"{prefix}{index}", **copy.deepcopy(base)}
        if rng.random() < 0.5:
            taint = HEALTH_TAINT if shape.gpus else PRESSURE_TAINT
            entry["taints"] = [*entry.get("taints", []), dict(taint)]
        else:
            entry["unschedulable"] = True
        entries.append(entry)
    return entries


def build_cluster(nodes: int, seed: int = 0) -> dict[str, Any]:
    """The cluster file content (``{"nodes": [...]}``) for ``nodes`` nodes; deterministic."""
    if nodes < 1:
        raise ValueError("--nodes must be at least 1")
    rng = random.Random(seed)
    zones = zone_names(nodes)
    counts = shape_counts(nodes)
    blocks = [(shape, size) for shape in SHAPES for size in split_blocks(counts[shape.kind], rng)]
    rng.shuffle(blocks)
    entries: list[dict[str, Any]] = []
    for number, (shape, size) in enumerate(blocks):
        zone = zones[number % len(zones)]
        entries.extend(block_entries(shape, size, zone, f"b{number:03d}", rng))
    return {"nodes": entries}


def cluster_yaml(nodes: int, seed: int = 0) -> str:
    """The cluster file text, with a header saying how it was made."""
    header = (
        f"# Synthetic Muster cluster: {nodes} nodes, seed {seed}.\n"
        f"# Made by: python scripts/gen_cluster.py --nodes {nodes} --seed {seed}\n"
        "# Schema: app/core/model/clusterfile.py\n"
    )
    body = yaml.safe_dump(build_cluster(nodes, seed), sort_keys=False, default_flow_style=None)
    return header + body


def default_path(nodes: int) -> Path:
    """``loadtest/clusters/nodes-N.yaml`` in the repository."""
    return DEFAULT_DIR / f"nodes-{nodes}.yaml"


def write_cluster(nodes: int, out: Path | None = None, seed: int = 0) -> Path:
    """Write the cluster file (creating its folder); returns its path."""
    path = out or default_path(nodes)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(cluster_yaml(nodes, seed))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, required=True, help="number of nodes")
    parser.add_argument("--out", type=Path, help="output file (default loadtest/clusters/)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error("--nodes must be at least 1")
    path = write_cluster(args.nodes, args.out, args.seed)
    print(f"wrote {args.nodes} nodes to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
