"""allocate: place a whole gang at once on a node view, or say why it cannot be placed.

Members are placed largest first, each on the eligible node that scores best under the
packing strategy, with nodes already chosen for this gang preferred on ties (fewer nodes per
gang). Everything filter checks applies: resources against what is free (reservations
included), cordons, taints, node selectors and affinity.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from app.core.gpu.ask import GpuAsk, fits_mask, take
from app.core.gpu.ledger import default_choice, device_count
from app.core.model.values import Pod, Resources
from app.core.policies.registry import Constraint, constraint_of, eligible, scorer
from app.core.state.cache import NodeView, shortfall

#: Tie-breaker weight for nodes the gang already uses (below one score point).
_LOCALITY = 0.5


@dataclass(slots=True)
class Allocation:
    """Where each placed member goes (``uid -> node``), the GPU devices chosen for it there
    (GPU members only), and which members found no room."""

    placed: dict[str, str] = field(default_factory=dict)
    devices: dict[str, tuple[int, ...]] = field(default_factory=dict)
    unplaced: list[Pod] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether every member found a node."""
        return not self.unplaced


def allocate(
    view: NodeView,
    members: Sequence[Pod],
    *,
    strategy: str = "binpack",
    allowed: Mapping[str, np.ndarray] | None = None,
) -> Allocation:
    """Place ``members`` together on ``view``; ``allowed[uid]`` may narrow a member's nodes."""
    result = Allocation()
    if not len(view.nodes):
        result.unplaced = list(members)
        return result
    policy = scorer(strategy)
    used = view.used.copy()
    working = replace(view, used=used)
    chosen = np.zeros(len(view.nodes), dtype=bool)
    gpu_free = view.gpu_free.copy()
    all_rows = np.arange(len(view.nodes))
    masks: dict[Constraint, np.ndarray] = {}
    for pod in sorted(
        members, key=lambda p: (-p.requests.gpu, -p.requests.cpu, -p.requests.memory)
    ):
        signature = constraint_of(pod)
        mask = masks.get(signature)
        if mask is None:
            mask = masks[signature] = eligible(view, pod)
        need = np.asarray(pod.requests, dtype=np.int64)
        ok = mask & ((view.allocatable - used) >= need).all(axis=1)
        ask = GpuAsk.of(pod)
        if ask.count:
            ok &= fits_mask(gpu_free, ask)
        if allowed is not None and pod.uid in allowed:
            ok &= allowed[pod.uid]
        if not ok.any():
            result.unplaced.append(pod)
            continue
        rows = all_rows[ok]
        scores = policy.score(working, rows, pod.requests) + _LOCALITY * chosen[rows]
        row = int(rows[int(np.argmax(scores))])
        used[row] += need
        if ask.count:
            node = view.nodes[row]
            free = gpu_free[row, : device_count(node)]
            devices = default_choice(node, free.tolist(), ask)
            assert devices is not None  # fits_mask said so
            take(free, ask, devices)
            result.devices[pod.uid] = devices
        chosen[row] = True
        result.placed[pod.uid] = view.nodes[row].name
    return result


def why_unplaced(view: NodeView, allocation: Allocation, total: int) -> str:
    """``"12 of 16 members placeable; needs 2 more nodes with 8 free nvidia.com/gpu"``."""
    placed = total - len(allocation.unplaced)
    head = f"{placed} of {total} members placeable"
    groups = Counter(p.requests for p in allocation.unplaced)
    parts = [_need(view, request, count) for request, count in groups.items()]
    return head + "; " + "; ".join(parts) if parts else head


def _need(view: NodeView, request: Resources, count: int) -> str:
    if request.gpu > 0:
        per_node = int(max(view.allocatable[:, 0].max(initial=0) // request.gpu, 1))
        nodes = math.ceil(count / per_node)
        free = request.gpu * min(count, per_node) // 1000
        noun = "node" if nodes == 1 else "nodes"
        return f"needs {nodes} more {noun} with {free} free nvidia.com/gpu"
    best = view.allocatable - view.used
    row = int(np.argmax(best[:, 1])) if len(best) else 0
    what = shortfall(request, best[row]) if len(best) else "no nodes"
    return f"{count} more member(s) each {what or 'blocked by node constraints'}"
