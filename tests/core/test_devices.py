"""Per-device GPU accounting: shares of one GPU, whole GPUs, device ids at bind, restarts.

Scenario tables drive the real cache, extender and in-memory gateway: each step filters or
binds one pod and states what must happen (the devices chosen, or the refusal's text).
"""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from app.core.gpu.ledger import MILLI, DeviceLedger, device_count
from app.core.gpu.links import GpuTopology, to_annotation
from app.core.model.labels import GPU_IDS, GPU_TOPOLOGY
from app.core.model.values import Node, Pod
from app.core.state.cache import ClusterCache
from app.core.state.gateway import InMemoryGateway
from app.core.verbs.extender import Extender
from app.settings import Settings
from app.wiring import build_graph
from tests.factories import node, pod

PCIE_PAIRS = to_annotation(
    GpuTopology(
        8,
        (0, 0, 0, 0, 1, 1, 1, 1),
        (frozenset({0, 1}), frozenset({2, 3}), frozenset({4, 5}), frozenset({6, 7})),
    )
)


def gpu_node(name: str, gpus: int, topology: str | None = None) -> Node:
    made = node(name, gpus=gpus)
    return replace(made, annotations={GPU_TOPOLOGY: topology}) if topology else made


def share(name: str, fraction: str, annotations: dict[str, str] | None = None, **kw: Any) -> Pod:
    return pod(name, annotations={"muster.io/gpu-fraction": fraction, **(annotations or {})}, **kw)


@dataclass
class Step:
    """Bind ``pod`` to ``node`` (``devices``: the ids it must get, or ``error`` text), or
    with ``filter=True`` only check ``failed`` reasons for that node."""

    pod: Pod
    node: str
    devices: tuple[int, ...] | None = None
    error: str = ""
    filter: bool = False
    failed: str = ""


@dataclass
class Case:
    name: str
    nodes: list[Node]
    steps: list[Step] = field(default_factory=list)
    #: pods already bound (by the API), possibly with ``muster.io/gpu-ids``
    running: list[Pod] = field(default_factory=list)


CASES = [
    Case(
        "equal shares fill one device before opening the next",
        [gpu_node("n", 2)],
        [
            Step(share("a", "0.25"), "n", devices=(0,)),
            Step(share("b", "0.25"), "n", devices=(0,)),
            Step(share("c", "0.25"), "n", devices=(0,)),
            Step(share("d", "0.25"), "n", devices=(0,)),
            Step(share("e", "0.25"), "n", devices=(1,)),
        ],
    ),
    Case(
        "a share goes where it leaves the recent mix room (0.5 after 0.5 stays placeable)",
        [gpu_node("n", 2)],
        [
            Step(share("a", "0.5"), "n", devices=(0,)),
            Step(share("b", "0.25"), "n", devices=(1,)),
            Step(share("c", "0.5"), "n", devices=(0,)),
        ],
    ),
    Case(
        "a share never exceeds a device, although the node has enough GPU in total",
        [gpu_node("n", 2)],
        [
            Step(share("a", "0.6"), "n", devices=(0,)),
            Step(share("b", "0.6"), "n", devices=(1,)),
            Step(
                share("c", "0.5"),
                "n",
                filter=True,
                failed="needs 0.5 of one nvidia.com/gpu, at most 0.4 free on one GPU",
            ),
            Step(
                share("c", "0.5"),
                "n",
                error="needs 0.5 of one nvidia.com/gpu, at most 0.4 free on one GPU",
            ),
        ],
    ),
    Case(
        "whole GPUs need fully free devices, not just enough GPU in total",
        [gpu_node("n", 4)],
        [
            Step(
                pod("c", gpu=3),
                "n",
                filter=True,
                failed="needs 3 whole nvidia.com/gpu, 2 fully free (2 partly used)",
            ),
            Step(pod("d", gpu=2), "n", devices=(2, 3)),
        ],
        running=[
            share("a", "0.5", node="n", annotations={GPU_IDS: "0"}),
            share("b", "0.5", node="n", annotations={GPU_IDS: "1"}),
        ],
    ),
    Case(
        "2-GPU pods get NVLink pairs on a PCIe box",
        [gpu_node("n", 8, PCIE_PAIRS)],
        [
            Step(pod("a", gpu=1), "n", devices=(0,)),
            Step(pod("b", gpu=2), "n", devices=(2, 3)),
            Step(pod("c", gpu=2), "n", devices=(4, 5)),
            Step(pod("d", gpu=1), "n", devices=(1,)),
            Step(pod("e", gpu=2), "n", devices=(6, 7)),
        ],
    ),
    Case(
        "4 GPUs stay on one NUMA node of a PCIe box",
        [gpu_node("n", 8, PCIE_PAIRS)],
        [
            Step(pod("a", gpu=1), "n", devices=(0,)),
            Step(pod("b", gpu=4), "n", devices=(4, 5, 6, 7)),
        ],
    ),
    Case(
        "a fraction of 1 is a whole GPU",
        [gpu_node("n", 1)],
        [
            Step(share("a", "1"), "n", devices=(0,)),
            Step(share("b", "0.1"), "n", filter=True, failed="needs 0.1 nvidia.com/gpu, 0 free"),
        ],
    ),
]


