"""Fragmentation-aware placement: FGD keeps whole GPUs for whole-GPU asks where best-fit
breaks them; the vectorised fragmentation (FGD's and the sized one) equals its definition;
Muster's default keeps GPU-dense nodes fed with cpu; the live policy learns its mix."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from app.core.gpu.ask import MILLI, GpuAsk, PodAsk
from app.core.gpu.table import GpuTable
from app.core.policies.fgd import (
    FgdPolicy,
    FragTable,
    LiveGpuPolicy,
    MusterPolicy,
    RecentMix,
    TaskClass,
    WorkloadMix,
    default_policy,
    fragmentation,
)
from app.core.policies.gpushare import (
    BestFitPolicy,
    GpuPackingPolicy,
    PlacementPolicy,
    RandomPolicy,
    place,
)

HALF = PodAsk(GpuAsk.fraction(500), cpu=1000, memory=1000)
ONE = PodAsk(GpuAsk.whole(1), cpu=1000, memory=1000)
#: the workload: as many half-GPU pods as whole-GPU pods
MIX = WorkloadMix.of([HALF, ONE])


def table(gpus: Sequence[int], *, cpu: int = 64_000, memory: int = 256_000) -> GpuTable:
    n = len(gpus)
    return GpuTable([f"n{i}" for i in range(n)], gpus, ["V100"] * n, [cpu] * n, [memory] * n)


def run(policy: PlacementPolicy, t: GpuTable, asks: Sequence[PodAsk]) -> list[str | None]:
    """Place ``asks`` in order; the node each went to (None: dropped)."""
    out = []
    for ask in asks:
        pick = place(policy, t, ask)
        out.append(None if pick is None else t.names[pick.row])
    return out


def test_fgd_keeps_a_whole_gpu_that_best_fit_breaks() -> None:
    # n0: 2 GPUs, one half used; n1: 1 idle GPU. A half-GPU pod, then two whole-GPU pods.
    def cluster() -> GpuTable:
        t = table([2, 1])
        t.apply(0, HALF, (0,))
        return t

    asks = [HALF, ONE, ONE]
    # best-fit: least leftover -> the idle 1-GPU node, breaking its only whole GPU
    best_fit = cluster()
    assert run(BestFitPolicy(), best_fit, asks) == ["n1", "n0", None]
    # FGD: the half pod completes n0's half-used device; both whole pods then fit
    for policy in (FgdPolicy(MIX), MusterPolicy(MIX)):
        fgd = cluster()
        assert run(policy, fgd, asks) == ["n0", "n0", "n1"]
        assert fgd.gpu_allocated == fgd.gpu_capacity


def test_fgd_picks_the_device_that_leaves_usable_room() -> None:
    # one node, devices with 1000, 700 and 600 free; a 500 pod: on 600 it leaves 100 (useless
    # to the mix), on 700 it leaves 200, on 1000 it breaks a whole GPU. Best choice: 600.
    t = table([3])
    t.apply(0, PodAsk(GpuAsk.fraction(300)), (1,))
    t.apply(0, PodAsk(GpuAsk.fraction(400)), (2,))
    pick = place(FgdPolicy(MIX), t, HALF)
    assert pick is not None and pick.devices == (2,)


def random_state(rng: np.random.Generator, n: int = 12) -> GpuTable:
    gpus = rng.choice([1, 2, 4, 8], size=n)
    models = rng.choice(["A", "B"], size=n)
    t = GpuTable(
        [f"n{i}" for i in range(n)],
        gpus,
        list(models),
        rng.integers(8_000, 64_000, size=n),
        rng.integers(16_000, 256_000, size=n),
    )
    for _ in range(4 * n):
        gpu = (
            GpuAsk.fraction(int(rng.integers(1, 20)) * 50)
            if rng.random() < 0.7
            else GpuAsk.whole(int(rng.integers(1, 3)))
        )
        ask = PodAsk(gpu, int(rng.integers(0, 4)) * 1000, int(rng.integers(0, 8)) * 1000)
        rows = np.flatnonzero(t.feasible(ask))
        if len(rows):
            t.apply(int(rng.choice(rows)), ask)
    return t


RANDOM_MIX = WorkloadMix(
    (
        TaskClass(1, 250, 2000, 4000),
        TaskClass(1, 500, 4000, 8000, frozenset({"A"})),
        TaskClass(1, 1000, 8000, 16000),
        TaskClass(2, 1000, 16000, 32000),
        TaskClass(4, 1000, 30000, 64000, frozenset({"B"})),
        TaskClass(0, 0, 12000, 24000),
    ),
    (0.3, 0.2, 0.2, 0.1, 0.1, 0.1),
)


@pytest.mark.parametrize("sized", [False, True], ids=["fgd", "sized"])
@pytest.mark.parametrize("seed", range(5))
def test_vectorised_fragmentation_equals_the_definition(seed: int, sized: bool) -> None:
    t = random_state(np.random.default_rng(seed))
    ft = FragTable(RANDOM_MIX, t.model_names, t.free.shape[1], sized=sized)
    expected = [
        fragmentation(
            t.node(r).free,
            t.node(r).model,
            RANDOM_MIX,
            cpu_free=int(t.cpu_free[r]),
            memory_free=int(t.mem_free[r]),
            sized=sized,
        )
        for r in range(len(t))
    ]
    assert ft.fragmentation(t) == pytest.approx(expected)
    assert max(expected) > 0  # the states are fragmented, not trivially zero


@pytest.mark.parametrize("sized", [False, True], ids=["fgd", "sized"])
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(
    "ask",
    [
        PodAsk(GpuAsk.fraction(250), 2000, 4000),
        PodAsk(GpuAsk.fraction(600), 1000, 1000),
        PodAsk(GpuAsk.whole(1), 8000, 16000),
        PodAsk(GpuAsk.whole(2), 0, 0),
        PodAsk(GpuAsk(), 12000, 24000),
    ],
    ids=["share250", "share600", "whole1", "whole2", "cpu-only"],
)
def test_increase_equals_the_difference_of_definitions(seed: int, ask: PodAsk, sized: bool) -> None:
    t = random_state(np.random.default_rng(100 + seed))
    policy = MusterPolicy(RANDOM_MIX) if sized else FgdPolicy(RANDOM_MIX)
    assert policy.sized == sized
    inc = policy.increase(t, ask)
    feasible = t.feasible(ask)
    assert np.isfinite(inc.by_row).tolist() == feasible.tolist()

    def frag(u: GpuTable, r: int) -> float:
        node = u.node(r)
        cpu, memory = int(u.cpu_free[r]), int(u.mem_free[r])
        return fragmentation(
            node.free, node.model, RANDOM_MIX, cpu_free=cpu, memory_free=memory, sized=sized
        )

    for r in np.flatnonzero(feasible):
        options = t.choices(int(r), ask.gpu)
        for devices in options:
            after = t.copy()
            after.apply(int(r), ask, devices)
            want = frag(after, int(r)) - frag(t, int(r))
            got = inc.by_device[r, devices[0]] if inc.by_device is not None else inc.by_row[r]
            assert got == pytest.approx(want, abs=1e-6)


def test_muster_sends_cpu_hungry_pods_where_cpu_is_plentiful() -> None:
    # Two 8-GPU nodes: n0 with 96 cores (12 per GPU, what the workload needs), n1 with 200.
    # A pod without GPUs but with 40 cores: on n0 it would starve 3 GPUs of cpu.
    workload = [PodAsk(GpuAsk.whole(1), cpu=12_000, memory=1000)] * 9 + [
        PodAsk(cpu=12_000, memory=1000)
    ]
    mix = WorkloadMix.of(workload)
    t = GpuTable(["n0", "n1"], [8, 8], ["V100"] * 2, [96_000, 200_000], [10**6, 10**6])
    hungry = PodAsk(cpu=40_000, memory=1000)
    # FGD sees no fragmentation either way (12 cores are left for the next task on both)
    # and takes the first node; Muster sees n0's GPUs left without cpu.
    assert run(FgdPolicy(mix), t.copy(), [hungry]) == ["n0"]
    assert run(MusterPolicy(mix), t.copy(), [hungry]) == ["n1"]
    assert run(MusterPolicy(mix, balance=0), t.copy(), [hungry]) == ["n0"]
    # a GPU pod with the workload's shape costs no stranding: FGD's choice stands
    assert run(MusterPolicy(mix), t.copy(), [workload[0]]) == ["n0"]


def test_packing_decides_between_equals() -> None:
    only_whole = WorkloadMix.of([ONE])  # any partly used device is equally lost to it
    # a whole GPU from an idle node or from a half-used one: equal to both; the first row
    # wins (the table's order: random in the experiment) unless node packing is asked for
    t = table([2, 2])
    t.apply(1, ONE)
    assert run(FgdPolicy(only_whole), t.copy(), [ONE]) == ["n0"]
    assert run(MusterPolicy(only_whole), t.copy(), [ONE]) == ["n0"]
    assert run(MusterPolicy(only_whole, node_pack=0.001), t.copy(), [ONE]) == ["n1"]
    # a share on a device with 800 or 600 free: FGD takes the lower index, Muster the fuller
    t = table([3])
    t.apply(0, PodAsk(GpuAsk.fraction(200)), (1,))
    t.apply(0, PodAsk(GpuAsk.fraction(400)), (2,))
    assert place(FgdPolicy(only_whole), t.copy(), HALF) == (0, (1,))
    assert place(MusterPolicy(only_whole), t.copy(), HALF) == (0, (2,))


@pytest.mark.parametrize(
    "policy",
    [
        RandomPolicy(np.random.default_rng(0)),
        BestFitPolicy(),
        GpuPackingPolicy(),
        FgdPolicy(MIX),
        MusterPolicy(MIX),
    ],
    ids=lambda p: p.name,
)
def test_every_policy_places_only_where_the_pod_fits(policy: PlacementPolicy) -> None:
    t = GpuTable(
        ["small", "t4", "a100"], [1, 2, 8], ["V100", "T4", "A100"], [2000] * 3, [10**6] * 3
    )
    asks = [
        PodAsk(GpuAsk.whole(2), cpu=1000),  # only t4 or a100
        PodAsk(GpuAsk.fraction(300, models={"V100"}), cpu=1000),  # only small
        PodAsk(GpuAsk.fraction(800, models={"V100"}), cpu=1000),  # small has 700 left: none
        PodAsk(GpuAsk.whole(8), cpu=1000),  # a100 (if still idle)
        PodAsk(cpu=5000),  # no node has 5 cores
    ]
    went = run(policy, t, asks)
    assert went[0] in ("t4", "a100")
    assert went[1] == "small"
    assert went[2] is None
    assert went[3] == ("a100" if went[0] == "t4" else None)
    assert went[4] is None
    assert t.free.min() >= 0 and t.cpu_free.min() >= 0


def test_mix_popularity() -> None:
    a, b = PodAsk(GpuAsk.fraction(500), 1000, 10), PodAsk(GpuAsk.whole(1), 2000, 20)
    cpu_only = PodAsk(cpu=3000, memory=30)
    mix = WorkloadMix.of([a, a, a, b, cpu_only])
    assert mix.classes[0] == TaskClass(1, 500, 1000, 10)
    assert mix.weights == pytest.approx((0.6, 0.2, 0.2))
    assert len(WorkloadMix.of([a, a, b, cpu_only], gpu_only=True).classes) == 2
    merged = WorkloadMix.of([a, PodAsk(GpuAsk.fraction(500), 1000, 99)], memory=False)
    assert merged.classes == (TaskClass(1, 500, 1000, 0),)


def test_recent_mix_forgets_old_asks() -> None:
    recent = RecentMix(window=2, every=1)
    assert recent() == WorkloadMix()
    for ask in (HALF, ONE, ONE):
        recent.observe(ask)
    assert recent() == WorkloadMix.of([ONE, ONE])
    policy = FgdPolicy(recent)
    t = table([1])
    first = policy.frag_table(t)
    assert policy.frag_table(t) is first  # compiled once while the mix is unchanged
    recent.observe(HALF)
    assert policy.frag_table(t) is not first


def test_recent_mix_refreshes_on_a_new_class_and_every_so_many_asks() -> None:
    recent = RecentMix(window=10, every=3)
    recent.observe(HALF)
    assert recent() == WorkloadMix.of([HALF])  # an empty mix is filled at once
    recent.observe(ONE)
    assert recent() == WorkloadMix.of([HALF, ONE])  # a class the mix lacks: at once
    recent.observe(ONE)
    recent.observe(ONE)
    assert recent() == WorkloadMix.of([HALF, ONE])  # two more of known classes: not yet
    recent.observe(ONE)
    assert recent() == WorkloadMix.of([HALF, ONE, ONE, ONE, ONE])  # three: refreshed


def test_recent_mix_refreshes_often_while_it_has_seen_few_asks() -> None:
    # every=100 alone would score the first hundred pods against the first two asks' mix
    recent = RecentMix(every=100)
    recent.observe(HALF)
    recent.observe(ONE)
    refreshed = 0
    for _ in range(60):
        before = recent()
        recent.observe(ONE)
        refreshed += recent() is not before
    assert 3 <= refreshed <= 6  # after 2, 4, 8, 16, 32 new asks
    assert recent().weights[recent().classes.index(TaskClass.of(HALF))] < 0.05
    cpu_only = RecentMix(gpu_only=True)
    cpu_only.observe(PodAsk(cpu=1000))
    first = cpu_only()
    cpu_only.observe(PodAsk(cpu=1000))  # never in a GPU-only mix: not a new class
    assert cpu_only() is first and first == WorkloadMix()


def test_empty_mix_scores_without_fragmentation() -> None:
    t = table([2, 2])
    pick = place(MusterPolicy(WorkloadMix()), t, HALF)
    assert pick is not None and t.free_total.sum() == 4 * MILLI - 500


def test_sized_fragmentation_counts_what_the_mix_would_leave_idle() -> None:
    # an idle device and 470-milli tasks: FGD sees no fragmentation (the task fits), the
    # sized measure sees the 60 milli that two such tasks leave
    mix = WorkloadMix.of([PodAsk(GpuAsk.fraction(470))])
    idle = {"cpu_free": 10, "memory_free": 10}
    assert fragmentation([MILLI], "V100", mix, **idle) == 0
    assert fragmentation([MILLI], "V100", mix, **idle, sized=True) == 60
    # a 190 gap and 160 tasks: 30 left idle; 190 and 210: 30 + 50
    small = WorkloadMix.of([PodAsk(GpuAsk.fraction(160))])
    assert fragmentation([190], "V100", small, **idle, sized=True) == 30
    assert fragmentation([190, 210], "V100", small, **idle, sized=True) == 80
    # half the tasks take 300, half 600: from 1000, 300 (p=.5) then 300/600 ... in expectation
    two = WorkloadMix.of([PodAsk(GpuAsk.fraction(300)), PodAsk(GpuAsk.fraction(600))])
    fill_400 = 0.5 * 300  # then 100 left: nothing fits
    fill_700 = 0.5 * (300 + fill_400) + 0.5 * 600
    fill_1000 = 0.5 * (300 + fill_700) + 0.5 * (600 + fill_400)
    assert fragmentation([MILLI], "V100", two, **idle, sized=True) == pytest.approx(
        MILLI - fill_1000
    )
    # tasks without GPUs use none of it; a whole-GPU task takes its devices
    mixed = WorkloadMix.of([PodAsk(cpu=1), PodAsk(GpuAsk.whole(2))])
    assert fragmentation([MILLI] * 3, "V100", mixed, **idle, sized=True) == 3000 - 0.5 * 2000
    assert fragmentation([MILLI] * 3, "V100", mixed, **idle) == 0


def test_equal_shares_fill_one_device_before_opening_the_next() -> None:
    quarter = PodAsk(GpuAsk.fraction(250), cpu=1000, memory=1000)
    for policy in (FgdPolicy(WorkloadMix.of([quarter])), default_policy()):
        t = table([2])
        devices = []
        for _ in range(5):
            if isinstance(policy, LiveGpuPolicy):
                policy.observe(quarter)
            pick = place(policy, t, quarter)
            assert pick is not None
            devices.append(pick.devices)
        assert devices == [(0,)] * 4 + [(1,)]


def test_stranding_uses_the_gpu_pods_cpu_and_memory_per_gpu() -> None:
    # pods without GPUs can run anywhere: they do not raise what a node must keep per GPU
    mix = WorkloadMix.of([PodAsk(GpuAsk.whole(1), cpu=8000, memory=100), PodAsk(cpu=64_000)])
    ft = FragTable(mix, ["V100"], 8)
    assert ft.per_gpu == (8.0, 0.1)
    # a 64-core cpu-only pod on a node with 8 GPUs and 72 cores would leave 7 GPUs unfed
    t = GpuTable(["dense", "roomy"], [8, 8], ["V100"] * 2, [72_000, 200_000], [10**6] * 2)
    assert run(MusterPolicy(mix), t, [PodAsk(cpu=64_000)]) == ["roomy"]


def test_default_policy_is_the_live_muster_policy() -> None:
    live = default_policy()
    assert isinstance(live, LiveGpuPolicy) and live.name == "muster-default"
    assert isinstance(live.mix, RecentMix) and isinstance(live.policy, MusterPolicy)
    assert live.policy.sized and live.mix() == WorkloadMix()
    assert default_policy().mix is not live.mix  # each caller learns its own mix
    t = table([2, 1])
    live.observe(HALF)
    assert live.mix() == WorkloadMix.of([HALF])  # the pod is in the mix it is ranked against
    assert np.isfinite(live.rank(t, HALF).cost).all()
    assert live.rank(t, HALF).device is not None


@pytest.mark.parametrize("fraction", [None, "0.5"], ids=["whole GPU", "GPU share"])
def test_a_patched_live_ranking_is_the_ranking_made_afresh(fraction: str | None) -> None:
    """The live placement re-ranks only the nodes a bind or a hold changed: its answer equals
    the policy's ranking of the whole cluster on every view, devices included."""
    import random

    from app.core.policies.fgd import default_policy
    from app.core.policies.gpuplacement import GpuPlacement, node_table
    from app.core.state.cache import ClusterCache
    from tests.factories import node, pod

    rng = random.Random(3)
    cache = ClusterCache()
    cache.upsert_nodes([node(f"n{i}", gpus=(8, 4, 2)[i % 3], cpu="64") for i in range(40)])
    live = GpuPlacement(default_policy())
    annotations = {"muster.io/gpu-fraction": fraction} if fraction else None
    asking = pod("asking", gpu=0 if fraction else 1, annotations=annotations)
    live.observe(asking)
    placed: list[str] = []
    for step in range(60):
        if placed and rng.random() < 0.3:
            cache.delete_pod(placed.pop(rng.randrange(len(placed))))
        else:
            running = pod(f"r{step}", gpu=rng.choice([1, 2]), cpu="4", node=f"n{rng.randrange(40)}",
                          phase="Running")  # fmt: skip
            cache.upsert_pod(running)
            placed.append(running.uid)
        view = cache.view()
        got = live.rank(view, asking)
        want = live.policy.rank(node_table(view), PodAsk.of(asking))  # the whole table afresh
        assert np.array_equal(got.cost, want.cost), step
        assert (got.device is None) == (want.device is None)
        if want.device is not None:
            assert got.device is not None
            finite = np.isfinite(want.cost)
            assert np.array_equal(got.device[finite], want.device[finite]), step
