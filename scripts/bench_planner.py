"""Benchmark one planner cycle in process, against the cycle's unavoidable read as baseline.

Usage::

    .venv/bin/python scripts/bench_planner.py                       # 5000 nodes, 1000 x 10
    .venv/bin/python scripts/bench_planner.py --nodes 500 --gangs 1000 --size 10

The cache holds ``--nodes`` nodes of 8 GPUs and ``--gangs`` pending gangs of ``--size``
one-GPU pods (min-member = size), in ``--queues`` queues. Measured, each ``--repeat`` times on
a fresh cache (median and best reported):

* **full**: the first cycle, which plans every gang that fits (all of them when there is
  room; a cluster smaller than the demand plans what fits and gives the rest a reason);
* **after one change**: one more cycle after one planned gang's pods are deleted (the
  steady state: a cycle after an event);
* **baseline**: what any cycle must do before it decides anything, on the same cache: take
  the snapshot and group the pods into gangs (``cache.snapshot()`` + ``gangs_of``).

Prints figures and the ratio against the baseline; the target (issue 12) is a full cycle of
5 000 nodes and 10 000 pods in 1 000 gangs in at most 100 ms. It is not a pass/fail test.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.core.cycle.planner import Planner, gangs_of  # noqa: E402
from app.core.model.parse import node_from_dict, pod_from_dict  # noqa: E402
from app.core.model.values import Node, Pod  # noqa: E402
from app.core.state.cache import ClusterCache  # noqa: E402


def make_nodes(count: int) -> list[Node]:
    """``count`` 8-GPU nodes spread over blocks of 16."""
    alloc = {"cpu": "96", "memory": "1024Gi", "pods": "110", "nvidia.com/gpu": "8"}
    return [
        node_from_dict(
            {
                "metadata": {
                    "name": f"n{i}",
                    "labels": {
                        "kubernetes.io/hostname": f"n{i}",
                        "network.topology.nvidia.com/block": f"b{i // 16}",
                    },
                },
                "spec": {},
                "status": {"capacity": alloc, "allocatable": alloc},
            }
        )
        for i in range(count)
    ]


def make_gangs(gangs: int, size: int, queues: int) -> list[Pod]:
    """``gangs`` gangs of ``size`` one-GPU pods, older gangs first."""
    pods = []
    for g in range(gangs):
        labels = {"muster.io/pod-group": f"job-{g}", "muster.io/min-member": str(size)}
        if queues > 1:
            labels["muster.io/queue"] = f"q{g % queues}"
        for m in range(size):
            pods.append(
                pod_from_dict(
                    {
                        "metadata": {
                            "name": f"job-{g}-{m}",
                            "namespace": "bench",
                            "uid": f"uid-{g}-{m}",
                            "labels": labels,
                            "creationTimestamp": f"2026-01-01T{g // 3600 % 24:02d}:"
                            f"{g // 60 % 60:02d}:{g % 60:02d}Z",
                        },
                        "spec": {
                            "schedulerName": "muster",
                            "containers": [
                                {
                                    "name": "main",
                                    "resources": {
                                        "requests": {
                                            "cpu": "4",
                                            "memory": "32Gi",
                                            "nvidia.com/gpu": "1",
                                        }
                                    },
                                }
                            ],
                        },
                        "status": {"phase": "Pending"},
                    }
                )
            )
    return pods


def timed(action: Callable[[], object]) -> float:
    """Milliseconds ``action`` takes (garbage collection off meanwhile)."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        action()
        return (time.perf_counter() - start) * 1000
    finally:
        gc.enable()


def one_run(nodes: list[Node], pods: list[Pod]) -> tuple[float, float, float, int]:
    """(full cycle ms, cycle after one change ms, baseline ms, gangs planned) on a fresh cache."""
    cache = ClusterCache()
    cache.upsert_nodes(nodes)
    cache.upsert_pods(pods)
    cache.mark_synced()
    planner = Planner(cache, strategy="binpack", scheduler_name="muster")
    baseline = timed(lambda: gangs_of(cache.snapshot()))
    planned: list[str] = []
    full = timed(lambda: planned.extend(planner.cycle()))
    if planned:
        plan = planner.plan(planned[0])
        assert plan is not None
        for uid in plan.members:
            cache.delete_pod(uid)
    after = timed(lambda: planner.cycle())
    return full, after, baseline, len(planned)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gangs", type=int, default=1000)
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--queues", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    nodes = make_nodes(args.nodes)
    pods = make_gangs(args.gangs, args.size, args.queues)
    runs = [one_run(nodes, pods) for _ in range(args.repeat)]
    full, after, base, planned = (list(x) for x in zip(*runs, strict=True))
    print(
        f"planner cycle: {args.nodes} nodes x 8 GPUs, {args.gangs} gangs x {args.size} pods "
        f"({len(pods)} pending), {args.queues} queue(s); {planned[0]} gangs planned"
    )
    table(
        [
            ("full cycle", full),
            ("cycle after one change", after),
            ("baseline (snapshot+gangs)", base),
        ],
        base,
    )
    return 0


def table(rows: list[tuple[str, list[float]]], base: list[float], width: int = 24) -> None:
    """Print median and best milliseconds of each row, and the median over ``base``'s."""
    print(f"{'':{width}} {'median ms':>10} {'best ms':>10} {'x baseline':>11}")
    b = statistics.median(base)
    for label, values in rows:
        m = statistics.median(values)
        print(f"{label:{width}} {m:10.1f} {min(values):10.1f} {m / b:11.1f}")


if __name__ == "__main__":
    raise SystemExit(main())
