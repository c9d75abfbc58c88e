"""Network topology: nodes grouped into nested domains by an ordered list of node label keys.

The keys go broadest first; the default is
``topology.kubernetes.io/zone`` > ``network.topology.nvidia.com/spine`` >
``network.topology.nvidia.com/block`` > ``kubernetes.io/hostname``. Each key is a **level**,
named by the key itself or its last path segment (``zone``, ``spine``, ``block``,
``hostname``); a short name used by two keys means the broader one.

A **domain** at a level is a set of nodes that share the values of that level's label and of
every broader one (so a domain always sits inside exactly one domain of the level above, and
equal block names under different spines are different blocks). Two rules cover missing
labels:

* a node lacking the label of a level is **alone** at that level (and, being alone, at every
  narrower one): nothing says which nodes are near it, so it is only ever trusted with a gang
  it can take by itself;
* a level that *no* node carries says nothing at all and is **collapsed**: every domain of it
  equals its parent (at the top: one domain of every node). A cluster without zone labels is
  then one zone, not a thousand.

A gang asks for locality with ``muster.io/topology-required`` or
``muster.io/topology-preferred`` (labels or annotations, on any member); ``ask_of`` reads them.
The tree for a node set is built once (``tree_for`` remembers it per ``NodeTable``, which stays
the same object until nodes change).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from app.core.model import labels
from app.core.model.values import Node, Pod
from app.core.state.nodetable import NodeTable, is_none

#: The default levels, broadest first.
DEFAULT_KEYS: tuple[str, ...] = (
    "topology.kubernetes.io/zone",
    "network.topology.nvidia.com/spine",
    "network.topology.nvidia.com/block",
    "kubernetes.io/hostname",
)


def short_name(key: str) -> str:
    """The level name of label ``key``: its last path segment (``.../block`` -> ``block``)."""
    return key.rsplit("/", 1)[-1]


@dataclass(frozen=True, slots=True)
class Domain:
    """One domain: ``rows`` (ascending node rows) at ``level``, inside ``parent``.

    ``value`` is the level's label value; ``None`` for a node alone (no label) or a collapsed
    level. ``parent`` is the domain's index at ``level - 1`` (``-1`` at the top level).
    """

    level: int
    index: int
    value: str | None
    rows: np.ndarray
    parent: int

    def label(self, tree: Tree) -> str:
        """How reasons name it: the label value, else the node alone, else (a collapsed
        level) its parent's label, else ``*`` (every node)."""
        if self.value is not None:
            return self.value
        if len(self.rows) == 1:
            return tree.node_names[int(self.rows[0])]
        if self.parent >= 0:
            return tree.domains[self.level - 1][self.parent].label(tree)
        return "*"


class Level(Sequence[Domain]):
    """The domains of one level, by index; each ``Domain`` is made when first asked for (a
    hostname level holds one per node, and a cycle looks at few of them)."""

    def __init__(
        self,
        level: int,
        values: Sequence[str | None],
        order: np.ndarray,
        starts: np.ndarray,
        parents: np.ndarray,
    ) -> None:
        self._level = level
        self._values = values
        self._order = order  # rows by domain
        self._bounds = np.r_[starts, len(order)].tolist()
        self._parents = parents.tolist()
        self._made: dict[int, Domain] = {}

    def __len__(self) -> int:
        return len(self._values)

    @overload
    def __getitem__(self, index: int) -> Domain: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Domain]: ...
    def __getitem__(self, index: int | slice) -> Domain | Sequence[Domain]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"no domain {index} at level {self._level}")
        found = self._made.get(index)
        if found is None:
            rows = self._order[self._bounds[index] : self._bounds[index + 1]]
            found = Domain(self._level, index, self._values[index], rows, int(self._parents[index]))
            self._made[index] = found
        return found


