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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from app.core.model import labels
from app.core.model.values import Pod
from app.core.state.nodetable import NodeTable

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
        domains: list[tuple[Domain, ...]] = []
        #: per level: rows sorted by domain, and where each domain's run starts (for sums)
        self._order: list[np.ndarray] = []
        self._starts: list[np.ndarray] = []
        #: per level: how many nodes each domain holds
        self.sizes: list[np.ndarray] = []
        self._largest: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        parent = np.zeros(rows, dtype=np.int64)
        for level, column in enumerate(columns):
            values: list[str | None]
            if all(v is None for v in column):
                ids, values = parent.copy(), [None] * (int(parent.max()) + 1 if rows else 0)
            else:
                seen: dict[tuple[int, object], int] = {}
                ids = np.empty(rows, dtype=np.int64)
                values = []
                for row, (up, value) in enumerate(zip(parent.tolist(), column, strict=True)):
                    key = (up, str(value)) if value is not None else (-1 - row, None)
                    index = seen.get(key)
                    if index is None:
                        index = seen[key] = len(values)
                        values.append(None if value is None else str(value))
                    ids[row] = index
            order = np.argsort(ids, kind="stable")
            starts = np.flatnonzero(np.r_[True, np.diff(ids[order]) != 0]) if rows else order
            members = np.split(order, starts[1:]) if rows else []
            ups = parent[order[starts]] if rows else order
            domains.append(tuple(
                Domain(level, i, values[i], np.sort(m), int(ups[i]) if level else -1)
                for i, m in enumerate(members)
            ))  # fmt: skip
            self.ids[level] = ids
            self._order.append(order)
            self._starts.append(starts)
            self.sizes.append(np.array([len(m) for m in members], dtype=np.int64))
            parent = ids
        self.domains = tuple(domains)

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

    def domains_at(self, level: int) -> tuple[Domain, ...]:
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
        Remembered per level (a tree belongs to one node table)."""
        memo = self._largest.get(level)
        if memo is None or memo[0] is not allocatable:
            most = self.sums(level, allocatable).max(axis=0, initial=0)
            memo = self._largest[level] = (allocatable, most)
        return memo[1]

    def sums(self, level: int, values: np.ndarray) -> np.ndarray:
        """Per domain at ``level``: the sum of ``values`` (per row, 1-D or rows x k) over its
        rows, exactly (integer sums stay integers)."""
        if not len(self.node_names):
            return values[:0]
        return np.add.reduceat(values[self._order[level]], self._starts[level], axis=0)


def build(table: NodeTable, keys: Sequence[str]) -> Tree:
    """The tree of ``table``'s nodes under ``keys`` (broadest first)."""
    return Tree(keys, [n.name for n in table.nodes], [table.column(k) for k in keys])


def tree_for(table: NodeTable, keys: Sequence[str]) -> Tree:
    """``build(table, keys)``, remembered for as long as ``table`` lives."""
    keys = tuple(keys)
    return table.derived(("tree", keys), lambda: build(table, keys))


# -- what a gang asks for ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ask:
    """A gang's locality ask: keep its core in one domain of ``level`` (a name as written).

    ``required``: or wait; otherwise preferred (fall back to broader levels, then anywhere).
    """

    level: str
    required: bool


def ask_of(pods: Iterable[Pod]) -> tuple[Ask | None, str]:
    """The ask of a gang's members and, if they contradict each other, why it is unusable.

    Members that say nothing go along with those that do; ``topology-required`` outranks
    ``topology-preferred``. ``(None, "")``: no ask (the planner's default applies).
    """
    seen: dict[str, set[str]] = {labels.TOPOLOGY_REQUIRED: set(), labels.TOPOLOGY_PREFERRED: set()}
    for pod in pods:
        for key, found in seen.items():
            value = labels.lookup(key, pod.labels, pod.annotations)
            if value and value.strip():
                found.add(value.strip())
    for key, found in seen.items():
        if len(found) > 1:
            return None, f"members disagree on {key} ({', '.join(sorted(found))})"
        if found:
            return Ask(found.pop(), key == labels.TOPOLOGY_REQUIRED), ""
    return None, ""
