"""Head-of-line reservation and backfill through one planner cycle on a fixed clock.

In ``HOLE`` the head gang ``big`` needs both nodes: n0 frees in 70 s, n1 (half used) in
270 s, so both are held from +270 s and n1's four free GPUs are a hole only work that ends by
then may use.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.core.scenario import Job, Scenario, boxes, check, params

HOLE = (Job("r0", 1, 8, on="n0", age=30, runtime="100s"),
        Job("r1", 1, 4, on="n1", age=30, runtime="300s"), Job("big", 2, 8, age=10))  # fmt: skip
BIG_WAITS = {"big": "2 more nodes with 8 free nvidia.com/gpu; reserved n0, n1, expected to "
                    "start in 270s"}  # fmt: skip


def behind_big(name: str, job: Job, **expected: Any) -> Scenario:
    """``job`` arrives behind ``big`` in ``HOLE``; ``big`` waits, holding n0 and n1."""
    waits = {**BIG_WAITS, **expected.pop("waits", {})}
    return Scenario(name, boxes(2), (*HOLE, job), waits=waits, reserved="big: n0 n1", **expected)


ROWS = [
    behind_big("a short job fills the hole held for the head",
               Job("short", 1, 4, runtime="200s"), placed={"short": "n1"}),
    behind_big("a job ending exactly when the head is due may use the hole",
               Job("short", 1, 4, runtime="4m30s"), placed={"short": "n1"}),
    behind_big("a job running past the head's start is kept out",
               Job("long", 1, 4, runtime="271s"), waits={"long": "0 of 1 members placeable"}),
    behind_big("a job that declares no runtime is kept out",
               Job("long", 1, 4), waits={"long": "0 of 1 members placeable"}),
    behind_big("a short gang must fit the hole whole",
               Job("pair", 2, 4, runtime="60s"), waits={"pair": "1 of 2 members placeable"}),
    Scenario(
        "room outside the held nodes is open to any work",
        boxes(3),
        (Job("r0", 1, 8, on="n0", runtime="100s"), Job("r1", 1, 8, on="n1", runtime="1h"),
         Job("r2", 1, 4, on="n2", runtime="2h"), Job("big", 2, 8), Job("long", 1, 4)),
        placed={"long": "n2"},
        waits={"big": "reserved n0, n1, expected to start in 3600s"},
        reserved="big: n0 n1",
    ),
    Scenario(
        "the nodes that free soonest are held",
        boxes(3),
        (Job("r0", 1, 8, on="n0", runtime="300s"), Job("r1", 1, 8, on="n1", runtime="100s"),
         Job("r2", 1, 8, on="n2", runtime="200s"), Job("big", 2, 8)),
        waits={"big": "reserved n1, n2, expected to start in 200s"},
        reserved="big: n1 n2",
    ),
    Scenario(
        "running work without a declared runtime is expected to take the default",
        boxes(1),
        (Job("r0", 1, 8, on="n0", age=100), Job("big", 1, 8)),
        default_runtime=600,
        waits={"big": "reserved n0, expected to start in 500s"},
        reserved="big: n0",
    ),
    Scenario(
        "the head of the line is the higher-priority gang, not the older one",
        boxes(2),
        (Job("r0", 1, 8, on="n0", age=600, runtime="700s"),
         Job("r1", 1, 8, on="n1", age=600, runtime="800s"),
         Job("old", 1, 8, age=60), Job("urgent", 2, 8, priority=10)),
        preemption=False,
        waits={"old": "0 of 1 members placeable", "urgent": "expected to start in 200s"},
        reserved="urgent: n0 n1",
    ),
]  # fmt: skip


@pytest.mark.parametrize("row", params(ROWS))
def test_backfill(row: Scenario) -> None:
    check(row)