class Tree:
    """The domains of one node set under ``keys``. Immutable once built."""

    def __init__(
        self, keys: Sequence[str], node_names: Sequence[str], columns: Sequence[np.ndarray]
    ) -> None:
        self.keys = tuple(keys)
        self.names = tuple(short_name(k) for k in self.keys)
        self.node_names = tuple(node_names)
        rows = len(self.node_names)
        #: ``ids[level, row]``: the index of the row's domain at that level.
        self.ids = np.zeros((len(self.keys), rows), dtype=np.int64)
        domains: list[Level] = []
        #: per level: rows sorted by domain, and where each domain's run starts (for sums)
        self._order: list[np.ndarray] = []
        self._starts: list[np.ndarray] = []
        #: per level: how many nodes each domain holds
        self.sizes: list[np.ndarray] = []
        self._largest: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._padded: dict[int, np.ndarray | None] = {}
        self._masks: dict[tuple[int, int], np.ndarray] = {}
        parent = np.zeros(rows, dtype=np.int64)
        for level, column in enumerate(columns):
            values: list[str | None]
            if is_none(column).all():
                ids, values = parent.copy(), [None] * (int(parent.max()) + 1 if rows else 0)
            else:
                ids, values = _domain_ids(parent, column)
            order = np.argsort(ids, kind="stable")  # each domain's rows stay ascending
            starts = np.flatnonzero(np.r_[True, np.diff(ids[order]) != 0]) if rows else order
            ups = parent[order[starts]] if rows and level else np.full(len(starts), -1)
            domains.append(Level(level, values, order, starts, ups))
            self.ids[level] = ids
            self._order.append(order)
            self._starts.append(starts)
            self.sizes.append(np.diff(np.r_[starts, rows]).astype(np.int64))
            parent = ids
        self.domains = tuple(domains)

    #: At most this many ``mask`` answers are kept (then they are made afresh).
    MAX_MASKS = 512

    def mask(self, level: int, index: int) -> np.ndarray:
        """Per row: is it in domain ``index`` of ``level``? (read-only, remembered: a cycle
        places gang after gang in the same few domains)"""
        found = self._masks.get((level, index))
        if found is None:
            found = self.ids[level] == index
            found.setflags(write=False)
            if len(self._masks) >= self.MAX_MASKS:
                self._masks.clear()
            self._masks[level, index] = found
        return found

    @property
    def depth(self) -> int:
        """How many levels there are."""
        return len(self.keys)

    def level(self, name: str) -> int | None:
        """The level called ``name`` (full key first, then short name, broadest first)."""
        if name in self.keys:
            return self.keys.index(name)
        if name in self.names:
            return self.names.index(name)
        return None

    def domains_at(self, level: int) -> Level:
        """Every domain at ``level``."""
        return self.domains[level]

    def domain_of(self, row: int, level: int) -> Domain:
        """The domain of node row ``row`` at ``level``."""
        return self.domains[level][int(self.ids[level, row])]

    def spans_all(self, level: int) -> bool:
        """Whether ``level`` is one domain holding every node (it constrains nothing)."""
        return len(self.domains[level]) <= 1

    def largest(self, level: int, allocatable: np.ndarray) -> np.ndarray:
        """Per resource, the most any one domain at ``level`` holds of ``allocatable`` (the
        node table's, rows x resources): what no gang bigger than it could ever get there.
        Remembered per level for the last ``allocatable`` asked about (node sets of the same
        names and topology labels share one tree, and their allocatable may differ)."""
        memo = self._largest.get(level)
        if memo is None or memo[0] is not allocatable:
            most = self.sums(level, allocatable).max(axis=0, initial=0)
            memo = self._largest[level] = (allocatable, most)
        return memo[1]

    def padded(self, level: int) -> np.ndarray | None:
        """Per domain at ``level``: its rows (ascending), then ``-1`` up to the largest
        domain's size (domains x largest size); ``None`` when that would hold more than
        four cells per node (domains of very unequal sizes). Remembered per level."""
        if level not in self._padded:
            sizes, starts, order = self.sizes[level], self._starts[level], self._order[level]
            width = int(sizes.max(initial=0))
            found = None
            if len(sizes) * width <= 4 * max(len(self.node_names), 1):
                found = np.full((len(sizes), width), -1, dtype=np.int64)
                at = np.arange(len(order)) - np.repeat(starts, sizes)  # place within domain
                found[np.repeat(np.arange(len(sizes)), sizes), at] = order
                found.setflags(write=False)
            self._padded[level] = found
        return self._padded[level]

    def sums(self, level: int, values: np.ndarray) -> np.ndarray:
        """Per domain at ``level``: the sum of ``values`` (per row, 1-D or rows x k) over its
        rows, exactly (integer sums stay integers)."""
        if not len(self.node_names):
            return values[:0]
        return np.add.reduceat(values[self._order[level]], self._starts[level], axis=0)


def _domain_ids(parent: np.ndarray, column: np.ndarray) -> tuple[np.ndarray, list[str | None]]:
    """Per row, its domain's index at a level whose label values are ``column`` (object
    array, ``None`` where absent) under domains ``parent`` of the level above; and each
    domain's value. Rows sharing a parent and a value share a domain; a row without the label
    is alone. Domains are numbered in the order their first row comes."""
    rows = len(column)
    present = np.flatnonzero(~is_none(column))
    key = -1 - np.arange(rows, dtype=np.int64)  # alone, unless it has the label
    if len(present):
        # Each distinct value's code in order of first sight (numbers, not sorted strings:
        # only equality matters, domains are numbered by first row below). Label values are
        # strings.
        found = column[present].tolist()
        seen = {value: i for i, value in enumerate(dict.fromkeys(found))}
        code = np.fromiter(map(seen.__getitem__, found), np.int64, len(present))
        key[present] = parent[present] * len(seen) + code
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")
    number = np.empty(len(first), dtype=np.int64)
    number[by_first] = np.arange(len(first))
    ids = number[inverse.reshape(-1)]
    values: list[str | None] = column[first[by_first]].tolist()
    return ids, values