def extender_for(
    cache: ClusterCache, gateway: InMemoryGateway, strategy: str = "binpack"
) -> Extender:
    """An extender wired as the server wires it (``app.wiring``)."""
    return build_graph(Settings(strategy=strategy), cache, gateway).extender


def run_case(case: Case) -> tuple[ClusterCache, Extender, InMemoryGateway]:
    cache = ClusterCache()
    cache.upsert_nodes(case.nodes)
    cache.upsert_pods(case.running)
    gateway = InMemoryGateway(cache)
    extender = extender_for(cache, gateway, "muster")
    for step in case.steps:
        names = [n.name for n in case.nodes]
        if step.filter:
            result = extender.filter(step.pod, names)
            assert step.node not in result.feasible, step
            assert result.failed[step.node] == step.failed
            continue
        extender.filter(step.pod, names)
        outcome = asyncio.run(
            extender.bind(step.pod.namespace, step.pod.name, step.pod.uid, step.node)
        )
        if step.error:
            assert step.error in outcome.error, outcome
            continue
        assert not outcome.error, outcome
        bound = cache.pod(step.pod.uid)
        assert bound is not None and bound.node_name == step.node
        assert cache.devices_of(step.pod.uid) == step.devices, step.pod.name
        expected = ",".join(map(str, step.devices or ()))
        assert bound.annotations.get(GPU_IDS) == expected
    return cache, extender, gateway


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_device_scenarios(case: Case) -> None:
    cache, _, _ = run_case(case)
    assert_within_devices(cache)


def assert_within_devices(cache: ClusterCache) -> None:
    view = cache.view()
    assert (view.gpu_free >= 0).all(), view.gpu_free
    assert (view.gpu_free <= MILLI).all()
    snapshot = cache.snapshot()
    used = {}
    for held in snapshot.devices.values():
        for d in held.devices:
            used[(held.node, d)] = used.get((held.node, d), 0) + held.milli
    assert all(v <= MILLI for v in used.values()), used


def test_restart_rebuilds_the_same_devices_from_annotations() -> None:
    cache, _, _ = run_case(CASES[3])
    bound = [p for p in cache.snapshot().pods.values() if p.node_name]
    fresh = ClusterCache()
    # The watch may deliver pods before nodes, and in any order.
    fresh.upsert_pods(reversed(bound))
    fresh.upsert_nodes(CASES[3].nodes)
    for p in bound:
        assert fresh.devices_of(p.uid) == cache.devices_of(p.uid)
    assert (fresh.view().gpu_free == cache.view().gpu_free).all()


