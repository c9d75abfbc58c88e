"""The gang order policies (``app.core.policies.gangorder``) on their own."""

from __future__ import annotations

import pytest

from app.core.model import labels
from app.core.model.gang import Gang
from app.core.model.runtime import EXPECTED_RUNTIME
from app.core.policies.gangorder import Fifo, LongestFirst, gang_order, runtime
from app.core.policies.interfaces import GangOrder
from tests.factories import pod


def gang(name: str, created: float, *runtimes: str, priority: int = 0) -> Gang:
    """A gang of one pod per entry of ``runtimes`` ("" declares none), created at ``created``."""
    members = []
    for i, declared in enumerate(runtimes or ("",)):
        extra = {EXPECTED_RUNTIME: declared} if declared else {}
        members.append(
            pod(
                f"{name}-{i}",
                created=created,
                priority=priority,
                labels={labels.POD_GROUP: name, labels.MIN_MEMBER: "1", **extra},
            )
        )
    return Gang("default", name, members=members, min_member=1)


def order(policy: GangOrder, *gangs: Gang) -> list[str]:
    return [g.name for g in sorted(gangs, key=policy.key)]


@pytest.mark.parametrize(
    ("gangs", "fifo", "longest"),
    [
        pytest.param(
            (gang("a", 0, "2m"), gang("b", 5, "4m"), gang("c", 10, "3m")),
            ["a", "b", "c"],
            ["b", "c", "a"],
            id="submitted together: longest first",
        ),
        pytest.param(
            (gang("old", 0), gang("new", 700, "1h")),
            ["old", "new"],
            ["old", "new"],
            id="credit capped at the window",
        ),
        pytest.param(
            (gang("declared", 0, "9m"), gang("quiet", 30)),
            ["declared", "quiet"],
            ["quiet", "declared"],
            id="no declaration: the default runtime",
        ),
        pytest.param(
            (gang("long", 0, "9m"), gang("urgent", 5, "1m", priority=5)),
            ["urgent", "long"],
            ["urgent", "long"],
            id="priority first",
        ),
        pytest.param(
            (gang("x", 0, "1m", "5m"), gang("y", 0, "4m")),
            ["x", "y"],
            ["x", "y"],
            id="a gang runs as long as its longest member",
        ),
        pytest.param(
            (gang("b", 0, "bogus"), gang("a", 0, "3h")),
            ["a", "b"],
            ["a", "b"],
            id="an unreadable runtime counts as the default; equal keys by name",
        ),
    ],
)
def test_order(gangs: tuple[Gang, ...], fifo: list[str], longest: list[str]) -> None:
    assert order(Fifo(), *gangs) == fifo
    assert order(LongestFirst(600), *gangs) == longest


def test_runtime_is_the_longest_member_declaration() -> None:
    assert runtime(gang("g", 0, "90s", "", "2m"), 0.0) == 120.0
    assert runtime(gang("g", 0, "90s", "", "2m"), 100.0) == 120.0
    assert runtime(gang("g", 0), 60.0) == 60.0


def test_registry_and_bad_values() -> None:
    assert isinstance(gang_order("fifo"), Fifo)
    chosen = gang_order("longest-first", 30, 7)
    assert isinstance(chosen, LongestFirst) and (chosen.window, chosen.default_runtime) == (30, 7)
    assert isinstance(chosen, GangOrder)
    with pytest.raises(ValueError, match="unknown gang order 'lpt'; choose one of"):
        gang_order("lpt")
    with pytest.raises(ValueError, match="must not be negative"):
        LongestFirst(-1)
