"""Explain's ``eta_seconds`` against the simulator: each row plays a cluster whose jobs declare
their runtimes (and run exactly that long), asks ``/explain``'s question about a waiting gang
at one instant of the run, and checks that the gang then actually starts within 20 % of the
predicted time.

The simulator runs the real extender, planner loop and bind barrier on a simulated clock
(``tests.core.scenario.simulation``), so the start is what Muster itself does, not a model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from app.core.insight.explain import explain_gang
from app.sim.policies import MusterPolicy
from tests.core.scenario import NAMESPACE, Box, Job, Queue, Scenario, boxes, simulation

#: How far a start may be from the prediction, as a fraction of the prediction.
TOLERANCE = 0.20


@dataclass(frozen=True)
class Row:
    """``gang`` is asked about ``at`` seconds after the pending jobs arrive; it must be waiting
    then, with ``category``, and start within ``TOLERANCE`` of its ETA."""

    name: str
    scenario: Scenario
    gang: str
    category: str
    at: float = 1.0
    #: Why the ETA is off today (a strict xfail).
    bug: str = ""


def world(nodes: tuple[Box, ...], *jobs: Job, queues: tuple[Queue, ...] = ()) -> Scenario:
    return Scenario("", nodes, jobs, queues=queues)


#: Two nodes busy for 3 and 4 minutes, a gang of two whole nodes first in line, one behind.
LINE = world(boxes(2), Job("a", 1, 8, on="n0", runtime="3m"),
             Job("b", 1, 8, on="n1", runtime="4m"), Job("head", 2, 8, runtime="5m", age=60),
             Job("g", 2, 8, runtime="1m", age=10))  # fmt: skip

ROWS = [
    Row("behind running work that ends at different times",
        world(boxes(3), Job("a", 1, 8, on="n0", runtime="2m"),
              Job("b", 1, 8, on="n1", runtime="5m"), Job("c", 1, 8, on="n2", runtime="9m"),
              Job("g", 2, 8, runtime="10m")),
        "g", "capacity"),
    Row("behind running work, asked later in the run",
        world(boxes(2), Job("a", 2, 4, on="n0", runtime="3m"),
              Job("b", 1, 8, on="n1", runtime="6m"), Job("g", 2, 8, runtime="1m")),
        "g", "capacity", at=100.0),
    Row("behind running work that has run a while already",
        world(boxes(2), Job("a", 1, 8, on="n0", runtime="10m", age=420),
              Job("b", 1, 8, on="n1", runtime="10m", age=300), Job("g", 1, 8, runtime="1m")),
        "g", "capacity"),
    Row("behind the head of the line",
        LINE,
        "g", "capacity"),
    Row("second in line behind the head of the line",
        world(boxes(2), Job("a", 1, 8, on="n0", runtime="3m"),
              Job("b", 1, 8, on="n1", runtime="4m"), Job("head", 2, 8, runtime="5m", age=60),
              Job("next", 2, 8, runtime="2m", age=30), Job("g", 2, 8, runtime="1m", age=10)),
        "g", "capacity"),
    Row("third in line behind the head of the line",
        world(boxes(2), Job("a", 1, 8, on="n0", runtime="3m"),
              Job("b", 1, 8, on="n1", runtime="4m"), Job("head", 2, 8, runtime="5m", age=60),
              Job("next", 1, 8, runtime="2m", age=30), Job("then", 1, 8, runtime="3m", age=20),
              Job("g", 2, 8, runtime="1m", age=10)),
        "g", "capacity"),
    Row("behind the head and a gang that leaves room beside it",
        world(boxes(3), Job("a", 1, 8, on="n0", runtime="3m"),
              Job("b", 1, 8, on="n1", runtime="4m"), Job("c", 1, 8, on="n2", runtime="20m"),
              Job("head", 2, 8, runtime="5m", age=60), Job("next", 1, 8, runtime="2m", age=30),
              Job("g", 1, 8, runtime="1m", age=10)),
        "g", "capacity"),
    Row("behind work that declares no runtime (the default runtime)",
        replace(world(boxes(2), Job("a", 1, 8, on="n0", runtime="3m"),
                      Job("b", 1, 8, on="n1"), Job("g", 2, 8, runtime="1m")),
                default_runtime=300.0),
        "g", "capacity"),
    Row("inside one block of its required topology",
        world((Box("n0", block="b0"), Box("n1", block="b0"), Box("n2", block="b1"),
               Box("n3", block="b1")),
              Job("a", 1, 8, on="n0", runtime="2m"), Job("b", 1, 8, on="n2", runtime="3m"),
              Job("c", 1, 8, on="n1", runtime="8m"), Job("d", 1, 8, on="n3", runtime="6m"),
              Job("g", 2, 8, runtime="1m", required="block")),
        "g", "capacity"),
    Row("the head of the line itself",
        LINE,
        "head", "capacity"),
    Row("only the room held for the head of the line would take it",
        world(boxes(2), Job("busy", 1, 8, on="n0", runtime="6m"),
              Job("half", 1, 4, on="n1", runtime="2m"),
              Job("big", 2, 8, runtime="4m", age=700), Job("small", 1, 4, runtime="10m", age=10)),
        "small", "reservation"),
    Row("its queue at its limit until its own work ends",
        world(boxes(3), Job("mine", 1, 8, on="n0", queue="q", runtime="4m"),
              Job("g", 1, 8, queue="q", runtime="1m"), queues=(Queue("q", limit=8),)),
        "g", "quota"),
    Row("its queue at its limit, then the room taken by others",
        world(boxes(2), Job("mine", 1, 8, on="n0", queue="q", runtime="2m"),
              Job("other", 1, 8, on="n1", queue="r", runtime="5m"),
              Job("g", 2, 8, queue="q", runtime="1m"),
              queues=(Queue("q", limit=16), Queue("r"))),
        "g", "quota"),
    Row("its queue at its limit for longer than the room is taken",
        world(boxes(3), Job("mine", 1, 8, on="n0", queue="q", runtime="7m"),
              Job("other", 1, 8, on="n1", queue="r", runtime="2m"), Job("g", 1, 8, queue="q"),
              queues=(Queue("q", limit=8), Queue("r"))),
        "g", "quota"),
]  # fmt: skip


def params() -> list[object]:
    return [
        pytest.param(
            r, id=r.name, marks=pytest.mark.xfail(strict=True, reason=r.bug) if r.bug else ()
        )
        for r in ROWS
    ]


@pytest.mark.parametrize("row", params())
def test_the_gang_starts_when_explain_says(row: Row) -> None:
    scenario = row.scenario
    sim, origin = simulation(scenario, window=3600.0, undeclared=scenario.default_runtime)
    assert isinstance(sim.policy, MusterPolicy)
    planner = sim.policy.planner
    asked: dict[str, object] = {}

    def ask() -> None:
        answer = explain_gang(planner.look(), NAMESPACE, row.gang)
        asked.update(answer.as_dict(), when=sim.clock.now)

    sim.clock.at(origin + row.at, ask)
    records = {r.name: r for r in sim.run().records}
    assert (asked["state"], asked["category"]) == ("waiting", row.category), asked
    eta = asked["eta_seconds"]
    assert isinstance(eta, float) and eta > 0, asked
    started = records[row.gang].first_started
    assert started is not None, f"{row.gang} never started; explain said {eta}s"
    waited = started - float(asked["when"])  # type: ignore[arg-type]
    assert abs(waited - eta) <= TOLERANCE * eta, f"started after {waited:.1f}s; ETA {eta}s"
