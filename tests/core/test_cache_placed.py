"""``Snapshot.placed_generation``: it stays the same only while nodes, node usage, holds and
every pod that holds, is binding to or is planned onto a node stay exactly as they were, so
what is derived from those alone may be kept across pending pods coming and going
(``SnapshotMemo.steady``). Checked after random sequences of cache events."""

from __future__ import annotations

import contextlib
import random
from dataclasses import replace
from typing import Any

import pytest

from app.core.model.errors import BindRejected
from app.core.model.parse import pod_from_dict
from app.core.model.values import Pod, Resources
from app.core.state.cache import ClusterCache
from app.core.state.view import Snapshot
from tests.factories import node, pod_json

NODES = ("a", "b", "c")


def _pod(name: str, *, gpu: int, node_name: str = "", runtime: str = "30m") -> Pod:
    data = pod_json(name, uid=f"uid-{name}", gpu=gpu, node=node_name,
                    annotations={"muster.io/expected-runtime": runtime},
                    phase="Running" if node_name else "Pending")  # fmt: skip
    return pod_from_dict(data)


def _placed_state(snapshot: Snapshot) -> tuple[Any, ...]:
    """Everything about placed pods and nodes a steady value may read (pods by identity)."""
    counted = sorted(
        uid for uid in snapshot.pods
        if uid in snapshot.placement or uid in snapshot.reserved or uid in snapshot.assumed
    )  # fmt: skip
    return (
        snapshot.view.used.tobytes(),
        snapshot.view.gpu_free.tobytes(),
        snapshot.view.table,
        tuple(
            (
                uid,
                id(snapshot.pods[uid]),
                snapshot.placement.get(uid),
                uid in snapshot.assumed,
                snapshot.reserved.get(uid),
                snapshot.bound_at.get(uid),
                snapshot.devices.get(uid),
            )
            for uid in counted
        ),
    )


def event(cache: ClusterCache, rng: random.Random, step: int) -> None:
    pods = [p for p in (cache.pod(u) for u in list(cache.snapshot().pods)) if p is not None]
    pending = [p for p in pods if not p.node_name and not p.terminal]
    running = [p for p in pods if p.node_name and not p.terminal]
    kind = rng.choice(["add", "add", "update pending", "delete", "bind", "update running",
                       "finish", "assume", "forget", "reserve", "unreserve", "holds"])  # fmt: skip
    if kind == "add" or not pods:
        cache.upsert_pods([_pod(f"p{step}", gpu=rng.choice([0, 1, 2]))])
    elif kind == "update pending" and pending:
        p = rng.choice(pending)
        cache.upsert_pods([replace(p, annotations={**p.annotations, "x": str(step)})])
    elif kind == "delete":
        cache.delete_pod(rng.choice(pods).uid)
    elif kind == "bind" and pending:
        p = rng.choice(pending)
        cache.upsert_pods([replace(p, node_name=rng.choice(NODES))])
    elif kind == "update running" and running:
        p = rng.choice(running)
        runtime = rng.choice(["10m", "30m", "2h"])
        annotations = {**p.annotations, "muster.io/expected-runtime": runtime}
        cache.upsert_pods([replace(p, annotations=annotations)])
    elif kind == "finish" and running:
        p = rng.choice(running)
        cache.upsert_pods([replace(p, phase="Succeeded")])
    elif kind == "assume" and pending:
        with contextlib.suppress(BindRejected):  # a full node refuses: nothing changes
            cache.assume(rng.choice(pending).uid, rng.choice(NODES))
    elif kind == "forget" and pending:
        cache.forget(rng.choice(pending).uid)
    elif kind == "reserve" and pending:
        cache.reserve({rng.choice(pending).uid: rng.choice(NODES)})
    elif kind == "unreserve" and pending:
        cache.unreserve([rng.choice(pending).uid])
    elif kind == "holds":
        held = {} if rng.random() < 0.5 else {rng.choice(NODES): Resources(gpu=1000)}
        cache.set_holds("default/head" if held else "", held, 100.0 * step)


@pytest.mark.parametrize("seed", range(8))
def test_an_unchanged_placed_generation_means_unchanged_nodes_and_placed_pods(
    seed: int,
) -> None:
    rng = random.Random(seed)
    cache = ClusterCache()
    cache.upsert_nodes([node(n, gpus=4) for n in NODES])
    before = cache.snapshot()
    kept = changed = 0
    for step in range(300):
        event(cache, rng, step)
        after = cache.snapshot()
        assert after.placed_generation == cache.placed_generation
        if after.placed_generation == before.placed_generation:
            kept += 1
            assert _placed_state(after) == _placed_state(before), step
        else:
            changed += 1
            assert after.placed_generation > before.placed_generation
        before = after
    assert kept > 30 and changed > 30  # both kinds of event were played


def test_pending_pods_coming_and_going_leave_the_placed_generation() -> None:
    cache = ClusterCache()
    cache.upsert_nodes([node("a", gpus=4)])
    cache.upsert_pods([_pod("run", gpu=1, node_name="a")])
    placed = cache.snapshot().placed_generation
    assert placed > 0
    waiting = _pod("wait", gpu=2)
    cache.upsert_pods([waiting])
    cache.upsert_pods([replace(waiting, annotations={"x": "y"})])
    cache.delete_pod(waiting.uid)
    snapshot = cache.snapshot()
    assert snapshot.placed_generation == placed and snapshot.generation > placed
    runner = cache.pod("uid-run")
    assert runner is not None
    cache.upsert_pods([replace(runner, annotations={"muster.io/expected-runtime": "1h"})])
    assert cache.snapshot().placed_generation > placed  # its expected end changed
