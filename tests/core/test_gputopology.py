"""Intra-node GPU topology: the annotation, product defaults, nvidia-smi parsing, device choice."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.core.gpu.links import (
    GpuTopology,
    choose_devices,
    default_topology,
    from_nvidia_smi,
    nvlink_groups,
    parse_topology,
    to_annotation,
    topology_of,
)
from app.core.model.errors import InvalidInput
from app.core.model.labels import GPU_TOPOLOGY
from app.core.model.values import GPU_PRODUCT_LABEL, Node, Resources

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"
F = 1000  # a fully free device
HALVES = (0, 0, 0, 0, 1, 1, 1, 1)


def topo(
    devices: int, groups: Sequence[Sequence[int]] = (), numa: tuple[int, ...] | None = None
) -> GpuTopology:
    """A topology value: ``groups`` of NVLink, NUMA all 0 unless given."""
    return GpuTopology(devices, numa or (0,) * devices, tuple(frozenset(g) for g in groups))


NVSWITCH = topo(8, [list(range(8))], HALVES)
NVSWITCH_ONE_NUMA = topo(8, [list(range(8))])
PAIRS = topo(8, [[0, 1], [2, 3], [4, 5], [6, 7]], HALVES)
QUADS = topo(8, [[0, 1, 2, 3], [4, 5, 6, 7]], HALVES)
PLAIN = topo(4)


def busy(*devices: int, n: int = 8, used: int = F) -> list[int]:
    """A free vector of ``n`` devices with ``used`` milli taken on ``devices``."""
    return [F - used if d in devices else F for d in range(n)]


# -- the annotation ----------------------------------------------------------------------------

ROUND_TRIP = [
    topo(0),
    PLAIN,
    NVSWITCH,
    PAIRS,
    QUADS,
    topo(4, [[0, 1], [2, 3]], (0, 0, 8, 8)),
]


@pytest.mark.parametrize("value", ROUND_TRIP, ids=lambda t: to_annotation(t))
def test_annotation_round_trip(value: GpuTopology) -> None:
    text = to_annotation(value)
    assert parse_topology(text) == replace(value, source="annotation")
    assert to_annotation(parse_topology(text)) == text
    assert " " not in text  # compact


def test_annotation_format_is_the_documented_one() -> None:
    assert to_annotation(topo(4, [[2, 3], [0, 1]], (0, 0, 1, 1))) == (
        '{"version":1,"gpus":[{"index":0,"numa":0},{"index":1,"numa":0},'
        '{"index":2,"numa":1},{"index":3,"numa":1}],"nvlink":[[0,1],[2,3]]}'
    )


def test_annotation_readers_are_lenient_where_documented() -> None:
    text = json.dumps(
        {
            "version": 1,
            "gpus": [{"index": 1, "numa": 1}, {"index": 0}],  # any order; numa defaults to 0
            "future": {"ignored": True},
        }
    )
    assert parse_topology(text) == GpuTopology(2, (0, 1), (), "annotation")
    assert parse_topology('{"version":1,"gpus":[],"nvlink":null}') == GpuTopology(
        0, (), (), "annotation"
    )


def gpus(n: int) -> list[dict[str, int]]:
    return [{"index": d, "numa": 0} for d in range(n)]


def doc(**fields: object) -> str:
    return json.dumps({"version": 1, "gpus": gpus(4), **fields})


BAD_ANNOTATIONS = [
    ("nope", "not JSON: Expecting value: line 1 column 1 (char 0)"),
    ("[1]", "expected a JSON object, got list"),
    ('{"gpus": []}', "version: missing"),
    ('{"version": 2, "gpus": []}', "version: unsupported version 2 (this reader knows 1)"),
    ('{"version": true, "gpus": []}', "version: unsupported version True (this reader knows 1)"),
    ('{"version": "1", "gpus": []}', "version: unsupported version '1' (this reader knows 1)"),
    ('{"version": 1}', "gpus: missing"),
    ('{"version": 1, "gpus": {}}', "gpus: expected a list, got dict"),
    ('{"version": 1, "gpus": [5]}', "gpus[0]: expected an object, got int"),
    ('{"version": 1, "gpus": [{"index": 0}, {"numa": 0}]}', "gpus[1].index: missing"),
    (
        '{"version": 1, "gpus": [{"index": "0"}]}',
        "gpus[0].index: expected an integer >= 0, got '0'",
    ),
    ('{"version": 1, "gpus": [{"index": -1}]}', "gpus[0].index: expected an integer >= 0, got -1"),
    (
        '{"version": 1, "gpus": [{"index": false}]}',
        "gpus[0].index: expected an integer >= 0, got False",
    ),
    (
        json.dumps({"version": 1, "gpus": [*gpus(3), {"index": 2}]}),
        "gpus[3].index: duplicate index 2",
    ),
    (
        '{"version": 1, "gpus": [{"index": 0}, {"index": 5}]}',
        "gpus[1].index: 5 out of range: 2 GPUs are 0..1",
    ),
    (
        '{"version": 1, "gpus": [{"index": 0, "numa": 1.5}]}',
        "gpus[0].numa: expected an integer >= 0, got 1.5",
    ),
    (doc(nvlink="0,1"), "nvlink: expected a list, got str"),
    (doc(nvlink=0), "nvlink: expected a list, got int"),
    (doc(nvlink=[5]), "nvlink[0]: expected a list of GPU indices, got int"),
    (doc(nvlink=[[0, 1], [2]]), "nvlink[1]: a group needs at least 2 GPUs"),
    (doc(nvlink=[[0, 9]]), "nvlink[0][1]: no GPU 9 (indices are 0..3)"),
    (doc(nvlink=[[0, "1"]]), "nvlink[0][1]: expected an integer >= 0, got '1'"),
    (doc(nvlink=[[0, 0]]), "nvlink[0][1]: GPU 0 is listed twice"),
    (doc(nvlink=[[0, 1], [1, 2]]), "nvlink[1][0]: GPU 1 is already in nvlink[0]"),
]


@pytest.mark.parametrize(("text", "message"), BAD_ANNOTATIONS, ids=[m for _, m in BAD_ANNOTATIONS])
def test_bad_annotations_name_the_field(text: str, message: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        parse_topology(text)
    assert str(exc.value) == message
    assert isinstance(exc.value, ValueError)


def test_topology_values_check_themselves() -> None:
    with pytest.raises(ValueError, match="NUMA"):
        GpuTopology(2, (0,))
    with pytest.raises(ValueError, match="bad NVLink group"):
        topo(4, [[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="bad NVLink group"):
        topo(2, [[1, 2]])
    assert topo(4, [[2, 3], [0, 1]]).nvlink == (frozenset({0, 1}), frozenset({2, 3}))
    assert (PAIRS.group_of(5), PAIRS.group_of(8), PLAIN.group_of(0)) == (2, None, None)


# -- per-product defaults ----------------------------------------------------------------------

ALL8 = [list(range(8))]
DEFAULTS = [
    # product label (nvidia.com/gpu.product), GPUs, NVLink groups, NUMA
    ("NVIDIA-A100-SXM4-80GB", 8, ALL8, HALVES),
    ("NVIDIA-A100-SXM4-40GB", 4, [[0, 1, 2, 3]], (0, 0, 0, 0)),
    ("NVIDIA-H100-80GB-HBM3", 8, ALL8, HALVES),
    ("NVIDIA-H100-SXM5-80GB", 8, ALL8, HALVES),
    ("NVIDIA-H200", 8, ALL8, HALVES),
    ("NVIDIA-B200", 8, ALL8, HALVES),
    ("NVIDIA-DGX-H100", 8, ALL8, HALVES),
    ("Tesla-V100-SXM2-32GB", 8, [[0, 1, 2, 3], [4, 5, 6, 7]], HALVES),
    ("Tesla-V100-SXM2-16GB", 4, [[0, 1, 2, 3]], (0, 0, 0, 0)),
    ("NVIDIA-H100-NVL", 4, [[0, 1], [2, 3]], (0, 0, 0, 0)),
    ("NVIDIA-A100-PCIE-40GB", 8, [], HALVES),
    ("NVIDIA-H100-PCIe", 2, [], (0, 0)),
    ("Tesla-V100-PCIE-32GB", 4, [], (0, 0, 0, 0)),
    ("Tesla-T4", 4, [], (0, 0, 0, 0)),
    ("NVIDIA-A10G", 1, [], (0,)),
    ("NVIDIA-L4", 8, [], HALVES),
    ("NVIDIA-L40S", 4, [], (0, 0, 0, 0)),
    ("NVIDIA-GeForce-RTX-4090", 8, [], HALVES),
    ("Some-Future-GPU", 2, [], (0, 0)),
    ("NVIDIA-A100-SXM4-80GB", 1, [], (0,)),
    ("NVIDIA-H100-80GB-HBM3", 0, [], ()),
]


@pytest.mark.parametrize(("product", "devices", "groups", "numa"), DEFAULTS)
def test_product_defaults(
    product: str, devices: int, groups: list[list[int]], numa: tuple[int, ...]
) -> None:
    assert default_topology(product, devices) == GpuTopology(
        devices, numa, tuple(frozenset(g) for g in groups), f"default:{product}"
    )


def test_no_product_label_means_nothing_known() -> None:
    assert default_topology("", 4) == GpuTopology(4, (0, 0, 0, 0), (), "none")


def node(gpus: int = 8, product: str = "", annotation: str | None = None) -> Node:
    return Node(
        "n1",
        Resources(gpu=gpus * 1000, cpu=64_000),
        labels={GPU_PRODUCT_LABEL: product} if product else {},
        annotations={GPU_TOPOLOGY: annotation} if annotation is not None else {},
    )


PAIRS_TEXT = to_annotation(PAIRS)
TOPOLOGY_OF = [
    # gpus, product, annotation, expected topology, expected source
    (8, "NVIDIA-A100-PCIE-40GB", PAIRS_TEXT, PAIRS, "annotation"),
    (8, "", PAIRS_TEXT, PAIRS, "annotation"),
    (8, "NVIDIA-A100-SXM4-80GB", None, NVSWITCH, "default:NVIDIA-A100-SXM4-80GB"),
    (4, "", None, PLAIN, "none"),
    (
        8,
        "NVIDIA-A100-SXM4-80GB",
        "{oops",
        NVSWITCH,
        "invalid annotation: not JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1)",
    ),
    (
        8,
        "NVIDIA-H200",
        '{"version": 1, "gpus": [{"index": 0}, {"index": 0}]}',
        NVSWITCH,
        "invalid annotation: gpus[1].index: duplicate index 0",
    ),
    (4, "", PAIRS_TEXT, PLAIN, "invalid annotation: describes 8 GPUs, the node has 4"),
]


@pytest.mark.parametrize(("gpus", "product", "annotation", "expected", "source"), TOPOLOGY_OF)
def test_topology_of_a_node(
    gpus: int, product: str, annotation: str | None, expected: GpuTopology, source: str
) -> None:
    assert topology_of(node(gpus, product, annotation)) == replace(expected, source=source)


def test_topology_of_is_memoised() -> None:
    first = topology_of(node(8, "NVIDIA-H200", PAIRS_TEXT))
    assert topology_of(node(8, "NVIDIA-H200", PAIRS_TEXT)) is first


# -- choosing devices --------------------------------------------------------------------------

CHOICES = [
    # name, topology, free milli per device, GPUs asked, devices expected
    ("nvswitch: 4 of 8 free: lowest", NVSWITCH, busy(), 4, (0, 1, 2, 3)),
    ("nvswitch: 8 of 8", NVSWITCH, busy(), 8, tuple(range(8))),
    ("nvswitch, one NUMA node: lowest free", NVSWITCH_ONE_NUMA, busy(0, 2), 4, (1, 3, 4, 5)),
    ("nvswitch: 4 stay on one NUMA node", NVSWITCH, busy(1), 4, (4, 5, 6, 7)),
    ("nvswitch: 5 crowd onto one NUMA node", NVSWITCH, busy(1), 5, (0, 4, 5, 6, 7)),
    ("pairs: 2 get an NVLink pair", PAIRS, busy(), 2, (0, 1)),
    ("pairs: GPU 0 busy: [2,3], not [1,2]", PAIRS, busy(0), 2, (2, 3)),
    ("pairs: a whole free pair over a split one", PAIRS, busy(0, 3), 2, (4, 5)),
    ("pairs: partly used GPU 0 counts as busy", PAIRS, busy(0, used=250), 2, (2, 3)),
    ("pairs: 1 GPU from the pair already broken", PAIRS, busy(0), 1, (1,)),
    ("pairs: 4 stay on one NUMA node", PAIRS, busy(), 4, (0, 1, 2, 3)),
    ("pairs: 4 move to the NUMA node that has them", PAIRS, busy(1), 4, (4, 5, 6, 7)),
    ("pairs: 3 on the NUMA node they fill exactly", PAIRS, busy(4), 3, (5, 6, 7)),
    ("pairs: 4 across NUMA: whole pairs", PAIRS, busy(1, 5), 4, (2, 3, 6, 7)),
    ("pairs: 6 of 8", PAIRS, busy(), 6, (0, 1, 2, 3, 4, 5)),
    ("quads: 2 in the group with fewest free", QUADS, busy(4), 2, (5, 6)),
    ("quads: 4 in one group", QUADS, busy(), 4, (0, 1, 2, 3)),
    ("quads: 4 when each group has 3", QUADS, busy(0, 4), 4, (1, 2, 3, 5)),
    ("no topology: lowest free", PLAIN, busy(1, n=4), 2, (0, 2)),
    ("shares are never taken", PAIRS, busy(0, 1, 2, used=1), 2, (4, 5)),
    ("nothing asked", PAIRS, busy(*range(8)), 0, ()),
    ("too few fully free", PAIRS, busy(0, 1, 2, 3, 4, 5, used=500), 3, None),
    ("free vector longer than the topology", PLAIN, busy(0, n=6), 5, (1, 2, 3, 4, 5)),
]


@pytest.mark.parametrize(
    ("topology", "free", "count", "expected"), [c[1:] for c in CHOICES], ids=[c[0] for c in CHOICES]
)
def test_choose_devices(
    topology: GpuTopology, free: list[int], count: int, expected: tuple[int, ...] | None
) -> None:
    assert choose_devices(free, count, topology) == expected
    assert choose_devices(np.array(free), count, topology) == expected


def test_choose_devices_refuses_negative_counts() -> None:
    with pytest.raises(ValueError):
        choose_devices(busy(), -1, PAIRS)


def test_sixteen_gpus_without_shortcuts() -> None:
    pairs16 = topo(16, [[d, d + 1] for d in range(0, 16, 2)], (0,) * 8 + (1,) * 8)
    # No NUMA node has 8 free: four whole pairs, three of them on one node.
    assert choose_devices(busy(0, 9, n=16), 8, pairs16) == (2, 3, 4, 5, 6, 7, 10, 11)
    assert choose_devices(busy(1, n=16), 8, pairs16) == tuple(range(8, 16))
    assert choose_devices(busy(n=16), 16, topo(16, [list(range(16))])) == tuple(range(16))
    spread = topo(16, [], tuple(range(16)))  # 16 NUMA ids: the greedy fallback
    assert choose_devices(busy(3, n=16), 4, spread) == (0, 1, 2, 4)


@given(
    topology=st.sampled_from([NVSWITCH, PAIRS, QUADS, topo(8), NVSWITCH_ONE_NUMA]),
    free=st.lists(st.sampled_from([0, 300, F, F]), min_size=8, max_size=8),
    count=st.integers(0, 8),
)
def test_choices_are_sound(topology: GpuTopology, free: list[int], count: int) -> None:
    chosen = choose_devices(free, count, topology)
    idle = [d for d, f in enumerate(free) if f == F]
    if len(idle) < count:
        assert chosen is None
        return
    assert chosen is not None and len(chosen) == count
    assert list(chosen) == sorted(set(chosen)) and all(free[d] == F for d in chosen)
    fitting = [g for g in topology.nvlink if len(g & set(idle)) >= count]
    if count and fitting:
        assert any(set(chosen) <= g for g in fitting)


# -- nvidia-smi topo -m ------------------------------------------------------------------------

PARSED = [
    # sample file, GPUs, NVLink groups, NUMA per GPU
    ("b300-sxm6-nvswitch.txt", 8, ALL8, HALVES),
    ("a30-pcie-nvlink-pairs.txt", 4, [[0, 1], [2, 3]], (0, 0, 1, 1)),
    ("v100-sxm2-ac922-pairs.txt", 4, [[0, 1], [2, 3]], (0, 0, 8, 8)),
    ("v100-sxm2-dgx1-cube-mesh.txt", 8, [[0, 1, 2, 3], [4, 5, 6, 7]], HALVES),
]


@pytest.mark.parametrize(("sample", "devices", "groups", "numa"), PARSED)
def test_real_nvidia_smi_output(
    sample: str, devices: int, groups: list[list[int]], numa: tuple[int, ...]
) -> None:
    parsed = from_nvidia_smi((SAMPLES / sample).read_text())
    assert parsed == GpuTopology(devices, numa, tuple(frozenset(g) for g in groups), "nvidia-smi")
    assert parse_topology(to_annotation(parsed)) == replace(parsed, source="annotation")


def test_every_sample_is_tested() -> None:
    assert {p.name for p in SAMPLES.glob("*.txt")} == {row[0] for row in PARSED}


def test_ansi_codes_preamble_and_crlf_are_tolerated() -> None:
    text = (SAMPLES / "b300-sxm6-nvswitch.txt").read_text()
    expected = from_nvidia_smi(text)
    coloured = (
        text.replace("[4m", "\x1b[4m")
        .replace("[0m", "\x1b[0m")
        .replace("NV18", "\x1b[32mNV18\x1b[0m")
    )
    assert from_nvidia_smi(coloured) == expected
    assert from_nvidia_smi("$ nvidia-smi topo -m\nGPU Topology:\n" + text) == expected
    assert from_nvidia_smi(text.replace("\n", "\r\n")) == expected


def matrix(
    *rows: str, header: str = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
) -> str:
    """A small ``nvidia-smi topo -m`` matrix: ``rows`` with ``|`` for tabs."""
    return "\n".join([header, *(r.replace("|", "\t") for r in rows), "", "Legend:", ""])


def test_missing_cpu_affinity_and_unknown_numa() -> None:
    text = matrix(
        "GPU0| X |NV2|SYS|0-7|0||N/A",
        "GPU1|NV2| X |SYS|||N/A",  # no CPU Affinity, NUMA Affinity N/A
        "GPU2|SYS|SYS| X ||1||N/A",  # no CPU Affinity
    )
    assert from_nvidia_smi(text) == GpuTopology(3, (0, 0, 1), (frozenset({0, 1}),), "nvidia-smi")


OK_ROWS = ("GPU0| X |NV4|SYS|0-7|0", "GPU1|NV4| X |SYS|0-7|0", "GPU2|SYS|SYS| X |8-15|1")
TWO_COLUMNS = "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity"
BAD_OUTPUT = [
    ("", "no topology matrix: expected a header row starting with GPU0"),
    (
        "nvidia-smi: command not found\n",
        "no topology matrix: expected a header row starting with GPU0",
    ),
    (
        matrix(header="\tGPU0\tGPU2\tCPU Affinity"),
        "header: GPU columns are GPU0 GPU2, expected GPU0..GPU1",
    ),
    (matrix(*OK_ROWS[:2], header=TWO_COLUMNS), "no row for GPU2"),
    (matrix(*OK_ROWS, OK_ROWS[0], header=TWO_COLUMNS), "GPU0 row: unexpected (header has 3 GPUs)"),
    (matrix("GPU0| X |NV4", header=TWO_COLUMNS), "GPU0 row: 2 links for 3 columns"),
    (
        matrix("GPU0| X |NV4|SYS|0-7|0|N/A|extra", header=TWO_COLUMNS),
        "GPU0 row: 4 values after the links, header has 2",
    ),
    (
        matrix("GPU0| X |NV4|FOO|0-7|0", *OK_ROWS[1:], header=TWO_COLUMNS),
        "GPU0 row, GPU2 column: unknown link 'FOO'",
    ),
    (
        matrix("GPU0|SYS|NV4|SYS|0-7|0", *OK_ROWS[1:], header=TWO_COLUMNS),
        "GPU0 row, GPU0 column: 'SYS' (X belongs on the diagonal only)",
    ),
    (
        matrix("GPU0| X | X |SYS|0-7|0", *OK_ROWS[1:], header=TWO_COLUMNS),
        "GPU0 row, GPU1 column: 'X' (X belongs on the diagonal only)",
    ),
    (
        matrix(OK_ROWS[0], "GPU1|PIX| X |SYS|0-7|0", OK_ROWS[2], header=TWO_COLUMNS),
        "GPU0-GPU1: NV4 one way, PIX the other",
    ),
    (
        matrix(*OK_ROWS[:2], "GPU2|SYS|SYS| X |8-15|one", header=TWO_COLUMNS),
        "GPU2 row: NUMA Affinity 'one' is not a number",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_OUTPUT, ids=[m for _, m in BAD_OUTPUT])
def test_unparsable_output_is_named(text: str, message: str) -> None:
    with pytest.raises(ValueError) as exc:
        from_nvidia_smi(text)
    assert str(exc.value) == message


def test_the_good_rows_of_the_bad_tables_parse() -> None:
    assert from_nvidia_smi(matrix(*OK_ROWS, header=TWO_COLUMNS)) == GpuTopology(
        3, (0, 0, 1), (frozenset({0, 1}),), "nvidia-smi"
    )


CUBE_MESH = [(0, 1), (0, 2), (0, 3), (0, 4), (1, 2), (1, 3), (1, 5), (2, 3), (2, 6), (3, 7),
             (4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7)]  # fmt: skip
GROUPS = [
    # GPUs, NVLink-connected pairs, groups
    (4, [], []),
    (4, [(0, 1), (2, 3)], [[0, 1], [2, 3]]),
    (4, [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)], [[0, 1, 2, 3]]),
    (8, CUBE_MESH, [[0, 1, 2, 3], [4, 5, 6, 7]]),
    (3, [(0, 1), (1, 2)], [[0, 1]]),  # a chain: the leftover GPU joins no group
    (5, [(0, 1), (1, 2), (2, 3), (3, 4)], [[0, 1], [2, 3]]),
    (4, [(1, 2), (2, 3), (1, 3), (0, 1)], [[1, 2, 3]]),
]


@pytest.mark.parametrize(("devices", "linked", "groups"), GROUPS)
def test_nvlink_groups_are_disjoint_cliques(
    devices: int, linked: list[tuple[int, int]], groups: list[list[int]]
) -> None:
    assert nvlink_groups(devices, linked) == tuple(frozenset(g) for g in groups)