def test_a_node_changed_in_place_keeps_its_devices_as_they_are() -> None:
    """A cordon, a taint, a label or a topology annotation leaves every device and what holds
    it as it was (the ledger takes the new node versions in place); a new device count
    re-aligns, as a fresh cache from the same nodes and pods would."""
    cache, _, _ = run_case(CASES[3])
    pods = [p for p in cache.snapshot().pods.values() if p.node_name]
    before = ({p.uid: cache.devices_of(p.uid) for p in pods}, cache.view().gpu_free.copy())
    nodes = list(cache.view().nodes)
    count = device_count(nodes[0])
    topology = to_annotation(GpuTopology(count, (0,) * count, (frozenset(range(count)),)))
    changes = [
        replace(nodes[0], unschedulable=True),
        replace(nodes[-1], labels={**nodes[-1].labels, "zone": "b"}),
        replace(nodes[0], annotations={GPU_TOPOLOGY: topology}),
    ]
    for changed in changes:
        assert cache.upsert_node(changed)
        assert {p.uid: cache.devices_of(p.uid) for p in pods} == before[0]
        assert (cache.view().gpu_free == before[1]).all()
        assert cache.view().nodes[cache.view().index[changed.name]] is changed
    grown = replace(nodes[-1], allocatable=nodes[-1].allocatable._replace(gpu=16 * MILLI))
    cache.upsert_node(grown)
    fresh = ClusterCache()
    fresh.upsert_nodes([*changes[:1], *nodes[1:-1], grown])
    fresh.upsert_pods(pods)
    assert (fresh.view().gpu_free == cache.view().gpu_free).all()
    assert all(fresh.devices_of(p.uid) == cache.devices_of(p.uid) for p in pods)


def test_pods_bound_elsewhere_are_counted_even_when_they_overcommit() -> None:
    cache = ClusterCache()
    cache.upsert_nodes([gpu_node("n", 1)])
    cache.upsert_pod(share("a", "0.75", node="n"))
    cache.upsert_pod(share("b", "0.5", node="n"))  # another scheduler put it there
    view = cache.view()
    assert view.gpu_free[0, 0] == -250
    extender = extender_for(cache, InMemoryGateway(cache))
    result = extender.filter(share("c", "0.1"), ["n"])
    assert result.feasible == []


