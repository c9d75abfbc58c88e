"""What readers of the cluster cache get: an immutable ``NodeView`` of every node and its usage
at one generation, a ``Snapshot`` (the view plus every pod and where it counts), and the
resource-vector helpers both use."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from app.core.gpu.ask import GpuAsk, fits_mask
from app.core.gpu.ledger import Held
from app.core.model.quantity import format_milli
from app.core.model.values import RESOURCE_NAMES, Node, Pod, Resources
from app.core.state.changelog import ChangeLog
from app.core.state.nodetable import NodeTable

#: Memos of per-node answers (``FilterMemo``, the GPU ranking) patch the rows that changed
#: when at most this share of the nodes did; past it, patching costs as much as starting anew.
PATCH_SHARE = 0.125


@dataclass(frozen=True, slots=True)
class NodeView:
    """An immutable view of every node and its usage at one cache generation.

    Row ``i`` of ``allocatable``/``used`` belongs to ``nodes[i]``; columns follow
    ``RESOURCE_NAMES``. ``special[i]`` is true when node ``i`` has taints or is unschedulable,
    so filters only look closer at those. Node facts live in ``table`` (shared between views
    until the node set changes).
    """

    generation: int
    table: NodeTable
    used: np.ndarray
    #: Free milli-GPU per row and device (``app.core.gpu.ledger``); absent devices show 0.
    gpu_free: np.ndarray

    def changed_rows(self, earlier: NodeView) -> np.ndarray | None:
        """Rows whose usage (resources or GPU devices) differs from ``earlier``'s, for a memo
        made on ``earlier`` to patch; ``None`` (start afresh) when ``earlier`` is a view of
        another node set, or more than ``PATCH_SHARE`` of the rows changed."""
        if not self._same_nodes(earlier):
            return None
        diff = (self.used != earlier.used).any(axis=1)
        diff |= (self.gpu_free != earlier.gpu_free).any(axis=1)
        rows: np.ndarray = np.flatnonzero(diff)
        return rows if len(rows) <= PATCH_SHARE * len(diff) else None

    def _same_nodes(self, earlier: NodeView) -> bool:
        """Whether ``earlier`` is a view of the same node table (rows compare one to one)."""
        return earlier.table is self.table and earlier.gpu_free.shape == self.gpu_free.shape

    def roomier_than(self, earlier: NodeView) -> bool:
        """Whether some node has more room here than in ``earlier`` (less of a resource used,
        or more milli-GPU free on a device), or the two views are of other node tables. When
        not, whatever found no room on ``earlier`` finds none here either."""
        if not self._same_nodes(earlier):
            return True
        return bool((self.used < earlier.used).any() or (self.gpu_free > earlier.gpu_free).any())

    def gpu_fits(self, ask: GpuAsk, rows: np.ndarray | None = None) -> np.ndarray:
        """Per row (or per ``rows``): do the devices have room for ``ask``
        (``GpuAsk.of(pod)``)? All true for pods without GPUs."""
        return fits_mask(self.gpu_free if rows is None else self.gpu_free[rows], ask)

    @property
    def nodes(self) -> tuple[Node, ...]:
        """Every node, by row."""
        return self.table.nodes

    @property
    def index(self) -> Mapping[str, int]:
        """Node name -> row."""
        return self.table.index

    @property
    def allocatable(self) -> np.ndarray:
        """Allocatable per row and resource."""
        return self.table.allocatable

    @property
    def special(self) -> np.ndarray:
        """Per row: tainted or cordoned."""
        return self.table.special

    @property
    def free(self) -> np.ndarray:
        """``allocatable - used`` per node and resource."""
        free: np.ndarray = self.table.allocatable - self.used
        return free

    def node(self, name: str) -> Node | None:
        """The node called ``name``, if known."""
        i = self.index.get(name)
        return None if i is None else self.nodes[i]

    def free_of(self, name: str) -> Resources:
        """What node ``name`` has left (raises ``KeyError`` for an unknown node)."""
        i = self.index[name]
        return Resources(*(int(x) for x in self.allocatable[i] - self.used[i]))

    def used_of(self, name: str) -> Resources:
        """What node ``name`` has in use, assumed binds included."""
        return Resources(*(int(x) for x in self.used[self.index[name]]))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A ``NodeView`` plus every pod and where each one counts."""

    view: NodeView
    pods: Mapping[str, Pod]
    placement: Mapping[str, str]
    assumed: frozenset[str] = field(default_factory=frozenset)
    reserved: Mapping[str, str] = field(default_factory=dict)
    #: uid -> wall-clock time Muster first saw the pod hold a node.
    bound_at: Mapping[str, float] = field(default_factory=dict)
    #: uid -> gang key (``namespace/name``) for every pod that belongs to a gang.
    gang_members: Mapping[str, str] = field(default_factory=dict)
    #: uid -> the GPU devices the pod holds (pods placed with GPUs only).
    devices: Mapping[str, Held] = field(default_factory=dict)
    #: The cache generation this snapshot shows.
    generation: int = 0
    #: Changes whenever nodes, node usage, holds or any pod that holds, is bound to or is
    #: planned onto a node change (``ClusterCache.placed_generation``); 0: not known (a
    #: snapshot made by hand). What is derived from nodes and placed pods alone may be kept
    #: while it is the same, across pending pods coming and going.
    placed_generation: int = 0
    #: The cache's record of which pods each generation changed (None: a snapshot made by
    #: hand); ``app.core.state.diff`` reads it.
    changes: ChangeLog | None = None

    def holds_node(self, pod: Pod) -> bool:
        """Whether ``pod`` is bound or has a bind in flight (a plan's reservation is not)."""
        return bool(pod.node_name) or pod.uid in self.assumed


_VECTORS: dict[Resources, np.ndarray] = {}


def vector(requests: Resources) -> np.ndarray:
    """``requests`` as an int64 array (read-only, shared: one per distinct amount). Pods ask
    for a handful of distinct amounts, and converting a tuple costs more than the sum."""
    found = _VECTORS.get(requests)
    if found is None:
        if len(_VECTORS) >= 4096:
            _VECTORS.clear()
        found = np.asarray(requests, dtype=np.int64)
        found.setflags(write=False)
        _VECTORS[requests] = found
    return found


def shortfall(requests: Resources, free: Iterable[int]) -> str:
    """Why ``requests`` do not fit into ``free``: ``"needs 4 nvidia.com/gpu, 2 free"``."""
    parts = [
        f"needs {format_milli(name, need)} {name}, {format_milli(name, max(have, 0))} free"
        for name, need, have in zip(RESOURCE_NAMES, requests, free, strict=True)
        if need > have
    ]
    return "; ".join(parts)
