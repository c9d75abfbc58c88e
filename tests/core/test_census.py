"""The census behind the metrics: gangs by state and category, queue books, fragmentation of
free GPUs against the largest waiting ask, and the start first promised to a waiting gang."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from app.core.insight.census import CensusTaker, census
from app.core.insight.explain import explain_gang
from tests.core.scenario import NAMESPACE, NOW, Box, Job, Queue, Scenario, boxes, planner_for
from tests.factories import node


@dataclass(frozen=True)
class Row:
    name: str
    scenario: Scenario
    states: dict[str, int]
    #: category -> waiting gangs (the rest 0)
    categories: dict[str, int]
    #: (free, largest whole block, largest waiting ask, unusable free), in GPUs
    gpus: tuple[float, int, float, float]
    ratio: float
    #: queue -> (usage, pending) in GPUs
    queues: dict[str, tuple[float, float]] = field(default_factory=dict)


def world(nodes: tuple[Box, ...], *jobs: Job, queues: tuple[Queue, ...] = ()) -> Scenario:
    return Scenario("", nodes, jobs, queues=queues)


ROWS = [
    Row("nothing waits: a planned gang",
        world(boxes(1), Job("g", 2, 4)),
        {"planned": 1}, {}, (0, 0, 0, 0), 0.0, {"default": (8, 0)}),
    Row("two half-full nodes and a gang asking 8 per member",
        world(boxes(2), Job("a", 1, 4, on="n0", priority=5), Job("b", 1, 4, on="n1", priority=5),
              Job("g", 1, 8)),
        {"running": 2, "waiting": 1}, {"fragmentation": 1}, (8, 4, 8, 8), 1.0,
        {"default": (8, 8)}),
    Row("a 4-GPU ask fits on one node but not the other",
        world(boxes(2), Job("a", 1, 6, on="n0", priority=5), Job("b", 1, 4, on="n1", priority=5),
              Job("g", 2, 4)),
        {"running": 2, "waiting": 1}, {"capacity": 1}, (6, 4, 4, 2), 2 / 6),
    Row("full: nothing free to fragment",
        world(boxes(1), Job("peer", 1, 8, on="n0", priority=5), Job("g", 1, 8, priority=5)),
        {"running": 1, "waiting": 1}, {"capacity": 1}, (0, 0, 8, 0), 0.0),
    Row("a queue at its limit",
        world(boxes(2), Job("busy", 1, 8, on="n0", queue="q"), Job("g", 1, 8, queue="q"),
              queues=(Queue("q", limit=8),)),
        {"running": 1, "waiting": 1}, {"quota": 1}, (8, 8, 8, 0), 0.0, {"q": (8, 8)}),
    Row("members still missing",
        world(boxes(1), Job("g", 2, 1, min_member=3)),
        {"waiting": 1}, {"gang-incomplete": 1}, (8, 8, 1, 0), 0.0),
    Row("an ask no node could ever hold is not fragmentation",
        world(boxes(2), Job("a", 1, 4, on="n0", priority=5), Job("huge", 1, 16)),
        {"running": 1, "waiting": 1}, {"capacity": 1}, (12, 8, 0, 0), 0.0),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_census(row: Row) -> None:
    outlook = planner_for(row.scenario).look()
    got = census(outlook)
    assert {k: v for k, v in got.states.items() if v} == row.states
    assert {k: v for k, v in got.categories.items() if v} == row.categories
    f = got.fragmentation
    assert (f.free, f.largest_block, f.ask, f.unusable) == row.gpus
    assert f.ratio == pytest.approx(row.ratio)
    books = {b.name: b for b in got.queues}
    for queue, (usage, pending) in row.queues.items():
        assert (books[queue].usage[0] / 1000, books[queue].pending[0] / 1000) == (usage, pending)
    # Every waiting gang is listed with the category explain gives it.
    for gang in got.waiting:
        name = gang.key.split("/", 1)[1]
        assert explain_gang(outlook, NAMESPACE, name).category == gang.category
    assert len(got.waiting) == row.states.get("waiting", 0)


def test_a_queue_book_has_guarantee_limit_borrowing_and_fair_share() -> None:
    row = world(
        boxes(2),
        Job("mine", 1, 8, on="n0", queue="a"),
        Job("theirs", 1, 8, on="n1", queue="b"),
        Job("more", 1, 8, queue="a"),
        queues=(Queue("a", guaranteed=4, limit=12), Queue("b", guaranteed=12)),
    )
    got = {b.name: b for b in census(planner_for(row).look()).queues}
    a, b = got["a"], got["b"]
    assert (a.usage[0], a.guaranteed[0], a.limit[0]) == (8000, 4000, 12000)
    assert (a.borrowed[0], a.pending[0], a.waiting_gangs) == (4000, 8000, 1)
    assert (b.usage[0], b.guaranteed[0], b.borrowed[0]) == (8000, 12000, 0)
    assert b.lent[0] == 4000  # a borrows what b leaves idle of its guarantee
    assert a.fair_share[0] + b.fair_share[0] == 16000


def test_the_oldest_waiting_gangs_are_listed_with_their_eta() -> None:
    row = world(
        boxes(1),
        Job("busy", 1, 8, on="n0", age=600, runtime="1h", priority=9),
        Job("old", 1, 8, age=300),
        Job("new", 1, 8, age=10),
    )
    got = census(planner_for(row).look(), max_gangs=1)
    (old,) = got.waiting
    assert (old.key, old.category, old.created) == (f"{NAMESPACE}/old", "capacity", NOW - 300)
    assert old.eta_start == pytest.approx(NOW + 3000)  # busy ends 3000 s from now
    assert got.unlisted == 1 and got.categories["capacity"] == 2


def test_the_first_promised_start_is_kept_while_the_gang_waits() -> None:
    row = world(
        boxes(1),
        Job("busy", 1, 8, on="n0", age=3500, runtime="1h", priority=9),
        Job("g", 1, 8, age=60),
    )
    outlook = planner_for(row).look()
    clock = [NOW]
    taker = CensusTaker(lambda: replace(outlook, now=clock[0]))
    first = taker.take().waiting[0]
    assert first.promised_start == pytest.approx(NOW + 100)  # busy should end in 100 s
    clock[0] = NOW + 400  # busy overran its declared runtime; the gang still waits
    later = taker.take().waiting[0]
    assert later.promised_start == first.promised_start
    assert later.created == NOW - 60
    fresh = CensusTaker(lambda: replace(outlook, now=clock[0])).take().waiting[0]
    assert fresh.eta_start == pytest.approx(NOW + 400)  # explained now: expected now
    assert fresh.promised_start == fresh.eta_start  # a new taker knows no earlier promise
    gone = CensusTaker(lambda: replace(planner_for(world(boxes(1))).look(), now=clock[0]))
    assert gone.take().waiting == ()


def test_changed_gangs_are_judged_again_within_the_budget() -> None:
    row = world(
        boxes(1),
        Job("busy", 1, 8, on="n0", priority=9),
        Job("a", 1, 8, age=30),
        Job("b", 1, 8, age=20),
        Job("c", 1, 8, age=10),
    )
    planner = planner_for(row)
    ticks = iter(range(1000))
    # every reading of the timer is one second later: one judgement per census
    taker = CensusTaker(planner.look, budget=1.0, timer=lambda: float(next(ticks)))
    progress = []
    for _ in range(4):
        got = taker.take()
        progress.append((got.categories["capacity"], got.unjudged, got.stale))
    assert progress == [(1, 2, 0), (2, 1, 0), (3, 0, 0), (3, 0, 0)]
    assert [g.key for g in got.waiting] == [f"{NAMESPACE}/{n}" for n in "abc"]
    # The cluster changes: every judgement is stale until judged again, oldest first.
    planner._cache.upsert_node(node("n1", gpus=8, labels={"pool": "late"}))
    stale = [taker.take().stale for _ in range(4)]
    assert stale == [2, 1, 0, 0]