def test_parallel_share_binds_never_overcommit_a_device() -> None:
    cache = ClusterCache()
    cache.upsert_nodes([gpu_node(f"n{i}", 2) for i in range(3)])
    gateway = InMemoryGateway(cache)
    extender = extender_for(cache, gateway, "muster")
    rng = random.Random(7)
    pods = [share(f"p{i}", rng.choice(["0.1", "0.25", "0.3", "0.5", "0.7"])) for i in range(60)]
    for p in pods:
        extender.filter(p, ["n0", "n1", "n2"])
    barrier = threading.Barrier(12)

    def worker(chunk: list[Pod]) -> None:
        barrier.wait()
        for p in chunk:
            asyncio.run(extender.bind(p.namespace, p.name, p.uid, rng.choice(["n0", "n1", "n2"])))

    threads = [threading.Thread(target=worker, args=(pods[i::12],)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert_within_devices(cache)
    bound = sum(1 for p in pods if cache.devices_of(p.uid))
    assert bound > 6  # some fit, the rest were refused rather than over-committed


@pytest.mark.parametrize("seed", range(6))
def test_random_binds_and_deletes_keep_devices_within_bounds(seed: int) -> None:
    rng = random.Random(seed)
    cache = ClusterCache()
    nodes = [gpu_node(f"n{i}", rng.choice([1, 2, 4, 8])) for i in range(4)]
    cache.upsert_nodes(nodes)
    extender = extender_for(cache, InMemoryGateway(cache), "muster")
    alive: list[Pod] = []
    for i in range(150):
        if alive and rng.random() < 0.3:
            gone = alive.pop(rng.randrange(len(alive)))
            cache.delete_pod(gone.uid)
            continue
        if rng.random() < 0.5:
            p = share(f"p{i}", rng.choice(["0.1", "0.2", "0.5", "0.9"]))
        else:
            p = pod(f"p{i}", gpu=rng.choice([1, 2, 4]))
        names = [n.name for n in nodes]
        result = extender.filter(p, names)
        if not result.feasible:
            continue
        best = extender.prioritize(p, result.feasible)
        target = max(best.pairs(), key=lambda pair: pair[1])[0]
        outcome = asyncio.run(extender.bind(p.namespace, p.name, p.uid, target))
        assert not outcome.error, outcome
        alive.append(p)
        assert_within_devices(cache)
    # A fresh ledger built from the bound pods agrees with the incremental one.
    ledger = DeviceLedger()
    snapshot = cache.snapshot()
    ledger.set_nodes(nodes, dict(snapshot.pods))
    for uid, p in snapshot.pods.items():
        if p.node_name:
            ledger.place(uid, p.node_name, p)
    assert (ledger.free() == cache.view().gpu_free).all()


def test_gpu_model_constraints_use_ordinary_node_affinity() -> None:
    """Item 4: ``nvidia.com/gpu.product`` in required node affinity picks the GPU model,
    for whole GPUs and shares alike; the policy never overrides it."""
    a100 = replace(node("a100", gpus=8), labels={"nvidia.com/gpu.product": "A100-SXM4-80GB"})
    t4 = replace(node("t4", gpus=4), labels={"nvidia.com/gpu.product": "Tesla-T4"})
    cache = ClusterCache()
    cache.upsert_nodes([a100, t4])
    extender = extender_for(cache, InMemoryGateway(cache), "muster")
    only_t4 = [
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["Tesla-T4"]}
            ]
        }
    ]
    for candidate in (pod("whole", gpu=1, affinity_terms=only_t4),
                      share("part", "0.5", affinity_terms=only_t4)):  # fmt: skip
        result = extender.filter(candidate, ["a100", "t4"])
        assert result.feasible == ["t4"]
        assert result.unresolvable["a100"] == "required node affinity not matched"
        scores = dict(extender.prioritize(candidate, result.feasible).pairs())
        assert scores == {"t4": 10}


def test_the_policy_sees_the_gpu_models_a_pod_allows() -> None:
    from app.core.gpu.ask import gpu_models

    def terms(*values: list[str]) -> list[dict[str, Any]]:
        return [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                       "values": v}]} for v in values]  # fmt: skip

    assert gpu_models(pod(gpu=1)) == frozenset()
    assert gpu_models(pod(gpu=1, affinity_terms=terms(["A", "B"]))) == {"A", "B"}
    assert gpu_models(pod(gpu=1, affinity_terms=terms(["A"], ["C"]))) == {"A", "C"}
    other = [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]}]
    assert gpu_models(pod(gpu=1, affinity_terms=terms(["A"]) + other)) == frozenset()
    chosen = pod(gpu=1, node_selector={"nvidia.com/gpu.product": "B"},
                 affinity_terms=terms(["A", "B"]))  # fmt: skip
    assert gpu_models(chosen) == {"B"}


def test_a_renewed_node_guides_the_next_choice_with_its_new_topology() -> None:
    plain = gpu_node("n", 8)
    linked = replace(
        plain,
        annotations={GPU_TOPOLOGY: to_annotation(GpuTopology(8, (0,) * 8, (frozenset({6, 7}),)))},
    )
    two = pod("p", gpu=2)
    ledger = DeviceLedger()
    ledger.set_nodes([plain], {})
    unlinked_choice = ledger.choose("n", two)
    assert ledger.renew_nodes([linked], [0])
    fresh = DeviceLedger()
    fresh.set_nodes([linked], {})
    assert ledger.choose("n", two) == fresh.choose("n", two) == (6, 7) != unlinked_choice
    assert not ledger.renew_nodes([replace(linked, allocatable=gpu_node("n", 4).allocatable)], [0])
    assert not ledger.renew_nodes([gpu_node("m", 8)], [0])