def build(table: NodeTable, keys: Sequence[str]) -> Tree:
    """The tree of ``table``'s nodes under ``keys`` (broadest first)."""
    return Tree(keys, [n.name for n in table.nodes], [table.column(k) for k in keys])


def tree_for(table: NodeTable, keys: Sequence[str]) -> Tree:
    """``build(table, keys)``, remembered for as long as ``table`` lives."""
    keys = tuple(keys)
    return table.derived(("tree", keys), lambda: build(table, keys))


def trees_ahead(keys: Sequence[str]) -> Callable[[NodeTable], None]:
    """What a cache derives of each new node set as the watch brings it
    (``ClusterCache(nodes_ahead=...)``): its tree under ``keys``, which the next cycle
    reads (``tree_for``), so that no cycle builds it.

    A node set whose names (row by row) and ``keys`` labels are those of the last one's (a
    node cordoned, tainted, its allocatable or other labels changed: most node changes) gets
    the last one's tree, which is exactly what building it would give: at 5,000 nodes a
    build takes milliseconds of the watch thread per node change, a comparison of the two
    sets a fraction of one (unchanged rows are the very same objects)."""
    keys = tuple(keys)
    lock = threading.Lock()
    last: list[tuple[tuple[Node, ...], Tree]] = []

    def derive(table: NodeTable) -> None:
        with lock:
            try:
                if last and same_domains(last[0][0], table.nodes, keys):
                    kept = last[0][1]
                    tree = table.derived(("tree", keys), lambda: kept)
                else:
                    tree = tree_for(table, keys)
            except Exception:  # noqa: BLE001 - the cycle builds it again and meets the error there
                return
            last[:] = [(table.nodes, tree)]

    return derive


def same_domains(old: Sequence[Node], new: Sequence[Node], keys: Sequence[str]) -> bool:
    """Whether two node sets have the same names row by row and the same ``keys`` labels:
    then their trees under ``keys`` are the same."""
    return len(old) == len(new) and all(
        a is b or (a.name == b.name and all(a.labels.get(k) == b.labels.get(k) for k in keys))
        for a, b in zip(old, new, strict=True)
    )


#: ``trees_ahead`` of the planner's default keys.
DEFAULT_TREES = trees_ahead(DEFAULT_KEYS)


# -- what a gang asks for ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ask:
    """A gang's locality ask: keep its core in one domain of ``level`` (a name as written).

    ``required``: or wait; otherwise preferred (fall back to broader levels, then anywhere).
    """

    level: str
    required: bool


#: The keys a pod states its topology ask with, the one that outranks the other first.
_ASK_KEYS = (labels.TOPOLOGY_REQUIRED, labels.TOPOLOGY_PREFERRED)


def _stated(pod: Pod) -> tuple[str, str]:
    """What ``pod`` says under each of ``_ASK_KEYS``, stripped (``""``: nothing)."""
    required, preferred = (
        (labels.lookup(key, pod.labels, pod.annotations) or "").strip() for key in _ASK_KEYS
    )
    return required, preferred


def pod_ask(pod: Pod) -> Ask | None:
    """``ask_of([pod])``'s ask (one pod never contradicts itself): its
    ``topology-required`` level, else its ``topology-preferred`` one, else ``None``."""
    required, preferred = _stated(pod)
    if required:
        return Ask(required, True)
    return Ask(preferred, False) if preferred else None


def ask_of(pods: Iterable[Pod]) -> tuple[Ask | None, str]:
    """The ask of a gang's members and, if they contradict each other, why it is unusable.

    Members that say nothing go along with those that do; ``topology-required`` outranks
    ``topology-preferred``. ``(None, "")``: no ask (the planner's default applies).
    """
    seen: tuple[set[str], set[str]] = (set(), set())
    for pod in pods:
        for found, value in zip(seen, _stated(pod), strict=True):
            if value:
                found.add(value)
    for key, found in zip(_ASK_KEYS, seen, strict=True):
        if len(found) > 1:
            return None, f"members disagree on {key} ({', '.join(sorted(found))})"
        if found:
            return Ask(found.pop(), key == labels.TOPOLOGY_REQUIRED), ""
    return None, ""
