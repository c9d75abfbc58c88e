"""A planning cycle with its shortcuts (memos, per-row catch-up, remembered device choices)
must plan exactly what the straightforward path plans: the same gangs, each member on the
same node with the same GPU devices, on random clusters."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.core.actions import allocate_in_domain
from app.core.actions.allocate_in_domain import DemandMemo, _columns
from app.core.cycle import planner
from app.core.cycle.memos import FailedPlacements
from app.core.cycle.planner import Planner
from app.core.gpu import links
from app.core.model.gang import gang_spec
from app.core.model.values import Node, Pod
from app.core.state.cache import ClusterCache
from app.core.state.queuefile import QueueFile
from tests.core.test_allocate_incremental import reference
from tests.factories import node, pod
from tests.spies import returns_of

Plans = list[dict[str, tuple[list[tuple[str, str]], list[tuple[str, tuple[int, ...]]]]]]


def cluster(seed: int) -> tuple[list[Node], list[Pod]]:
    """Random nodes (GPU and CPU-only, blocks, pools, taints), random gangs (sizes, GPU
    counts, queues, priorities, topology asks, selectors) and some running pods."""
    rng = random.Random(seed)
    nodes = []
    for i in range(rng.randint(3, 160)):
        labels = {"network.topology.nvidia.com/block": f"b{i // rng.choice([2, 4, 8])}"}
        if rng.random() < 0.2:
            labels["pool"] = rng.choice(["a", "b"])
        taints = [{"key": "t", "value": "x", "effect": "NoSchedule"}] if rng.random() < 0.1 else []
        gpus = rng.choice([0, 4, 8, 8])
        cpu = str(rng.choice([16, 64]))
        nodes.append(node(f"n{i}", gpus=gpus, cpu=cpu, labels=labels, taints=taints))
    pods = []
    for g in range(rng.randint(1, 60)):
        size = rng.choice([1, 2, 3, 4, 8, 10])
        gpu = rng.choice([0, 1, 1, 2, 4, 8])
        labels = {"muster.io/pod-group": f"g{g}", "muster.io/min-member": str(size)}
        if rng.random() < 0.3:
            labels["muster.io/queue"] = rng.choice(["q1", "q2"])
        annotations = {}
        if rng.random() < 0.15:
            annotations["muster.io/topology-required"] = "block"
        elif rng.random() < 0.15:
            annotations["muster.io/topology-preferred"] = "block"
        selector = {"pool": "a"} if rng.random() < 0.1 else None
        priority = rng.choice([0, 0, 10])
        for m in range(size + rng.choice([0, 0, 1])):
            pods.append(
                pod(
                    f"g{g}-{m}",
                    uid=f"g{g}-{m}",
                    gpu=gpu,
                    cpu=rng.choice(["1", "2", "8"]),
                    labels=labels,
                    annotations=annotations,
                    node_selector=selector,
                    priority=priority,
                    created=float(g * 10 + m),
                )
            )
    for r in range(rng.randint(0, 10)):
        where = rng.choice(nodes).name
        gpu = rng.choice([0, 1])
        pods.append(pod(f"run{r}", uid=f"run{r}", gpu=gpu, cpu="1", node=where, phase="Running"))
    return nodes, pods


def plans(nodes: list[Node], pods: list[Pod], queues: QueueFile | None = None) -> Plans:
    """The plans after a first cycle, and after a second one once the first plan's pods left."""
    cache = ClusterCache()
    cache.upsert_nodes(nodes)
    cache.upsert_pods(pods)
    cache.mark_synced()
    planner = Planner(cache, clock=lambda: 100.0, wall=lambda: 1.8e9, queues=queues)
    keys = sorted({spec.key for p in pods if (spec := gang_spec(p)) is not None})
    out: Plans = []
    for _ in range(2):
        planner.cycle(force=True)
        live = {g: p for g in keys if (p := planner.plan(g)) is not None}
        out.append(
            {
                g: (sorted(p.members.items()), sorted(p.devices.items()))
                for g, p in sorted(live.items())
            }
        )
        if live:
            for uid in next(iter(live.values())).members:
                cache.delete_pod(uid)
    return out