def test_a_deleted_node_leaves_every_other_device_as_it_was() -> None:
    """A node that goes takes its row and nothing else: the other nodes' devices and records
    are as a cache of the remaining nodes has them, the gone node's pods keep their devices
    until they go, and the node coming back is counted as if it had never left."""
    nodes = [gpu_node("w", 8), gpu_node("x", 4), gpu_node("y", 2), gpu_node("z", 4)]
    pods = [
        pod("p0", gpu=2, node="w", annotations={GPU_IDS: "0,1"}),
        pod("p1", gpu=1, node="x", annotations={GPU_IDS: "3"}),
        pod("p2", gpu=2, node="y", annotations={GPU_IDS: "0,1"}),
        share("p3", "0.5", node="z", annotations={GPU_IDS: "2"}),
        pod("p4", gpu=1, node="x", annotations={GPU_IDS: "0"}),
    ]

    def cache_of(these: list[Node]) -> ClusterCache:
        made = ClusterCache()
        made.upsert_nodes(these)
        made.upsert_pods(pods)
        return made

    cache = cache_of(nodes)
    cache.delete_node("x")
    rest = cache_of([n for n in nodes if n.name != "x"])
    assert cache.view().gpu_free.shape == rest.view().gpu_free.shape
    assert (cache.view().gpu_free == rest.view().gpu_free).all()
    assert all(cache.devices_of(p.uid) == rest.devices_of(p.uid) for p in pods)
    cache.delete_node("w")  # the widest row: the table narrows to the widest left
    assert cache.view().gpu_free.shape == (2, 4)
    cache.upsert_nodes([nodes[1], nodes[0]])
    back = cache_of([nodes[2], nodes[3], nodes[1], nodes[0]])
    assert (cache.view().gpu_free == back.view().gpu_free).all()
    assert all(cache.devices_of(p.uid) == back.devices_of(p.uid) for p in pods)
    assert [cache.devices_of(p.uid) for p in (pods[1], pods[4])] == [(3,), (0,)]


@pytest.mark.parametrize("seed", range(8))
def test_node_churn_keeps_devices_as_a_fresh_cache_counts_them(seed: int) -> None:
    """Nodes come, go, come back and change (GPU counts too) around pods that say which
    devices they hold, some listed before their node: the devices free and each pod's devices
    are always what a cache given the same nodes and pods afresh counts."""
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(6)]
    counts = {n: rng.choice([8, 16]) for n in names}
    pods = []
    for i in range(24):  # four to a node, each on devices of its own (no two claim one)
        where, device = names[i % 6], i // 6
        if rng.random() < 0.5:
            pods.append(pod(f"p{i}", gpu=1, node=where, annotations={GPU_IDS: str(device)}))
        else:
            pods.append(share(f"p{i}", "0.25", node=where, annotations={GPU_IDS: str(device)}))
    rng.shuffle(pods)
    cache = ClusterCache()
    live: dict[str, Node] = {}
    cache.upsert_pods(pods[:12])  # some pods before any node
    for step in range(40):
        name = rng.choice(names)
        roll = rng.random()
        if name in live and roll < 0.3:
            cache.delete_node(name)
            del live[name]
        elif name in live and roll < 0.6:
            changed = replace(live[name], unschedulable=not live[name].unschedulable)
            cache.upsert_node(changed)
            live[name] = changed
        else:
            counts[name] = rng.choice([8, 16]) if roll > 0.9 else counts[name]
            live[name] = gpu_node(name, counts[name])
            cache.upsert_node(live[name])
        if step == 20:
            cache.upsert_pods(pods[12:])
        present = pods if step >= 20 else pods[:12]
        fresh = ClusterCache()
        fresh.upsert_nodes(cache.view().nodes)
        fresh.upsert_pods(present)
        assert (cache.view().gpu_free == fresh.view().gpu_free).all(), step
        assert all(cache.devices_of(p.uid) == fresh.devices_of(p.uid) for p in present), step
