"""The live GPU placement: Muster's default policy ranking real nodes, and the devices it picks.

Adapts ``app.core.policies.fgd.default_policy`` (fragmentation-aware placement over a
workload mix learned from the pods seen) to the cluster cache:

* ``observe`` shows the policy each pod once, the first time Muster sees it, so the learned
  mix is the recent workload (and the pod being placed is part of it);
* ``table`` turns a ``NodeView`` into the policy's ``GpuTable`` (per-device free milli, GPU
  model, free cpu and memory), once per view;
* ``scores`` maps the policy's cost over the candidates to kube-scheduler's 0-10: the single
  cheapest candidate (first among equals, the policy's own tie-break) scores 10, the rest 0-9
  by cost (linear over the candidates' cost range, or over one GPU's worth if that is
  wider), so kube-scheduler lands the pod exactly where the policy would (the extender's
  weight in the scheduler profile makes it dominate);
* ``devices`` is the device set the policy takes on the chosen node (for a share, the device
  the policy scored; for whole GPUs, the cache's default choice, ``app.core.gpu.links.choose``,
  the same rule the policy's table and the simulator apply).

``app.sim.openb`` runs the same ``default_policy`` in the paper's experiment, so the figures
reported there are the live policy's.
"""

from __future__ import annotations

import threading

import numpy as np

from app.core.gpu.ask import MIB_MILLI, MILLI, GpuAsk, PodAsk
from app.core.gpu.table import GpuTable
from app.core.model.values import Pod
from app.core.policies.fgd import LiveGpuPolicy
from app.core.policies.gpushare import DeviceRanking
from app.core.policies.interfaces import MAX_NODE_SCORE
from app.core.state.recent import RecentKeys
from app.core.state.view import NodeView

#: Pods remembered as already observed (a pod is retried many times; count it once).
_SEEN = 50_000


def node_table(view: NodeView, skeleton: GpuTable | None = None) -> GpuTable:
    """``view`` as a ``GpuTable`` (rows as the view's). ``skeleton``: an earlier result for
    the same node set, whose per-node facts are reused (only usage is filled in)."""
    free = view.free
    if skeleton is None:
        return GpuTable.from_state(
            view.nodes,
            view.gpu_free,
            (view.allocatable[:, 1], free[:, 1]),
            (view.allocatable[:, 2] // MIB_MILLI, free[:, 2] // MIB_MILLI),
        )
    return skeleton.with_usage(view.gpu_free, free[:, 1], free[:, 2] // MIB_MILLI)


def _patched(last: DeviceRanking, fresh: DeviceRanking | None, rows: np.ndarray) -> DeviceRanking:
    """``last`` with ``rows`` replaced by ``fresh`` (a ranking of those rows alone; ``None``:
    no row changed)."""
    if fresh is None:
        return last
    cost = last.cost.copy()
    cost[rows] = fresh.cost
    if last.device is None or fresh.device is None:  # the same ask: both or neither
        return DeviceRanking(cost)
    device = last.device.copy()
    device[rows] = fresh.device
    return DeviceRanking(cost, device)


class GpuPlacement:
    """A live GPU policy (Muster's default: ``fgd.default_policy()``, chosen by the
    composition root ``app.wiring``) over the cluster cache; thread-safe."""

    def __init__(self, policy: LiveGpuPolicy) -> None:
        self.policy = policy
        self._lock = threading.Lock()
        self._seen: RecentKeys[str] = RecentKeys(_SEEN)
        self._table: tuple[NodeView, GpuTable] | None = None
        self._last: tuple[NodeView, PodAsk, object, DeviceRanking] | None = None

    def observe(self, pod: Pod) -> None:
        """Count ``pod`` in the learned mix the first time it is seen."""
        with self._lock:
            if self._seen.add(pod.uid):
                self.policy.observe(PodAsk.of(pod))

    def table(self, view: NodeView) -> GpuTable:
        """The policy's table for ``view`` (built once per view)."""
        memo = self._table
        if memo is not None and memo[0] is view:
            return memo[1]
        same_nodes = memo is not None and memo[0].table is view.table
        table = node_table(view, memo[1] if same_nodes and memo is not None else None)
        self._table = (view, table)
        return table

    @staticmethod
    def applies(view: NodeView) -> bool:
        """Whether the cluster has GPUs at all (else GPU-blind scoring is as good)."""
        return bool(len(view.nodes)) and bool(view.allocatable[:, 0].any())

    def rank(self, view: NodeView, pod: Pod) -> DeviceRanking:
        """The policy's cost (and share device) per row of ``view`` for ``pod``."""
        with self._lock:
            # The cost depends on the view, the ask and the learned mix alone: pods of one
            # shape share it until usage changes or the mix is recompiled.
            ask, mix = PodAsk.of(pod), self.policy.mix()
            last = self._last
            if last is not None and last[1] == ask and last[2] is mix:
                if last[0] is view:
                    return last[3]
                # A bind or a hold changed a node or two: rank only those again (each row's
                # cost depends on that row alone).
                changed = view.changed_rows(last[0])
                if changed is not None:
                    table = self.table(view)
                    fresh = self.policy.rank(table.take(changed), ask) if len(changed) else None
                    ranking = _patched(last[3], fresh, changed)
                    self._last = (view, ask, mix, ranking)
                    return ranking
            ranking = self.policy.rank(self.table(view), ask)
            self._last = (view, ask, mix, ranking)
            return ranking

    def scores(self, view: NodeView, pod: Pod, rows: np.ndarray) -> np.ndarray:
        """0-10 per row of ``rows`` (rows of ``view``): 10 for the policy's pick only."""
        self.observe(pod)
        cost = self.rank(view, pod).cost[rows]
        out = np.zeros(len(rows), dtype=np.int64)
        finite = np.isfinite(cost)
        if not finite.any():
            return out
        low = cost[finite].min()
        # Costs are milli-GPU lost; differences below one GPU's worth stay within a point or
        # two, so near-ties (float noise included) do not look like a gulf to kube-scheduler.
        spread = max(float(cost[finite].max() - low), float(MILLI))
        scaled = (MAX_NODE_SCORE - 1) - np.floor(
            (MAX_NODE_SCORE - 1) * (cost[finite] - low) / spread
        )
        out[finite] = np.clip(scaled, 0, MAX_NODE_SCORE - 1).astype(np.int64)
        out[int(np.argmin(np.where(finite, cost, np.inf)))] = MAX_NODE_SCORE
        return out

    def devices(self, view: NodeView, pod: Pod, node: str) -> tuple[int, ...] | None:
        """The device the policy takes for a share on ``node`` (None: the cache's default
        choice, which is the policy's for whole GPUs)."""
        row = view.index.get(node)
        if not GpuAsk.of(pod).shared or row is None:
            return None
        ranking = self.rank(view, pod)
        if ranking.device is None or not np.isfinite(ranking.cost[row]):
            return None
        return (int(ranking.device[row]),)
