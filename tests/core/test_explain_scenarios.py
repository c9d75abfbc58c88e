"""Explain: every category from a scenario row, with its summary and at least one fix that was
checked on the snapshot."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from app.core.insight.explain import CATEGORIES, explain_gang, explain_pod
from tests.core.scenario import NAMESPACE, Box, Job, Queue, Scenario, boxes, planner_for


@dataclass(frozen=True)
class Row:
    name: str
    scenario: Scenario
    gang: str
    category: str
    summary: str
    fix: str = ""
    state: str = "waiting"


def world(nodes: tuple[Box, ...], *jobs: Job, queues: tuple[Queue, ...] = ()) -> Scenario:
    return Scenario("", nodes, jobs, queues=queues)


ROWS = [
    Row("a planned gang is blocked by nothing",
        world(boxes(1), Job("g", 2, 4)), "g", "none", "planned on n0 (2)", state="planned"),
    Row("a running gang is blocked by nothing",
        world(boxes(1), Job("g", 2, 4, on="n0")), "g", "none", "running on n0 (2)",
        state="running"),
    Row("members still missing",
        world(boxes(1), Job("g", 2, 1, min_member=3)), "g", "gang-incomplete",
        "2 of 3 members exist; it starts once 1 more is created",
        "set muster.io/min-member to 2"),
    Row("its queue is at its limit",
        world(boxes(2), Job("busy", 1, 8, on="n0", queue="q"), Job("g", 1, 8, queue="q"),
              queues=(Queue("q", limit=8),)),
        "g", "quota", "queue q: nvidia.com/gpu 8/8 at limit (needs 8)",
        "raise queue q's nvidia.com/gpu limit to 16"),
    Row("its queue does not borrow beyond its guarantee",
        world(boxes(2), Job("busy", 1, 8, on="n0", queue="nb"), Job("g", 1, 8, queue="nb"),
              queues=(Queue("nb", guaranteed=8, borrowing=False),)),
        "g", "quota", "would exceed its guaranteed 8 and the queue does not borrow",
        "turn borrowing on for queue nb"),
    Row("its node selector matches no node",
        world(boxes(2), Job("g", 1, 1, selector="pool=missing")), "g", "constraints",
        "no node passes g-0's constraints", "drop its nodeSelector (g-0)"),
    Row("it fits, but not inside one block",
        world((Box("n0", block="b0"), Box("n1", block="b1")), Job("g", 2, 8, required="block")),
        "g", "topology", "no single block has room for 16 nvidia.com/gpu",
        "drop muster.io/topology-required: block"),
    Row("the room it fits in is held for the head of the line",
        world(boxes(2), Job("busy", 1, 8, on="n0", age=600), Job("half", 1, 4, on="n1", age=60),
              Job("big", 2, 8, age=100), Job("small", 1, 4, age=10)),
        "small", "reservation", "the room it needs is held for gang default/big",
        "declare muster.io/expected-runtime"),
    Row("the room is planned for an older gang of its queue",
        world(boxes(1), Job("first", 1, 8, age=100), Job("second", 1, 8, age=10)),
        "second", "priority", "planned for gangs ahead of it in line: default/first",
        "priority ≥ 1"),
    Row("enough GPUs free in total, but no node has 8",
        world(boxes(2), Job("a", 1, 4, on="n0", priority=5), Job("b", 1, 4, on="n1", priority=5),
              Job("g", 1, 8)),
        "g", "fragmentation", "8 nvidia.com/gpu free in total, but no node or domain",
        "ask for 2 × 4 GPU instead of 1 × 8"),
    Row("not enough GPUs free: equal-priority work holds them",
        world(boxes(1), Job("peer", 1, 8, on="n0", priority=5), Job("g", 1, 8, priority=5)),
        "g", "capacity", "needs 8 nvidia.com/gpu, 0 free on the nodes it may use",
        "priority ≥ 6"),
]  # fmt: skip


def test_every_category_has_a_row() -> None:
    assert {r.category for r in ROWS} == set(CATEGORIES)


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_explain(row: Row) -> None:
    outlook = planner_for(row.scenario).look()
    got = explain_gang(outlook, NAMESPACE, row.gang)
    body = got.as_dict()
    assert (got.state, got.category) == (row.state, row.category), body
    assert row.summary in got.summary, body
    if row.state == "waiting":
        assert any(row.fix in f.change for f in got.fixes), body["fixes"]
    else:
        assert got.eta_seconds == 0.0
    # Every member of the gang tells the same story.
    member = explain_pod(outlook, NAMESPACE, f"{row.gang}-0")
    assert (member.category, member.summary) == (got.category, got.summary)
    assert member.subject == f"pod {NAMESPACE}/{row.gang}-0"


def test_unknown_subjects_say_so() -> None:
    outlook = planner_for(world(boxes(1))).look()
    assert explain_gang(outlook, NAMESPACE, "ghost").state == "unknown"
    pod = explain_pod(outlook, NAMESPACE, "ghost")
    assert (pod.state, pod.summary) == (
        "unknown",
        "Muster has not seen pod default/ghost (is its schedulerName Muster's?)",
    )


def test_the_answer_carries_queue_gang_gpus_position_and_eta() -> None:
    row = world(
        (Box("n0", block="b0"), Box("n1", block="b0"), Box("n2", block="b1")),
        Job("busy", 2, 8, on="n0 n1", age=600, runtime="1h"),
        Job("head", 2, 8, age=50),
        Job("next", 2, 8, age=10),
        queues=(Queue("team", guaranteed=16),),
    )
    outlook = planner_for(row).look()
    got = explain_gang(outlook, NAMESPACE, "next").as_dict()
    assert got["gang"] == {"name": "default/next", "seen": 2, "needed": 2, "bound": 0}
    assert got["queue"][0]["name"] == "default"
    assert got["gpus"]["free"] == "8"
    assert got["gpus"]["largestNode"] == {"node": "n2", "wholeGpus": 8}
    assert {"level": "block", "domain": "b1", "wholeGpus": 8} in got["gpus"]["largestDomain"]
    assert got["position"] == {"queue": "default", "index": 2, "of": 2}
    head = explain_gang(outlook, NAMESPACE, "head")
    assert head.position == {"queue": "default", "index": 1, "of": 2}
    # busy started 600 s ago and declares 1 h: the head's room frees in 3000 s.
    assert head.eta_seconds == pytest.approx(3000.0)
    reasons = {r["reason"]: r["count"] for r in got["nodes"]}
    assert sum(reasons.values()) == 3


@pytest.mark.parametrize(
    ("nodes", "busy", "eta"),
    [
        # Each block holds 8 GPUs: a gang that needs 16 in one block never starts.
        ((Box("n0", block="b0"), Box("n1", block="b1")), "", None),
        # Block b0 holds 16 but n0 runs for another hour: it starts once that ends.
        ((Box("n0", block="b0"), Box("n1", block="b0"), Box("n2", block="b1")), "n0", 3600.0),
    ],
    ids=["no block is big enough", "the one big block frees later"],
)
def test_a_required_domain_bounds_the_eta(
    nodes: tuple[Box, ...], busy: str, eta: float | None
) -> None:
    jobs = [Job("busy", 1, 8, on=busy, age=0, runtime="1h")] if busy else []
    scenario = world(nodes, *jobs, Job("g", 2, 8, required="block"))
    got = explain_gang(planner_for(scenario).look(), NAMESPACE, "g")
    assert got.state == "waiting"
    assert got.eta_seconds == (None if eta is None else pytest.approx(eta))
