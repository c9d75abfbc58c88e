"""Queues through one planner cycle: limits, borrowing, lending, fair order and reclaim."""

from __future__ import annotations

import pytest

from tests.core.scenario import Job, Queue, Scenario, boxes, check, params

TWO_TEAMS = (Queue("a", guaranteed=8), Queue("b", guaranteed=8))
BORROWED = (Job("a-old", 1, 8, queue="a", priority=50, on="n0", age=15),
            Job("a-new", 1, 8, queue="a", priority=50, on="n1", age=5))  # fmt: skip

#: What the simulator shows after the first eviction between queues a and b.
RECLAIM_LOOP = (
    "b reclaims from a, a's recreated gang (priority 50) preempts b1 (priority 0) "
    "although b is within its guarantee, b reclaims again, and so on: about one "
    "eviction a second, and no job of either queue runs"
)

ROWS = [
    Scenario(
        "a queue at its limit waits; another queue's gang runs",
        boxes(2),
        (Job("a1", 1, 8, queue="a", on="n0"), Job("a2", 1, 4, queue="a"),
         Job("b1", 1, 4, queue="b")),
        queues=(Queue("a", limit=8), Queue("b")),
        placed={"b1": "n1"},
        waits={"a2": "queue a: nvidia.com/gpu 8/8 at limit (needs 4)"},
    ),
    Scenario(
        "a parent's limit caps its children together",
        boxes(2),
        (Job("x1", 1, 8, queue="x", on="n0"), Job("y1", 1, 8, queue="y")),
        queues=(Queue("org", limit=8), Queue("x", parent="org"), Queue("y", parent="org")),
        waits={"y1": "queue org: nvidia.com/gpu 8/8 at limit (needs 8)"},
    ),
    Scenario(
        "a queue that does not borrow stays within its guarantee on an idle cluster",
        boxes(2),
        (Job("a1", 1, 8, queue="a", on="n0"), Job("a2", 1, 8, queue="a")),
        queues=(Queue("a", guaranteed=8, borrowing=False), Queue("b", guaranteed=8)),
        waits={"a2": "would exceed its guaranteed 8 and the queue does not borrow"},
    ),
    Scenario(
        "a queue borrows idle room beyond its guarantee",
        boxes(3),
        (Job("a1", 1, 8, queue="a", on="n0"), Job("a2", 1, 8, queue="a")),
        queues=TWO_TEAMS,
        placed={"a2": "n1"},
    ),
    Scenario(
        "a lending limit of 0 keeps an idle guarantee from being borrowed",
        boxes(2),
        (Job("a1", 1, 8, queue="a", on="n0"), Job("a2", 1, 8, queue="a")),
        queues=(Queue("a", guaranteed=8), Queue("b", guaranteed=8, lending_limit=0)),
        waits={"a2": "queue a: nvidia.com/gpu above its guaranteed 8 and only 0 is lent by "
                     "other queues (needs 8)"},
    ),
    Scenario(
        "a queue below its guarantee reclaims the newest borrowed gang, whatever its priority",
        boxes(2),
        (*BORROWED, Job("b1", 1, 8, queue="b")),
        queues=TWO_TEAMS,
        placed={"b1": "n1"},
        evicted=("a-new",),
        waits={"b1": "waiting for 1 evicted pods to leave (default/a-new)"},
        sim_bug=RECLAIM_LOOP,
    ),
    Scenario(
        "priority does not take from another queue within its guarantee",
        boxes(2),
        (Job("a-old", 1, 8, queue="a", priority=50, on="n0", age=500),
         Job("b1", 1, 8, queue="b", on="n1", age=100), Job("a-new", 1, 8, queue="a", priority=50)),
        queues=TWO_TEAMS,
        waits={"a-new": "0 of 1 members placeable"},
        reserved="a-new: n0",
        bug="a-new preempts b1 by priority although b holds no more than its guarantee and a "
            "would borrow",
        sim_bug=RECLAIM_LOOP,
    ),
    Scenario(
        "no reclaim beyond the guarantee: the claim waits",
        boxes(2),
        (*BORROWED, Job("b1", 2, 8, queue="b")),
        queues=TWO_TEAMS,
        waits={"b1": "0 of 2 members placeable; needs 2 more nodes with 8 free nvidia.com/gpu"},
        reserved="b1: n0 n1",
    ),
    Scenario(
        "reclaim takes from the borrower, not from a queue at its guarantee",
        boxes(2),
        (Job("a1", 1, 8, queue="a", on="n0"), Job("c1", 1, 8, queue="c", on="n1", age=100),
         Job("b1", 1, 8, queue="b")),
        queues=(*TWO_TEAMS, Queue("c")),
        placed={"b1": "n1"},
        evicted=("c1",),
    ),
    Scenario(
        "the queue with the smaller share is served first, although its gang is younger",
        boxes(1),
        (Job("a0", 1, 4, queue="a", on="n0"), Job("a1", 1, 4, queue="a", age=60),
         Job("b1", 1, 4, queue="b")),
        queues=(Queue("a"), Queue("b")),
        placed={"b1": "n0"},
        waits={"a1": "0 of 1 members placeable"},
        reserved="a1: n0",
    ),
    Scenario(
        "a gang naming an unknown queue waits",
        boxes(1),
        (Job("g", 1, 1, queue="ghost"),),
        queues=(Queue("a"),),
        waits={"g": "queue ghost does not exist"},
    ),
]  # fmt: skip


@pytest.mark.parametrize("row", params(ROWS))
def test_queues(row: Scenario) -> None:
    check(row)
