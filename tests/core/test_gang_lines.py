"""Every gang at once (the dashboard's list): the same state, category, summary and ETA as
``/explain`` gives each gang alone; computed at most once per planner cycle."""

from __future__ import annotations

import pytest

from app.core.cycle.outlook import Outlook
from app.core.insight.explain import explain_gang
from app.core.insight.headlines import GangLines, explain_gangs
from tests.core.scenario import NAMESPACE, planner_for
from tests.core.test_explain_scenarios import ROWS, Row


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_each_line_tells_what_explain_tells(row: Row) -> None:
    outlook = planner_for(row.scenario).look()
    lines = explain_gangs(outlook)
    assert [line.key for line in lines] == sorted(outlook.gangs)
    for line in lines:
        alone = explain_gang(outlook, *line.key.split("/"))
        got = line.answer
        assert (got.state, got.category, got.summary) == (
            alone.state, alone.category, alone.summary
        )  # fmt: skip
        assert got.eta_seconds == alone.eta_seconds
        assert got.fixes == [] and got.nodes == []  # brief: no fixes or node reasons
        if alone.queue:  # its own queue first
            assert line.queue == alone.queue[0]["name"]
    mine = next(line for line in lines if line.key == f"{NAMESPACE}/{row.gang}")
    assert (mine.answer.state, mine.answer.category) == (row.state, row.category)


def test_lines_are_computed_once_per_cycle_and_while_fresh() -> None:
    planner = planner_for(ROWS[2].scenario)
    looks = 0
    now = 0.0
    cycle = 1

    def look() -> Outlook:
        nonlocal looks
        looks += 1
        return planner.look()

    lines = GangLines(look, lambda: cycle, lambda: now, max_age=2.0)
    first = lines()
    assert lines() is first and looks == 1  # same cycle, fresh
    cycle = 2
    assert lines() is not first and looks == 2  # a cycle ran
    now = 5.0
    lines()
    assert looks == 3  # too old
