"""Explain's ``nodes`` (every node's filter verdict for a member, grouped with counts) kept
per shape of pod and found again for the rows that changed equals ``filter_nodes`` on every
node, counts and order of ties included, over random sequences of views (usage going up and
down, devices taken and freed) on clusters with taints, selectors and nodes too small."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest

from app.core.cycle.memos import SnapshotMemo
from app.core.cycle.outlook import Outlook
from app.core.insight.explain import NODE_REASONS, _node_reasons
from app.core.model.values import Pod
from app.core.state.cache import ClusterCache
from app.core.state.view import NodeView
from app.core.verbs.filter import filter_nodes
from tests.factories import node, pod


def _fresh(view: NodeView, member: Pod) -> list[dict[str, Any]]:
    """What explain listed before verdicts were kept: ``filter_nodes`` on every node."""
    result = filter_nodes(view, member, [n.name for n in view.nodes])
    counts = Counter([*result.failed.values(), *result.unresolvable.values()])
    rows = [{"reason": r, "count": c} for r, c in counts.most_common(NODE_REASONS)]
    if result.feasible:
        rows.insert(0, {"reason": "fits (for this member alone)", "count": len(result.feasible)})
    return rows


def _changed(rng: random.Random, view: NodeView) -> NodeView:
    """``view`` with a few rows' usage and devices changed (as pods start and end)."""
    used, gpu_free = view.used.copy(), view.gpu_free.copy()
    for row in rng.sample(range(len(view.nodes)), rng.randint(0, min(3, len(view.nodes)))):
        used[row] = np.maximum(used[row] + rng.choice([-1, 1]) * np.asarray(
            [rng.choice([0, 1000, 8000]) for _ in range(used.shape[1])]), 0)  # fmt: skip
        devices = int(view.allocatable[row, 0] // 1000)
        for d in range(devices):
            gpu_free[row, d] = rng.choice([0, 500, 1000, gpu_free[row, d]])
    return replace(view, used=used, gpu_free=gpu_free)


@pytest.mark.parametrize("seed", range(30))
def test_kept_verdicts_equal_filter_nodes_on_every_node(seed: int) -> None:
    rng = random.Random(seed)
    cache = ClusterCache()
    cache.upsert_nodes(
        node(f"n{i}", gpus=rng.choice([0, 2, 8]), cpu=rng.choice(["4", "64"]),
             labels={"pool": rng.choice(["x", "y"])},
             taints=[{"key": "k", "effect": "NoSchedule"}] if rng.random() < 0.2 else None)
        for i in range(rng.randint(1, 40))
    )  # fmt: skip
    view = cache.snapshot().view
    outlook = cast(Outlook, SimpleNamespace(kept=SnapshotMemo()))
    members = [
        pod(f"p{i}", gpu=rng.choice([0, 1, 4, 8]), cpu=rng.choice(["1", "16", "128"]),
            node_selector={"pool": "x"} if rng.random() < 0.3 else None)
        for i in range(3)
    ]  # fmt: skip
    for _ in range(40):
        view = _changed(rng, view) if rng.random() < 0.8 else view
        member = rng.choice(members)
        assert _node_reasons(outlook, view, member) == _fresh(view, member)
