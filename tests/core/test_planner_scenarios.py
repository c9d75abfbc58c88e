"""Gang planning through one planner cycle: whole gangs or nothing, in priority and age order."""

from __future__ import annotations

import pytest

from tests.core.scenario import Box, Job, Scenario, boxes, check, params

ROWS = [
    Scenario(
        "a gang is packed onto the partly used node",
        boxes(2),
        (Job("busy", 1, 4, on="n1"), Job("g", 4, 1)),
        placed={"g": "n1 n1 n1 n1"},
    ),
    Scenario(
        "a gang wider than a node spans whole nodes",
        boxes(3),
        (Job("g", 3, 8),),
        placed={"g": "n0 n1 n2"},
    ),
    Scenario(
        "a gang that does not fit whole places no member and holds room for itself",
        boxes(2),
        (Job("busy", 1, 8, on="n0"), Job("g", 2, 8)),
        waits={"g": "1 of 2 members placeable; needs 1 more node with 8 free nvidia.com/gpu; "
                    "reserved n0, n1, expected to start in 3600s"},
        reserved="g: n0 n1",
    ),
    Scenario(
        "a gang bigger than the cluster waits without a hold; a smaller one behind it runs",
        boxes(2),
        (Job("huge", 3, 8, age=10), Job("small", 1, 8)),
        placed={"small": "n0"},
        waits={"huge": "2 of 3 members placeable; needs 1 more node with 8 free nvidia.com/gpu"},
    ),
    Scenario(
        "higher priority first, although younger; then the older of equals",
        boxes(2),
        (Job("young", 1, 8, age=5), Job("old", 1, 8, age=50), Job("urgent", 1, 8, priority=10)),
        placed={"urgent": "n0", "old": "n1"},
        waits={"young": "0 of 1 members placeable"},
    ),
    Scenario(
        "longest-first: of equal priority and close in age, the longest declared runtime first",
        boxes(1),
        (Job("short", 1, 8, age=50, runtime="5m"), Job("long", 1, 8, age=10, runtime="9m")),
        placed={"long": "n0"},
        waits={"short": "0 of 1 members placeable"},
    ),
    Scenario(
        "longest-first: a declared runtime buys at most 10 minutes of queue position",
        boxes(1),
        (Job("old", 1, 8, age=1500), Job("long", 1, 8, runtime="5h")),
        placed={"old": "n0"},
        waits={"long": "0 of 1 members placeable"},
    ),
    Scenario(
        "longest-first: a gang that declares nothing counts as the default runtime (1 h)",
        boxes(1),
        (Job("quiet", 1, 8), Job("declared", 1, 8, age=30, runtime="9m")),
        placed={"quiet": "n0"},
        waits={"declared": "0 of 1 members placeable"},
    ),
    Scenario(
        "longest-first never outranks priority",
        boxes(1),
        (Job("long", 1, 8, runtime="9m"), Job("urgent", 1, 8, priority=10, runtime="1m")),
        placed={"urgent": "n0"},
        waits={"long": "0 of 1 members placeable"},
    ),
    Scenario(
        "a gang whose members are not all created yet waits for them",
        boxes(1),
        (Job("g", 2, 1, min_member=3),),
        waits={"g": "waiting for members: 2 of 3 exist"},
    ),
    Scenario(
        "elastic members beyond min-member take what room is left",
        boxes(1),
        (Job("busy", 1, 2, on="n0"), Job("el", 5, 2, min_member=2)),
        placed={"el": "n0 n0 n0"},
    ),
    Scenario(
        "a tainted node only takes gangs that tolerate it",
        (Box("n0", taint="dedicated"), Box("n1")),
        (Job("plain", 1, 8, age=10), Job("tolerant", 1, 8, tolerates="dedicated")),
        placed={"plain": "n1", "tolerant": "n0"},
    ),
    Scenario(
        "an intolerant gang waits although a tainted node is free",
        (Box("n0", taint="dedicated"), Box("n1")),
        (Job("busy", 1, 8, on="n1"), Job("plain", 1, 8)),
        waits={"plain": "0 of 1 members placeable"},
        reserved="plain: n1",
    ),
]  # fmt: skip


@pytest.mark.parametrize("row", params(ROWS))
def test_planner(row: Scenario) -> None:
    check(row)
