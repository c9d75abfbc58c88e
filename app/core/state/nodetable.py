"""Node facts that change only when nodes change, shared by every view of one node set.

A ``NodeView`` is rebuilt whenever usage changes (every bind); the node set changes far more
rarely. What depends only on the nodes — names, allocatable, taint groups, label columns, JSON
fragments — lives here, computed once per node set and then reused by every request.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Hashable
from functools import cached_property
from itertools import repeat
from typing import TypeVar, cast

import numpy as np

from app.core.model.values import Node, Taint

_NONE = np.array(None, dtype=object)
T = TypeVar("T")


_MISSING = object()


def is_none(values: np.ndarray) -> np.ndarray:
    """``v is None`` for every element of an object array (label columns, per-row reasons)."""
    found: np.ndarray = np.equal(values, _NONE)
    return found


class NodeTable:
    """Immutable per node set; lazily computed parts are cached (thread-safe)."""

    def __init__(
        self, nodes: list[Node], index: dict[str, int], allocatable: np.ndarray, special: np.ndarray
    ) -> None:
        self.nodes = tuple(nodes)
        #: name -> row; a plain dict, never mutated once the table exists
        self.index = index
        self.allocatable = allocatable
        self.special = special
        self._lock = threading.Lock()
        self._columns: dict[str, np.ndarray] = {}
        #: Recent ``rows`` answers, newest first (replaced whole: thread-safe).
        self._recent_rows: list[tuple[list[str], np.ndarray]] = []
        self._derived: dict[Hashable, object] = {}

    #: At most this many ``derived`` values are kept (then they are made afresh).
    MAX_DERIVED = 256

    def derived(self, key: Hashable, make: Callable[[], T]) -> T:
        """The value of ``key`` derived from this node set alone (a topology tree, a filter
        mask), made by ``make()`` the first time it is asked for; ``key`` says what it is."""
        found = self._derived.get(key, _MISSING)
        if found is _MISSING:
            found = make()
            with self._lock:
                if len(self._derived) >= self.MAX_DERIVED:
                    self._derived.clear()
                self._derived[key] = found
        return cast(T, found)

    @cached_property
    def check_groups(self) -> tuple[np.ndarray, list[Node | None]]:
        """Nodes grouped by what the cordon and taint checks look at.

        ``(group id per row, a representative node per group)``. Group 0 (representative
        ``None``) is "no blocking taint, not cordoned": those checks pass for every pod.
        """
        keys: dict[tuple[bool, tuple[Taint, ...]], int] = {}
        representatives: list[Node | None] = [None]
        groups = np.zeros(len(self.nodes), dtype=np.int64)
        for row in np.flatnonzero(self.special).tolist():
            node = self.nodes[row]
            key = (node.unschedulable, node.taints)
            group = keys.get(key)
            if group is None:
                group = keys[key] = len(representatives)
                representatives.append(node)
            groups[row] = group
        return groups, representatives

    def column(self, key: str) -> np.ndarray:
        """The value of label ``key`` per row (``None`` where absent), as an object array."""
        column = self._columns.get(key)
        if column is None:
            column = np.array([n.labels.get(key) for n in self.nodes] + [None], dtype=object)[:-1]
            with self._lock:
                self._columns[key] = column
        return column

    @cached_property
    def prefer_no_schedule(self) -> np.ndarray:
        """Per row: the node has a ``PreferNoSchedule`` taint (kube-scheduler's scoring weighs
        it; its filters do not)."""
        return np.array(
            [any(t.effect == "PreferNoSchedule" for t in n.taints) for n in self.nodes], dtype=bool
        )

    @cached_property
    def names(self) -> np.ndarray:
        """Node names per row, as an object array."""
        return np.array([n.name for n in self.nodes] + [None], dtype=object)[:-1]

    @cached_property
    def host_fragments(self) -> list[str]:
        """``'{"Host":"<name>","Score":'`` per row, for fast prioritize answers."""
        return ['{"Host":' + json.dumps(n.name) + ',"Score":' for n in self.nodes]

    #: How many recent name lists ``rows`` remembers (the candidates, and the feasible ones).
    RECENT_ROWS = 4

    def rows(self, names: list[str]) -> np.ndarray:
        """Row per name, ``-1`` for names not in the table.

        kube-scheduler tends to send the same candidates pod after pod, and filter then ranks
        the same feasible ones; comparing with a few recent lists costs a fraction of looking
        every name up again.
        """
        recent = self._recent_rows
        for known, rows in recent:
            if known == names:
                return rows
        rows = np.fromiter(
            map(self.index.get, names, repeat(-1, len(names))), dtype=np.int64, count=len(names)
        )
        rows.setflags(write=False)
        self._recent_rows = [(list(names), rows), *recent[: self.RECENT_ROWS - 1]]
        return rows
