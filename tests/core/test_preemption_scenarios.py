"""Job-level preemption through one planner cycle: whole lower-priority gangs give way."""

from __future__ import annotations

import pytest

from tests.core.scenario import Box, Job, Queue, Scenario, boxes, check, params

ROWS = [
    Scenario(
        "the lowest-priority whole gang gives way",
        boxes(2),
        (Job("low", 2, 4, priority=1, on="n0"), Job("mid", 2, 4, priority=5, on="n1"),
         Job("high", 2, 4, priority=100)),
        placed={"high": "n0 n0"},
        evicted=("low",),
    ),
    Scenario(
        "two whole gangs give way when one is not enough",
        boxes(3),
        (Job("low-a", 1, 8, priority=1, on="n0"), Job("low-b", 1, 8, priority=2, on="n1"),
         Job("top", 1, 8, priority=200, on="n2"), Job("high", 2, 8, priority=100)),
        placed={"high": "n0 n1"},
        evicted=("low-a", "low-b"),
    ),
    Scenario(
        "equal priority: nobody is evicted",
        boxes(2),
        (Job("peer", 2, 8, priority=100, on="n0 n1"), Job("high", 2, 8, priority=100)),
        waits={"high": "0 of 2 members placeable; needs 2 more nodes with 8 free nvidia.com/gpu"},
        reserved="high: n0 n1",
    ),
    Scenario(
        "a gang younger than the configured min-runtime is protected",
        boxes(2),
        (Job("low", 2, 8, on="n0 n1", age=30), Job("high", 1, 8, priority=100)),
        min_runtime=60,
        waits={"high": "needs 1 more node with 8 free nvidia.com/gpu; reserved n0, expected to "
                       "start in 3570s"},
        reserved="high: n0",
    ),
    Scenario(
        "by default a gang that has just started gives way at once",
        boxes(1),
        (Job("low", 1, 8, on="n0", age=1), Job("high", 1, 8, priority=100)),
        placed={"high": "n0"},
        evicted=("low",),
    ),
    Scenario(
        "a queue's minRuntime protects its young gangs",
        boxes(2),
        (Job("young", 1, 8, on="n0", age=30, queue="safe"),
         Job("old", 1, 8, on="n1", age=30, queue="open"), Job("high", 1, 8, priority=100)),
        queues=(Queue("safe", min_runtime="1m"), Queue("open")),
        placed={"high": "n1"},
        evicted=("old",),
    ),
    Scenario(
        "a PriorityClass's minRuntime protects its gangs, over their queue's",
        boxes(2),
        (Job("kept", 1, 8, on="n0", age=120, queue="q", priority_class="protected"),
         Job("plain", 1, 8, on="n1", age=30, queue="q"), Job("high", 1, 8, priority=100)),
        queues=(Queue("q", min_runtime="1m"),),
        priority_classes={"protected": "1h"},
        waits={"high": "needs 1 more node with 8 free nvidia.com/gpu"},
        reserved="high: n0",
    ),
    Scenario(
        "a pod's own min-runtime 0 waives its queue's protection",
        boxes(1),
        (Job("waived", 1, 8, on="n0", age=5, queue="q", min_runtime="0"),
         Job("high", 1, 8, priority=100)),
        queues=(Queue("q", min_runtime="1h"),),
        placed={"high": "n0"},
        evicted=("waived",),
    ),
    Scenario(
        "a gang protected by its own min-runtime is passed over for a higher-priority one",
        boxes(2),
        (Job("low", 1, 8, priority=1, on="n0", age=600, min_runtime="1h"),
         Job("mid", 1, 8, priority=5, on="n1", age=600), Job("high", 1, 8, priority=100)),
        placed={"high": "n1"},
        evicted=("mid",),
    ),
    Scenario(
        "nothing is evicted in vain when even every victim would not make room",
        boxes(2),
        (Job("low", 1, 8, on="n0"), Job("huge", 3, 8, priority=100)),
        waits={"huge": "1 of 3 members placeable; needs 2 more nodes with 8 free nvidia.com/gpu"},
    ),
    Scenario(
        "only the victims needed: the cheap gang beside a keeper is spared",
        boxes(2),
        (Job("a", 1, 2, priority=1, on="n0"), Job("keeper", 1, 6, priority=50, on="n0"),
         Job("b", 1, 8, priority=2, on="n1"), Job("high", 1, 8, priority=100)),
        placed={"high": "n1"},
        evicted=("b",),
    ),
    Scenario(
        "elastic members beyond min-member give way before any whole gang",
        boxes(2),
        (Job("el", 4, 2, priority=1, on="n0", min_member=2), Job("low", 1, 8, priority=5, on="n1"),
         Job("high", 1, 4, priority=100)),
        placed={"high": "n0"},
        evicted=("el/elastic", "el/elastic"),
    ),
    Scenario(
        "a pod on its own in a queue gives way; another scheduler's pod never does",
        boxes(2),
        (Job("foreign", 1, 8, on="n0", solo=True),
         Job("solo", 1, 8, on="n1", solo=True, queue="default"), Job("high", 1, 8, priority=100)),
        placed={"high": "n1"},
        evicted=("solo-0",),
    ),
    Scenario(
        "preemption switched off: the gang waits",
        boxes(1),
        (Job("low", 1, 8, on="n0"), Job("high", 1, 8, priority=100)),
        preemption=False,
        waits={"high": "needs 1 more node with 8 free nvidia.com/gpu"},
        reserved="high: n0",
    ),
    Scenario(
        "victims promised to one preemptor are not offered to the next",
        (Box("n0"), Box("n1", gpus=4)),
        (Job("low", 1, 8, on="n0"), Job("high", 1, 8, priority=100),
         Job("later", 1, 8, priority=50)),
        placed={"high": "n0"},
        evicted=("low",),
        waits={"later": "needs 1 more node with 8 free nvidia.com/gpu"},
    ),
]  # fmt: skip


@pytest.mark.parametrize("row", params(ROWS))
def test_preemption(row: Scenario) -> None:
    check(row)
