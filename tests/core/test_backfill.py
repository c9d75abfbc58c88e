"""Head-of-line reservation and backfill, as scenarios with a fixed wall clock."""

from __future__ import annotations

from dataclasses import replace

from app.core.actions.backfill import reserve_for
from app.core.model.runtime import parse_duration
from tests.core.gangsim import Cluster
from tests.factories import EPOCH, node, pod

NOW = EPOCH.timestamp() + 1000  # pods below started at EPOCH + started seconds


def running(name: str, gpu: int, where: str, started: float, runtime: str) -> object:
    p = pod(
        name,
        gpu=gpu,
        node=where,
        phase="Running",
        annotations={"muster.io/expected-runtime": runtime},
    )
    return replace(p, started=EPOCH.timestamp() + started)


def gang(name: str, size: int, gpu: int, created: int, runtime: str | None = None) -> list:
    labels = {"muster.io/pod-group": name, "muster.io/min-member": str(size)}
    ann = {"muster.io/expected-runtime": runtime} if runtime else {}
    return [
        pod(f"{name}-{i}", gpu=gpu, labels=labels, annotations=ann, created=created)
        for i in range(size)
    ]


def busy_cluster() -> Cluster:
    c = Cluster([node("n0", gpus=8), node("n1", gpus=8)], wall=lambda: NOW)  # a fixed wall clock
    c.cache.upsert_pods(
        [
            running("a", 8, "n0", started=900, runtime="200s"),  # ends at +1100
            running("b", 4, "n1", started=900, runtime="150s"),  # ends at +1050
            running("c", 2, "n1", started=900, runtime="1h"),  # ends much later
        ]
    )
    return c


def test_durations() -> None:
    assert [parse_duration(t) for t in ["90", "1h30m", "45m", "10s", "0", "soon", ""]] == [
        90, 5400, 2700, 10, None, None, None,
    ]  # fmt: skip


def test_reservation_takes_the_nodes_that_free_soonest() -> None:
    c = busy_cluster()
    big = gang("big", 1, 8, created=1)
    c.cache.upsert_pods(big)
    reservation = reserve_for(c.cache.snapshot(), "default/big", big, now=NOW, default_runtime=3600)
    assert reservation is not None
    assert reservation.holds == {"n0": big[0].requests}
    assert reservation.start == EPOCH.timestamp() + 1100


def test_held_room_goes_only_to_work_that_ends_before_the_reservation() -> None:
    c = busy_cluster()
    big = gang("big", 1, 8, created=1)  # first in line, cannot start before +1100
    c.cache.upsert_pods(big)
    c.extender.planner.cycle(force=True)
    owner, holds, until = c.cache.holds
    assert owner == "default/big" and set(holds) == {"n0"}
    reasons = {r["gang"]: r["reason"] for r in c.extender.planner.describe()}
    assert reasons["default/big"].endswith("reserved n0, expected to start in 100s")
    # n1 has 2 free GPUs; nothing is free on n0 anyway. Free n0 partly: a shorter job leaves.
    c.cache.delete_pod(next(p.uid for p in c.cache.snapshot().pods.values() if p.name == "a"))
    c.cache.upsert_pod(running("a2", 4, "n0", started=990, runtime="60s"))  # n0: 4 free now
    long = gang("long", 1, 4, created=2)  # no declared runtime: must not take held n0 room
    short = gang("short", 1, 4, created=3, runtime="50s")  # ends at +1050 < reservation start
    c.cache.upsert_pods(long + short)
    c.extender.planner.cycle(force=True)
    assert c.extender.planner.plan("default/long") is None
    plan = c.extender.planner.plan("default/short")
    assert plan is not None and set(plan.members.values()) == {"n0"}
    # a plain pod follows the same rule in filter
    plain_long = pod("plain", gpu=2)
    plain_short = pod("quick", gpu=2, annotations={"muster.io/expected-runtime": "10s"})
    c.cache.upsert_pods([plain_long, plain_short])
    assert "n0" not in c.extender.filter(plain_long, ["n0"]).feasible


def test_holds_are_lifted_when_the_head_starts() -> None:
    c = Cluster([node("n0", gpus=8)])
    blocker = pod("blocker", gpu=8, node="n0", phase="Running")
    c.cache.upsert_pod(blocker)
    big = gang("big", 1, 8, created=1)
    c.cache.upsert_pods(big)
    c.extender.planner.cycle(force=True)
    assert c.cache.holds[0] == "default/big"
    c.cache.delete_pod(blocker.uid)
    c.extender.planner.cycle(force=True)
    assert c.extender.planner.plan("default/big") is not None
    assert c.cache.holds[1] == {}