def straightforward(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every shortcut off: device choices, domain sums and failed placements computed afresh,
    every member judged on every row (``test_allocate_incremental.reference``), every gang
    of a run of alike gangs planned on its own (no ``Planner._plan_run``)."""
    monkeypatch.setattr(allocate_in_domain, "allocate", reference)
    monkeypatch.setattr(Planner, "_plan_run", lambda self, *args: [])
    uncached: Callable[..., Any] = links._default_choice.__wrapped__  # type: ignore[attr-defined]
    monkeypatch.setattr(links, "_default_choice", uncached)

    def fresh(self: DemandMemo, view: Any, tree: Any, masks: Any, kinds: Any) -> Any:
        return _columns(view, masks, kinds, None), {}

    monkeypatch.setattr(allocate_in_domain.DemandMemo, "columns", fresh)

    def place(self: FailedPlacements, view: Any, members: Any, ask: Any, pinned: Any,
              compute: Callable[[], Any]) -> Any:  # fmt: skip
        return compute()

    monkeypatch.setattr(FailedPlacements, "place", place)


@pytest.mark.parametrize("seed", range(40))
def test_cycle_plans_as_the_straightforward_path(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes, pods = cluster(seed)
    fast = plans(nodes, pods)
    with monkeypatch.context() as patched:
        straightforward(patched)
        slow = plans(nodes, pods)
    assert fast == slow


def test_random_clusters_plan_gangs() -> None:
    """The comparison means something: most random clusters plan gangs in both cycles."""
    both = sum(all(plans(*cluster(seed))) for seed in range(40))
    assert both >= 25


@pytest.mark.parametrize("seed", range(6))
def test_runs_of_alike_gangs_plan_as_the_straightforward_path(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The benchmark's shape, small: blocks of 16 GPU nodes, some partly used, and a long run
    of alike gangs (the case the shortcuts for alike members and remembered domains serve)."""
    rng = random.Random(500 + seed)
    nodes = [
        node(f"n{i}", gpus=8, cpu="96", labels={"network.topology.nvidia.com/block": f"b{i // 16}"})
        for i in range(rng.choice([48, 80, 112]))
    ]
    pods = [
        pod(f"run{r}", uid=f"run{r}", gpu=rng.randint(1, 3), cpu="1",
            node=rng.choice(nodes).name, phase="Running")
        for r in range(rng.randint(0, 30))
    ]  # fmt: skip
    size, gpu = rng.choice([(10, 1), (4, 2), (3, 1), (16, 1)])
    for g in range(rng.randint(20, 60)):
        labels = {"muster.io/pod-group": f"g{g}", "muster.io/min-member": str(size)}
        pods += [
            pod(f"g{g}-{m}", uid=f"g{g}-{m}", gpu=gpu, cpu="4", labels=labels, created=float(g))
            for m in range(size)
        ]
    repeated: list[object] = []
    again = allocate_in_domain._in_domain
    batched = allocate_in_domain.fill_domain

    def counted(*args: Any) -> Any:
        repeated.append(args[3:5])
        return again(*args)

    def counted_run(*args: Any) -> Any:
        repeated.append(args[3:5])
        return batched(*args)

    with monkeypatch.context() as patched:
        patched.setattr(allocate_in_domain, "_in_domain", counted)
        patched.setattr(allocate_in_domain, "fill_domain", counted_run)
        fast = plans(nodes, pods)
    with monkeypatch.context() as patched:
        straightforward(patched)
        slow = plans(nodes, pods)
    assert fast == slow
    assert fast[0]  # gangs were planned
    # The search was skipped for a gang going where the last one went, one by one or a run
    # of them at once (``Planner._plan_run``) (gangs of 4 x 2 GPUs
    # fill a node each: the empty nodes tie, none comes first by strictly fewest left).
    assert repeated or (size, gpu) == (4, 2)


#: Queues for the runs below: q1 reaches its limit part-way through a run of its gangs.
RUN_QUEUES = """
queues:
  - {name: default}
  - {name: q1, limit: {nvidia.com/gpu: %d, cpu: %d}}
  - {name: q2, guaranteed: {nvidia.com/gpu: 16}}
"""


def runs_cluster(seed: int) -> tuple[list[Node], list[Pod], tuple[int, int]]:
    """Blocks of GPU nodes, some partly used, and runs of alike gangs one after another (by
    age): shapes interleaved and repeated, queues, topology asks, GPU shares, elastic
    members, node selectors, more demand than room at times; and q1's GPU limit."""
    rng = random.Random(9000 + seed)
    block = rng.choice([4, 8, 16])
    nodes = []
    for i in range(rng.choice([24, 48, 96])):
        labels = {"network.topology.nvidia.com/block": f"b{i // block}"}
        if rng.random() < 0.1:
            labels["pool"] = "a"
        nodes.append(node(f"n{i}", gpus=rng.choice([8, 8, 4]), cpu="64", labels=labels))
    pods = [
        pod(f"run{r}", uid=f"run{r}", gpu=rng.randint(1, 3), cpu="1",
            node=rng.choice(nodes).name, phase="Running")
        for r in range(rng.randint(0, 20))
    ]  # fmt: skip
    shapes = []
    for _ in range(rng.randint(1, 4)):
        annotations = {}
        kind = rng.random()
        if kind < 0.15:
            annotations["muster.io/topology-required"] = "block"
        elif kind < 0.3:
            annotations["muster.io/topology-preferred"] = "block"
        elif kind < 0.4:
            annotations["muster.io/gpu-fraction"] = "0.5"
        shapes.append(
            {
                "size": rng.choice([1, 2, 3, 4, 6, 10]),
                "gpu": 0 if "muster.io/gpu-fraction" in annotations else rng.choice([0, 1, 1, 2]),
                "cpu": rng.choice(["1", "4", "16"]),
                "queue": rng.choice(["", "q1", "q1", "q2"]),
                "annotations": annotations,
                "selector": {"pool": "a"} if rng.random() < 0.1 else None,
                "extra": rng.random() < 0.2,
                "priority": rng.choice([0, 0, 10]),
            }
        )
    g = 0
    for _ in range(rng.randint(2, 8)):
        shape = rng.choice(shapes)
        for _ in range(rng.randint(1, 15)):
            labels = {"muster.io/pod-group": f"g{g}", "muster.io/min-member": str(shape["size"])}
            if shape["queue"]:
                labels["muster.io/queue"] = shape["queue"]
            count = shape["size"] + (1 if shape["extra"] else 0)
            pods += [
                pod(f"g{g}-{m}", uid=f"g{g}-{m}", gpu=shape["gpu"], cpu=shape["cpu"],
                    labels=labels, annotations=shape["annotations"],
                    node_selector=shape["selector"], priority=shape["priority"],
                    created=float(g))
                for m in range(count)
            ]  # fmt: skip
            g += 1
    return nodes, pods, (rng.choice([6, 12, 20, 40, 1000]), rng.choice([24, 60, 1000]))


def run_plans(seed: int, tmp_path: Path) -> Plans:
    nodes, pods, limits = runs_cluster(seed)
    path = tmp_path / f"queues-{seed}.yaml"
    path.write_text(RUN_QUEUES % limits)
    return plans(nodes, pods, QueueFile(path))


@pytest.mark.parametrize("seed", range(40))
def test_runs_of_mixed_alike_gangs_plan_as_one_by_one(
    seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs of alike gangs planned at once (``Planner._plan_run``) plan exactly what the
    straightforward path plans gang by gang, with queue limits reached part-way through a
    run, DRF turns between queues, partial fits at the end of the cluster, GPU shares,
    topology asks and elastic members."""
    fast = run_plans(seed, tmp_path)
    with monkeypatch.context() as patched:
        straightforward(patched)
        slow = run_plans(seed, tmp_path)
    assert fast == slow


def test_runs_are_planned_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above means something: many gangs of those clusters are planned in
    runs (397 in 107 runs when written)."""
    runs = returns_of(monkeypatch, Planner, "_plan_run")
    for seed in range(40):
        run_plans(seed, tmp_path)
    taken = [len(out) for out in runs]
    assert sum(taken) >= 200
    assert sum(1 for n in taken if n) >= 40


def test_runs_go_on_into_the_next_domain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparisons above cover runs going on into the next domain without a search
    (``next_domain``: 115 of 195 asks when written), and it declines at times."""
    found = returns_of(monkeypatch, planner, "next_domain")
    for seed in range(40):
        run_plans(seed, tmp_path)
    answers = [f is not None for f in found]
    assert answers.count(True) >= 25
    assert answers.count(False) >= 10
