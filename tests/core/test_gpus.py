"""Per-device GPU accounting as scenario tables: shares never exceed a device, whole GPUs need
fully free devices, GPU model constraints, the one (NVLink- and NUMA-aware) choice of devices
in values and tables alike."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from app.core.gpu.ask import (
    MILLI,
    GpuAsk,
    GpuOvercommit,
    PodAsk,
    fits,
    fits_mask,
    parse_gpu_spec,
    usable,
)
from app.core.gpu.links import GpuTopology, choose, choose_devices, default_topology
from app.core.gpu.table import GpuTable, NodeGpus
from app.core.model.clusterfile import parse_openb_csv

WHOLE = GpuAsk.whole
SHARE = GpuAsk.fraction


@dataclass
class FitCase:
    name: str
    free: tuple[int, ...]
    ask: GpuAsk
    fits: bool
    model: str = "V100"


FIT_CASES = [
    FitCase("share fits a device with exactly enough", (1000, 300), SHARE(300), True),
    FitCase("shares do not add up across devices", (600, 600), SHARE(700), False),
    FitCase("share fits a partly used device", (0, 450), SHARE(450), True),
    FitCase("whole GPUs need fully free devices", (1000, 999, 1000), WHOLE(2), True),
    FitCase("a partly used device is not whole", (1000, 999), WHOLE(2), False),
    FitCase("1000 milli is one whole GPU", (999, 999), GpuAsk(1, 1000), False),
    FitCase("no GPU asked fits a GPU-less node", (), WHOLE(0), True),
    FitCase("wrong model", (1000,), SHARE(100, models={"A100"}), False),
    FitCase("allowed model", (1000,), WHOLE(1, models={"A100", "V100"}), True),
    FitCase("no model asked: any", (1000,), WHOLE(1), True),
]


@pytest.mark.parametrize("case", FIT_CASES, ids=lambda c: c.name)
def test_fits(case: FitCase) -> None:
    node = NodeGpus(case.free, case.model)
    assert node.fits(case.ask) is case.fits
    # the one rule, scalar and vectorised (the model is the caller's separate check)
    model_ok = case.ask.allows(case.model)
    assert (model_ok and fits(case.free, case.ask)) is case.fits
    rows = np.array([list(case.free) or [0]])
    assert (model_ok and bool(fits_mask(rows, case.ask)[0])) is case.fits
    assert bool(node.choices(case.ask)) is case.fits
    table = GpuTable(["n"], [len(case.free)], [case.model], [10_000], [10_000])
    for d, f in enumerate(case.free):
        if f < MILLI:
            table.apply(0, PodAsk(GpuAsk(1, MILLI - f)), (d,))
    assert table.node(0) == node
    assert bool(table.feasible(PodAsk(case.ask))[0]) is case.fits


@pytest.mark.parametrize(
    ("free", "ask", "choices"),
    [
        ((1000, 300, 500), SHARE(250), [(1,), (2,), (0,)]),  # tightest first
        ((500, 1000, 500), SHARE(500), [(0,), (2,), (1,)]),  # equals: lower index first
        ((1000, 0, 1000, 1000), WHOLE(2), [(0, 2)]),  # whole: one set, lowest free
        ((700,), SHARE(800), []),
        ((1000,), WHOLE(0), [()]),
    ],
)
def test_device_choices(free: tuple[int, ...], ask: GpuAsk, choices: list[tuple[int, ...]]) -> None:
    assert NodeGpus(free).choices(ask) == choices


def test_shares_fill_a_device_exactly_and_never_beyond() -> None:
    node = NodeGpus.idle(1)
    for milli in (470, 320, 160, 50):
        node, devices = node.apply(SHARE(milli))
        assert devices == (0,)
    assert node.free == (0,)
    assert not node.fits(SHARE(1))
    with pytest.raises(GpuOvercommit):
        node.apply(SHARE(1), (0,))


@pytest.mark.parametrize(
    ("free", "ask", "devices"),
    [
        ((1000, 999), WHOLE(1), (1,)),  # partly used device given to a whole-GPU ask
        ((1000, 1000), WHOLE(2), (0, 0)),  # the same device twice
        ((1000, 1000), WHOLE(2), (0,)),  # too few devices
        ((1000,), WHOLE(1), (3,)),  # no such device
        ((200,), SHARE(300), (0,)),  # not enough room
    ],
)
def test_apply_refuses_overcommit(
    free: tuple[int, ...], ask: GpuAsk, devices: tuple[int, ...]
) -> None:
    with pytest.raises(GpuOvercommit):
        NodeGpus(free).apply(ask, devices)


def test_release_refuses_to_free_past_a_device() -> None:
    node, devices = NodeGpus.idle(2).apply(SHARE(400))
    assert node.release(SHARE(400), devices) == NodeGpus.idle(2)
    with pytest.raises(GpuOvercommit):
        node.release(SHARE(700), devices)
    with pytest.raises(GpuOvercommit):
        node.release(WHOLE(1), (1,))  # device 1 was never taken


def test_model_constraint_holds_for_explicit_devices() -> None:
    with pytest.raises(GpuOvercommit):
        NodeGpus.idle(1, "T4").apply(WHOLE(1, models={"A100"}), (0,))


@dataclass
class LinkCase:
    name: str
    free: tuple[int, ...]
    count: int
    nvlink: list[set[int]]
    expected: tuple[int, ...] | None


def flat(devices: int, nvlink: list[set[int]]) -> GpuTopology:
    """``devices`` GPUs on one NUMA node with these NVLink groups."""
    return GpuTopology(devices, (0,) * devices, tuple(frozenset(g) for g in nvlink))


PAIRS = [{0, 1}, {2, 3}]  # a PCIe box with NVLink bridges
LINK_CASES = [
    LinkCase("2 GPUs take an NVLink pair", (1000,) * 4, 2, PAIRS, (0, 1)),
    LinkCase("2 GPUs skip a broken pair", (0, 1000, 1000, 1000), 2, PAIRS, (2, 3)),
    LinkCase("1 GPU completes a broken pair", (0, 1000, 1000, 1000), 1, PAIRS, (1,)),
    LinkCase("1 GPU prefers the smaller group", (1000,) * 5, 1, [{0, 1, 2}, {3, 4}], (3,)),
    LinkCase("3 GPUs: a whole pair plus one", (1000,) * 4, 3, PAIRS, (0, 1, 2)),
    LinkCase("3 GPUs: the bigger group first", (0, 1000, 1000, 1000), 3, PAIRS, (1, 2, 3)),
    LinkCase("no groups: lowest indices", (1000, 0, 1000, 1000), 2, [], (0, 2)),
    LinkCase("NVSwitch: one group", (1000,) * 8, 4, [set(range(8))], (0, 1, 2, 3)),
    LinkCase("too few free", (1000, 0, 0, 500), 2, PAIRS, None),
]


@pytest.mark.parametrize("case", LINK_CASES, ids=lambda c: c.name)
def test_whole_gpus_take_the_best_connected_devices(case: LinkCase) -> None:
    topo = flat(len(case.free), case.nvlink)
    assert choose_devices(case.free, case.count, topo) == case.expected
    assert choose(case.free, WHOLE(case.count), topo) == case.expected
    if case.expected is not None:
        node = NodeGpus(case.free, topology=topo)
        assert node.apply(WHOLE(case.count))[1] == case.expected
        table = GpuTable(["n"], [len(case.free)], [""], [1], [1], [topo])
        for d, f in enumerate(case.free):
            if f < MILLI:
                table.apply(0, PodAsk(GpuAsk(1, MILLI - f)), (d,))
        assert table.apply(0, PodAsk(WHOLE(case.count))) == case.expected


def test_tables_use_each_products_default_topology() -> None:
    """A table row knows its node's topology as the live path does: an 8-GPU box without an
    annotation is two NUMA nodes of 4, so one GPU goes to the NUMA node with fewer free."""
    nodes = parse_openb_csv("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,G2\n")
    table = GpuTable.from_nodes(nodes)
    assert table.topology[0] == default_topology("G2", 8)
    assert table.topology[0].numa == (0, 0, 0, 0, 1, 1, 1, 1)
    assert table.apply(0, PodAsk(SHARE(500)), (1,)) == (1,)
    assert table.apply(0, PodAsk(WHOLE(1))) == (0,)  # NUMA 0 has fewer fully free devices
    assert table.apply(0, PodAsk(WHOLE(4))) == (4, 5, 6, 7)  # a whole NUMA node
    assert NodeGpus.idle(8, "G2") == NodeGpus.idle(8, "G2", default_topology("G2", 8))


def test_usable_is_what_take_accepts() -> None:
    free = np.array([1000, 600, 0])
    assert usable(free, SHARE(600), (1,)) and not usable(free, SHARE(601), (1,))
    assert usable(free, WHOLE(1), (0,)) and not usable(free, WHOLE(1), (1,))
    assert not usable(free, WHOLE(2), (0, 0)) and not usable(free, SHARE(1), (3,))


@pytest.mark.parametrize(("count", "milli"), [(-1, 1000), (0, 500), (1, 0), (1, 1001), (2, 500)])
def test_bad_asks_are_rejected(count: int, milli: int) -> None:
    with pytest.raises(ValueError):
        GpuAsk(count, milli)


def test_openb_rows() -> None:
    assert GpuAsk.from_openb(1, 460, "") == SHARE(460)
    assert GpuAsk.from_openb(8, 1000, "V100M16|V100M32").models == {"V100M16", "V100M32"}
    assert GpuAsk.from_openb(0, 0, None) == WHOLE(0)
    assert parse_gpu_spec(" A10 | T4 |") == {"A10", "T4"}


NODES_CSV = """sn,cpu_milli,memory_mib,gpu,model
n0,64000,262144,8,V100M16
n1,32000,131072,2,T4
n2,16000,65536,0,
"""


def test_table_from_openb_nodes() -> None:
    table = GpuTable.from_nodes(parse_openb_csv(NODES_CSV))
    assert table.names == ["n0", "n1", "n2"]
    assert table.devices.tolist() == [8, 2, 0]
    assert table.free_total.tolist() == [8000, 2000, 0]
    assert table.cpu_free.tolist() == [64000, 32000, 16000]
    assert table.mem_free.tolist() == [262144, 131072, 65536]
    assert [table.model_names[m] for m in table.model] == ["V100M16", "T4", ""]
    assert table.gpu_capacity == 10_000
    ask = PodAsk(SHARE(500, models={"T4"}), cpu=1000, memory=1024)
    assert table.feasible(ask).tolist() == [False, True, False]
    assert table.feasible(PodAsk(cpu=20_000)).tolist() == [True, True, False]


def test_table_random_churn_keeps_every_device_in_bounds() -> None:
    rng = np.random.default_rng(7)
    table = GpuTable(
        [f"n{i}" for i in range(5)], [8, 4, 2, 1, 8], ["A"] * 5, [10**9] * 5, [10**9] * 5
    )
    placed: list[tuple[int, PodAsk, tuple[int, ...]]] = []
    for _ in range(400):
        if placed and rng.random() < 0.3:
            row, ask, devices = placed.pop(int(rng.integers(len(placed))))
            table.release(row, ask, devices)
        else:
            gpu = (
                SHARE(int(rng.integers(1, 1000)))
                if rng.random() < 0.7
                else WHOLE(int(rng.integers(1, 4)))
            )
            ask = PodAsk(gpu, cpu=1)
            rows = np.flatnonzero(table.feasible(ask))
            if len(rows) == 0:
                continue
            row = int(rng.choice(rows))
            placed.append((row, ask, table.apply(row, ask)))
        assert table.free.min() >= 0 and table.free.max() <= MILLI
        assert (table.free[np.arange(8) >= table.devices[:, None]] == 0).all()
        assert table.free_total.tolist() == table.free.sum(axis=1).tolist()
        assert table.free_max.tolist() == table.free.max(axis=1).tolist()
        assert table.full.tolist() == (table.free == MILLI).sum(axis=1).tolist()
        used = sum(ask.gpu.total for _, ask, _ in placed)
        assert table.gpu_allocated == used


def test_table_apply_checks_cpu_memory_and_model() -> None:
    table = GpuTable(["a"], [1], ["T4"], [1000], [100])
    with pytest.raises(GpuOvercommit):
        table.apply(0, PodAsk(SHARE(100), cpu=2000))
    with pytest.raises(GpuOvercommit):
        table.apply(0, PodAsk(SHARE(100), memory=200))
    with pytest.raises(GpuOvercommit):
        table.apply(0, PodAsk(SHARE(100, models={"A100"})))
    assert table.free_total[0] == MILLI and table.cpu_free[0] == 1000  # nothing changed
    copy = table.copy()
    assert table.apply(0, PodAsk(SHARE(100), cpu=1000, memory=100)) == (0,)
    assert copy.free_total[0] == MILLI and copy.cpu_free[0] == 1000
    assert table.node(0) == NodeGpus((900,), "T4")
