"""Intra-node GPU topology: NVLink groups and NUMA nodes, and the device sets they favour.

Where a node's topology comes from (``topology_of``), first that applies:

1. the node annotation ``muster.io/gpu-topology`` (written by ``muster probe-node`` from
   ``nvidia-smi topo -m``, or by hand), when it parses and describes as many GPUs as the node
   has allocatable;
2. a per-product default chosen by the ``nvidia.com/gpu.product`` label (``DEFAULTS``);
3. nothing known: no NVLink, every GPU on NUMA node 0.

Annotation format, version 1 (compact JSON; ``to_annotation`` writes it, ``parse_topology``
reads it)::

    {"version": 1,
     "gpus": [{"index": 0, "numa": 0}, {"index": 1, "numa": 0},
              {"index": 2, "numa": 1}, {"index": 3, "numa": 1}],
     "nvlink": [[0, 1], [2, 3]]}

* ``version`` (required): 1. Other versions are refused; unknown keys are ignored, so optional
  fields can be added later without breaking older readers.
* ``gpus`` (required): one object per GPU. ``index`` runs 0..N-1, each once, in any order;
  ``numa`` (default 0) is the NUMA node the GPU hangs off, as the OS numbers it.
* ``nvlink`` (optional, default ``[]``): disjoint groups of at least two GPU indices in which
  every pair is joined by NVLink, directly or through NVSwitch. An NVSwitch box is one group
  of all its GPUs; PCIe cards with NVLink bridges are pairs.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.core.gpu.ask import MILLI, GpuAsk, fits
from app.core.model.errors import InvalidInput
from app.core.model.labels import GPU_TOPOLOGY
from app.core.model.values import Node

VERSION = 1


@dataclass(frozen=True, slots=True)
class GpuTopology:
    """How a node's GPUs ``0 .. devices-1`` are connected.

    ``numa[d]`` is GPU ``d``'s NUMA node; ``nvlink`` holds disjoint groups (two or more GPUs
    each, every pair NVLink-connected), ordered by their lowest member. ``source`` says where
    the description came from: ``annotation``, ``nvidia-smi``, ``default:<product>``,
    ``none``, or ``invalid annotation: <why>`` (then the rest is the default).
    """

    devices: int
    numa: tuple[int, ...]
    nvlink: tuple[frozenset[int], ...] = ()
    source: str = "none"

    def __post_init__(self) -> None:
        if self.devices < 0 or len(self.numa) != self.devices:
            raise ValueError(f"{self.devices} GPUs need {self.devices} NUMA entries")
        seen: set[int] = set()
        for group in self.nvlink:
            if len(group) < 2 or seen & group or not group <= set(range(self.devices)):
                raise ValueError(f"bad NVLink group {sorted(group)} for {self.devices} GPUs")
            seen |= group
        groups = tuple(sorted((frozenset(g) for g in self.nvlink), key=min))
        object.__setattr__(self, "nvlink", groups)

    def group_of(self, device: int) -> int | None:
        """The index in ``nvlink`` of ``device``'s group, or None."""
        return next((i for i, g in enumerate(self.nvlink) if device in g), None)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (for /debug)."""
        return {
            "devices": self.devices,
            "numa": list(self.numa),
            "nvlink": [sorted(g) for g in self.nvlink],
            "source": self.source,
        }


# -- the annotation ----------------------------------------------------------------------------


def _index(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(field, f"expected an integer >= 0, got {value!r}")
    return value


def _list(value: Any, field: str, what: str = "a list") -> list[Any]:
    if not isinstance(value, list):
        raise InvalidInput(field, f"expected {what}, got {type(value).__name__}")
    return value


def _gpus(doc: dict[str, Any]) -> tuple[int, ...]:
    if "gpus" not in doc:
        raise InvalidInput("gpus", "missing")
    entries = _list(doc["gpus"], "gpus")
    numa: dict[int, int] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise InvalidInput(f"gpus[{i}]", f"expected an object, got {type(entry).__name__}")
        if "index" not in entry:
            raise InvalidInput(f"gpus[{i}].index", "missing")
        index = _index(entry["index"], f"gpus[{i}].index")
        if index in numa:
            raise InvalidInput(f"gpus[{i}].index", f"duplicate index {index}")
        if index >= len(entries):
            raise InvalidInput(
                f"gpus[{i}].index",
                f"{index} out of range: {len(entries)} GPUs are 0..{len(entries) - 1}",
            )
        numa[index] = _index(entry.get("numa", 0), f"gpus[{i}].numa")
    return tuple(numa[d] for d in range(len(entries)))


def _groups(value: Any, devices: int) -> tuple[frozenset[int], ...]:
    owner: dict[int, int] = {}
    groups: list[frozenset[int]] = []
    for i, group in enumerate(_list(value, "nvlink")):
        members = _list(group, f"nvlink[{i}]", "a list of GPU indices")
        if len(members) < 2:
            raise InvalidInput(f"nvlink[{i}]", "a group needs at least 2 GPUs")
        for j, member in enumerate(members):
            field = f"nvlink[{i}][{j}]"
            d = _index(member, field)
            if d >= devices:
                raise InvalidInput(field, f"no GPU {d} (indices are 0..{devices - 1})")
            if d in owner:
                where = "listed twice" if owner[d] == i else f"already in nvlink[{owner[d]}]"
                raise InvalidInput(field, f"GPU {d} is {where}")
            owner[d] = i
        groups.append(frozenset(members))
    return tuple(groups)


def parse_topology(text: str) -> GpuTopology:
    """Read a ``muster.io/gpu-topology`` annotation (format in the module docstring).

    Raises ``InvalidInput`` (a ``ValueError``) whose message names the offending field, e.g.
    ``gpus[3].index: duplicate index 2``.
    """
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InvalidInput("", f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise InvalidInput("", f"expected a JSON object, got {type(doc).__name__}")
    if "version" not in doc:
        raise InvalidInput("version", "missing")
    version = doc["version"]
    if not isinstance(version, int) or isinstance(version, bool) or version != VERSION:
        raise InvalidInput(
            "version", f"unsupported version {version!r} (this reader knows {VERSION})"
        )
    numa = _gpus(doc)
    raw = doc.get("nvlink")
    groups = _groups([] if raw is None else raw, len(numa))
    return GpuTopology(len(numa), numa, groups, "annotation")


def to_annotation(topo: GpuTopology) -> str:
    """``topo`` as a compact version-1 annotation value (``parse_topology`` reads it back)."""
    doc = {
        "version": VERSION,
        "gpus": [{"index": d, "numa": n} for d, n in enumerate(topo.numa)],
        "nvlink": [sorted(g) for g in topo.nvlink],
    }
    return json.dumps(doc, separators=(",", ":"))


# -- per-product defaults ----------------------------------------------------------------------

#: (regular expression searched in the upper-cased ``nvidia.com/gpu.product`` label, layout);
#: the first match wins. Layouts: ``all`` = one NVLink group of every GPU (NVSwitch),
#: ``quads`` = groups of 4 (V100/P100 SXM2 hybrid cube mesh, approximated), ``pairs`` = NVLink
#: bridges between cards 0-1, 2-3, ..., ``none`` = PCIe only. Anything unmatched is ``none``.
DEFAULTS: tuple[tuple[str, str], ...] = (
    (r"PCIE", "none"),
    (r"-NVL\b", "pairs"),
    (r"[PV]100-SXM", "quads"),
    (r"SXM|HBM3|H200|B200|B300|GB200|DGX|HGX", "all"),
    (r"\bT4\b|\bA10G?\b|\bA16\b|\bA2\b|\bA30\b|\bA40\b|\bL4\b|\bL40S?\b|RTX", "none"),
)
_CHUNK = {"all": 0, "quads": 4, "pairs": 2, "none": 1}


def _layout(product: str) -> str:
    upper = product.upper()
    return next((layout for pattern, layout in DEFAULTS if re.search(pattern, upper)), "none")


def default_topology(product: str, devices: int) -> GpuTopology:
    """The assumed topology of ``devices`` GPUs of ``product`` (see ``DEFAULTS``).

    NUMA: boxes of 8 or more GPUs (an even count) are taken to be two-socket, the first half
    of the GPUs on NUMA node 0 and the second half on 1; smaller boxes are all on node 0.
    """
    size = _CHUNK[_layout(product)] or devices
    groups = tuple(
        frozenset(range(start, min(start + size, devices)))
        for start in range(0, devices, max(size, 1))
        if min(size, devices - start) >= 2
    )
    if devices >= 8 and devices % 2 == 0:
        numa = tuple(0 if d < devices // 2 else 1 for d in range(devices))
    else:
        numa = (0,) * devices
    return GpuTopology(devices, numa, groups, f"default:{product}" if product else "none")


@functools.lru_cache(maxsize=4096)
def _topology(text: str | None, product: str, devices: int) -> GpuTopology:
    fallback = default_topology(product, devices)
    if text is None:
        return fallback
    try:
        topo = parse_topology(text)
    except ValueError as exc:
        return replace(fallback, source=f"invalid annotation: {exc}")
    if topo.devices != devices:
        why = f"describes {topo.devices} GPUs, the node has {devices}"
        return replace(fallback, source=f"invalid annotation: {why}")
    return topo


def topology_of(node: Node) -> GpuTopology:
    """The GPU topology of ``node``: its annotation if valid, else the product default.

    GPUs are the node's allocatable ``nvidia.com/gpu``. An invalid annotation is not fatal:
    the default is returned with ``source`` saying ``invalid annotation: <why>``. Results are
    memoised on (annotation, product, GPU count), so calling this per request is cheap.
    """
    return _topology(
        node.annotations.get(GPU_TOPOLOGY), node.gpu_model, node.allocatable.gpu // MILLI
    )


# -- choosing devices --------------------------------------------------------------------------

#: Above this many candidate splits, ``choose_devices`` falls back to a greedy fill.
_SEARCH_LIMIT = 20_000


@dataclass(frozen=True, slots=True)
class _Class:
    """Interchangeable idle devices: same NVLink group (-1 = none) and NUMA node."""

    group: int
    numa: int
    members: tuple[int, ...]


def _classes(idle: tuple[int, ...], topo: GpuTopology) -> list[_Class]:
    found: dict[tuple[int, int], list[int]] = {}
    for d in idle:
        group = topo.group_of(d)
        numa = topo.numa[d] if d < topo.devices else 0
        found.setdefault((-1 if group is None else group, numa), []).append(d)
    return [_Class(g, n, tuple(m)) for (g, n), m in sorted(found.items(), key=lambda kv: kv[1])]


def _splits(caps: list[int], count: int) -> Iterable[tuple[int, ...]]:
    """Every way to take ``count`` devices from classes with these sizes."""
    if not caps:
        if count == 0:
            yield ()
        return
    rest = sum(caps[1:])
    for k in range(min(caps[0], count), max(0, count - rest) - 1, -1):
        for tail in _splits(caps[1:], count - k):
            yield (k, *tail)


def _pairs(counts: dict[int, int]) -> int:
    return sum(math.comb(k, 2) for k in counts.values())


def _rank(split: tuple[int, ...], classes: list[_Class], count: int) -> tuple[Any, ...]:
    """Sort key of one split: lower is better (see ``choose_devices``)."""
    in_group: dict[int, int] = {}
    in_numa: dict[int, int] = {}
    for k, c in zip(split, classes, strict=True):
        if k:
            in_group[c.group] = in_group.get(c.group, 0) + k
            in_numa[c.numa] = in_numa.get(c.numa, 0) + k
    nvlink_pairs = _pairs({g: k for g, k in in_group.items() if g >= 0})
    numa_pairs = _pairs(in_numa)
    if len(in_group) == 1 and next(iter(in_group)) >= 0:
        tier, group = 0, next(iter(in_group))
        waste = sum(len(c.members) for c in classes if c.group == group) - count
    elif len(in_numa) == 1:
        tier, numa = 1, next(iter(in_numa))
        waste = sum(len(c.members) for c in classes if c.numa == numa) - count
    else:
        tier, waste = 2, 0
    chosen = sorted(d for k, c in zip(split, classes, strict=True) for d in c.members[:k])
    return (tier, -nvlink_pairs, waste, -numa_pairs, chosen)


def _greedy(classes: list[_Class], count: int) -> tuple[int, ...]:
    ordered = sorted(classes, key=lambda c: (c.group < 0, -len(c.members), c.members))
    chosen = [d for c in ordered for d in c.members][:count]
    return tuple(sorted(chosen))


@functools.lru_cache(maxsize=8192)
def _choose(idle: tuple[int, ...], count: int, topo: GpuTopology) -> tuple[int, ...]:
    classes = _classes(idle, topo)
    caps = [len(c.members) for c in classes]
    if math.prod(k + 1 for k in caps) > _SEARCH_LIMIT:
        return _greedy(classes, count)
    best = min(_splits(caps, count), key=lambda s: _rank(s, classes, count))
    return tuple(d for k, c in zip(best, classes, strict=True) for d in c.members[:k])


def choose_devices(free: Sequence[int], count: int, topo: GpuTopology) -> tuple[int, ...] | None:
    """The best-connected ``count`` fully free devices, sorted; None if fewer are fully free.

    ``free[d]`` is device ``d``'s free milli-GPU; only devices with all 1000 free are used.
    Preference, in order:

    1. all inside one NVLink group, in the group with the fewest fully free devices that can
       hold them (big free groups stay whole), then as few NUMA nodes as possible;
    2. else all on one NUMA node: most NVLink pairs, then the node with the fewest fully free
       devices;
    3. else the set with the most NVLink-connected pairs, then the most same-NUMA pairs.

    Ties go to the lowest indices. Devices of the same group and NUMA node are interchangeable,
    so the search runs over how many to take from each such class: exhaustive and fast for
    real boxes (16 GPUs included), greedy only for pathological topologies.
    """
    if count < 0:
        raise ValueError(f"cannot choose {count} devices")
    idle = tuple(d for d, f in enumerate(free) if f == MILLI)
    if len(idle) < count:
        return None
    if count == 0:
        return ()
    return tuple(sorted(_choose(idle, count, topo)))


def device_choices(free: Sequence[int], ask: GpuAsk, topo: GpuTopology) -> list[tuple[int, ...]]:
    """The device sets ``ask`` could take (model aside), Muster's default choice first.

    A share: each device with room, the tightest first (then the lower index), so big gaps
    stay open. Whole GPUs: fully free devices are interchangeable except for their links, so
    the one set ``choose_devices`` picks (NVLink, then NUMA). No GPU: ``[()]``. Empty when
    the ask does not fit.
    """
    if not fits(free, ask):
        return []
    if ask.count == 0:
        return [()]
    if ask.shared:
        room = sorted((int(f), d) for d, f in enumerate(free) if f >= ask.milli)
        return [(d,) for _, d in room]
    chosen = choose_devices(free, ask.count, topo)
    return [chosen] if chosen is not None else []


def choose(free: Sequence[int], ask: GpuAsk, topo: GpuTopology) -> tuple[int, ...] | None:
    """Muster's default devices for ``ask`` given per-device ``free`` milli on a node of
    topology ``topo`` (None: it does not fit); the first of ``device_choices``. The one rule
    the cache, the planner, the policies' tables and the simulator all use.

    Remembered per (free milli per device, ask, topology): a planning cycle asks the same
    question for member after member of alike gangs on alike nodes.
    """
    return _default_choice(tuple(free), ask, topo)


@functools.lru_cache(maxsize=4096)
def _default_choice(
    free: tuple[int, ...], ask: GpuAsk, topo: GpuTopology
) -> tuple[int, ...] | None:
    options = device_choices(free, ask, topo)
    return options[0] if options else None


# -- nvidia-smi topo -m -----------------------------------------------------------------------

# ANSI colour/underline codes, also when a copy lost the ESC byte and only "[4m" is left.
_ANSI = re.compile(r"\x1b?\[[0-9;]*m")
_GPU = re.compile(r"GPU(\d+)")
_NVLINK = re.compile(r"NV(\d+)")
_PCIE_LINKS = frozenset({"PIX", "PXB", "PHB", "NODE", "SYS", "SOC"})
_TRAILING = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_LABEL = re.compile("|".join(_TRAILING) + r"|\S+")


def _is_header(tokens: list[str]) -> bool:
    return bool(tokens) and bool(_GPU.fullmatch(tokens[0])) and tokens[1:2] != ["X"]


def _header(line: str) -> tuple[list[str], list[str]]:
    """(device column labels, trailing column labels) of the header row."""
    labels = _LABEL.findall(line)
    split = next((i for i, label in enumerate(labels) if label in _TRAILING), len(labels))
    columns, trailing = labels[:split], labels[split:]
    gpus = [label for label in columns if _GPU.fullmatch(label)]
    if gpus != [f"GPU{d}" for d in range(len(gpus))]:
        raise ValueError(
            f"header: GPU columns are {' '.join(gpus)}, expected GPU0..GPU{len(gpus) - 1}"
        )
    return columns, trailing


def _check_link(cell: str, row: int, col: int) -> None:
    where = f"GPU{row} row, GPU{col} column"
    if (cell == "X") != (row == col):
        raise ValueError(f"{where}: {cell!r} (X belongs on the diagonal only)")
    if cell != "X" and cell not in _PCIE_LINKS and not _NVLINK.fullmatch(cell):
        raise ValueError(f"{where}: unknown link {cell!r}")


@dataclass(frozen=True, slots=True)
class _Matrix:
    """The GPU part of a ``nvidia-smi topo -m`` matrix."""

    devices: int
    links: dict[int, list[str]]  # GPU row -> its cells in the GPU columns
    extra: dict[int, dict[str, str]]  # GPU row -> trailing column label -> value
    trailing: list[str]  # trailing column labels (CPU Affinity, ...)


def _matrix(lines: list[str]) -> _Matrix:
    """Find and read the matrix in ``lines``."""
    start = next((i for i, line in enumerate(lines) if _is_header(line.split())), None)
    if start is None:
        raise ValueError("no topology matrix: expected a header row starting with GPU0")
    columns, trailing = _header(lines[start])
    gpu_columns = [i for i, label in enumerate(columns) if _GPU.fullmatch(label)]
    links: dict[int, list[str]] = {}
    extra: dict[int, dict[str, str]] = {}
    for line in lines[start + 1 :]:
        tokens = line.split()
        if not tokens or tokens[0].startswith("Legend"):
            break
        match = _GPU.fullmatch(tokens[0])
        if match is None:  # a NIC row
            continue
        row = int(match[1])
        if row >= len(gpu_columns) or row in links:
            raise ValueError(f"GPU{row} row: unexpected (header has {len(gpu_columns)} GPUs)")
        cells, rest = tokens[1 : 1 + len(columns)], tokens[1 + len(columns) :]
        if len(cells) < len(columns):
            raise ValueError(f"GPU{row} row: {len(cells)} links for {len(columns)} columns")
        if len(rest) > len(trailing):
            raise ValueError(
                f"GPU{row} row: {len(rest)} values after the links, header has {len(trailing)}"
            )
        links[row] = [cells[i] for i in gpu_columns]
        for col, cell in enumerate(links[row]):
            _check_link(cell, row, col)
        # Values sit under the rightmost headers: an empty CPU Affinity leaves no token.
        extra[row] = dict(zip(reversed(trailing), reversed(rest), strict=False))
    missing = [f"GPU{d}" for d in range(len(gpu_columns)) if d not in links]
    if missing:
        raise ValueError(f"no row for {', '.join(missing)}")
    return _Matrix(len(gpu_columns), links, extra, trailing)


def _numa(matrix: _Matrix) -> tuple[int, ...]:
    devices, extra = matrix.devices, matrix.extra
    if "NUMA Affinity" in matrix.trailing:
        numa = []
        for d in range(devices):
            value = extra[d].get("NUMA Affinity", "N/A")
            match = re.match(r"\d+", value)
            if value != "N/A" and match is None:
                raise ValueError(f"GPU{d} row: NUMA Affinity {value!r} is not a number")
            numa.append(int(match[0]) if match else 0)
        return tuple(numa)
    # Older nvidia-smi has no NUMA column: GPUs sharing a CPU affinity share a NUMA node.
    ids: dict[str, int] = {}
    return tuple(ids.setdefault(extra[d].get("CPU Affinity", ""), len(ids)) for d in range(devices))


def _largest_clique(nodes: list[int], adjacent: dict[int, set[int]]) -> tuple[int, ...]:
    """The largest clique among ``nodes``; of equal ones, the lowest indices."""
    best: tuple[int, ...] = ()

    def grow(clique: tuple[int, ...], candidates: list[int]) -> None:
        nonlocal best
        if len(clique) + len(candidates) <= len(best):
            return
        if not candidates:
            best = clique
            return
        for i, v in enumerate(candidates):
            grow((*clique, v), [w for w in candidates[i + 1 :] if w in adjacent[v]])

    grow((), sorted(nodes))
    return best


def nvlink_groups(devices: int, linked: Iterable[tuple[int, int]]) -> tuple[frozenset[int], ...]:
    """Disjoint NVLink groups from the NVLink-connected pairs.

    Each connected component that is a clique (NVSwitch boxes, bridged pairs) becomes one
    group. A component that is not (the V100/P100 hybrid cube mesh) is split greedily into
    cliques, largest first, lowest indices first; the links between them are dropped, so a
    DGX-1 becomes {0,1,2,3} and {4,5,6,7}, and leftover single GPUs join no group.
    """
    adjacent: dict[int, set[int]] = {d: set() for d in range(devices)}
    for a, b in linked:
        adjacent[a].add(b)
        adjacent[b].add(a)
    groups: list[frozenset[int]] = []
    seen: set[int] = set()
    for start in range(devices):
        if start in seen:
            continue
        component, stack = {start}, [start]
        while stack:
            for w in adjacent[stack.pop()] - component:
                component.add(w)
                stack.append(w)
        seen |= component
        while len(component) >= 2:
            clique = _largest_clique(sorted(component), adjacent)
            if len(clique) < 2:
                break
            groups.append(frozenset(clique))
            component -= set(clique)
    return tuple(groups)


def from_nvidia_smi(text: str) -> GpuTopology:
    """The topology printed by ``nvidia-smi topo -m`` (``source`` is ``nvidia-smi``).

    Reads the GPU rows and columns of the matrix (NIC rows and columns are skipped) up to the
    first blank line; ANSI codes, tabs and text before the header are tolerated. ``NV#`` cells
    are NVLink (groups: ``nvlink_groups``). NUMA comes from the ``NUMA Affinity`` column
    (``N/A`` is 0); without that column, GPUs with the same ``CPU Affinity`` share a node,
    numbered in order of appearance. Raises ``ValueError`` naming what does not parse.
    """
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    matrix = _matrix(lines)
    devices, links = matrix.devices, matrix.links
    linked: list[tuple[int, int]] = []
    for a, b in itertools.combinations(range(devices), 2):
        there, back = links[a][b], links[b][a]
        if bool(_NVLINK.fullmatch(there)) != bool(_NVLINK.fullmatch(back)):
            raise ValueError(f"GPU{a}-GPU{b}: {there} one way, {back} the other")
        if _NVLINK.fullmatch(there):
            linked.append((a, b))
    return GpuTopology(devices, _numa(matrix), nvlink_groups(devices, linked), "nvidia-smi")
