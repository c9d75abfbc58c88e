"""Every row of the area tables through one planner cycle and through the simulator.

In the simulator the running jobs arrive first (pinned to their nodes) and start; then the
pending ones appear together, and kube-scheduler, the extender, the planner loop and the bind
barrier take it from there on a simulated clock. The gangs that start within the first seconds
must be exactly those one cycle plans, on the same nodes, with the same gangs evicted. (Whether
that is right is the area tables' business: a row they mark as a bug may agree here.)
"""

from __future__ import annotations

import pytest

from tests.core import (
    test_backfill_scenarios,
    test_planner_scenarios,
    test_preemption_scenarios,
    test_reclaim_scenarios,
    test_topology_scenarios,
)
from tests.core.scenario import Scenario, check_simulated, params

#: Rows the simulator reports in other terms, and why.
APART = {
    "elastic members beyond min-member take what room is left":
        "a job starts once min-member pods run; elastic ones follow",
    "elastic members beyond min-member give way before any whole gang":
        "evicting any member interrupts the whole job",
    "a pod on its own in a queue gives way; another scheduler's pod never does":
        "it names evicted jobs, not pods",
    "a job ending exactly when the head is due may use the hole":
        "binds take a few milliseconds, so the reservation is not due exactly then",
}  # fmt: skip

TABLES = (test_planner_scenarios, test_preemption_scenarios, test_reclaim_scenarios,
          test_backfill_scenarios, test_topology_scenarios)  # fmt: skip
ROWS: list[Scenario] = [row for t in TABLES for row in t.ROWS if row.name not in APART]


def test_every_row_set_apart_exists() -> None:
    names = {row.name for t in TABLES for row in t.ROWS}
    assert set(APART) <= names


@pytest.mark.parametrize("row", params(ROWS, simulated=True))
def test_simulator_agrees_with_one_cycle(row: Scenario) -> None:
    check_simulated(row)
