"""Which planned members the loop nudges again: only those kube-scheduler has failed
(``PodScheduled=False``), not reached filter since their nudge, ``RENUDGE`` seconds on.

A member kube-scheduler never tried waits in its active queue and reaches filter without a
nudge; patching it again would only load the API server while a burst is being scheduled."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest

from app.core.cycle import nudges as module
from app.core.cycle.nudges import RENUDGE
from app.core.cycle.planbook import PlanBook
from app.core.model import labels as keys
from app.core.model.errors import InvalidInput
from app.core.model.parse import pod_from_dict
from app.core.model.values import Pod
from app.core.state.cache import ClusterCache
from app.core.state.gateway import InMemoryGateway
from app.settings import Settings
from app.wiring import build_cache, build_graph
from tests.factories import node, pod_json

LABELS = {keys.POD_GROUP: "g", keys.MIN_MEMBER: "2"}
FAILED = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]


def member(name: str, conditions: list[dict[str, str]] | None = None) -> Pod:
    body = pod_json(name, gpu=1, labels=LABELS)
    if conditions is not None:
        body["status"] = {"conditions": conditions}
    return pod_from_dict(body)


@dataclass(frozen=True)
class Row:
    name: str
    conditions: list[dict[str, str]] | None
    #: Seconds after the plan's first write when the loop runs again.
    later: float
    #: kube-scheduler's filter call reached the member after its nudge.
    asked: bool
    renudged: bool
    #: Members the plan's first write went to (it nudges them): those kube-scheduler failed,
    #: or else one to carry the plan.
    written: int = 2
    #: kube-scheduler's failure reaches the cache only after the plan was written.
    fails_later: bool = False


ROWS = [
    Row("never tried: waits in the active queue", None, RENUDGE + 0.5, False, False, 1),
    Row("scheduled condition true: not failed", [{"type": "PodScheduled", "status": "True"}],
        RENUDGE + 0.5, False, False, 1),
    Row("failed, not back at filter: nudged again", FAILED, RENUDGE + 0.5, False, True),
    Row("failed, too soon to tell", FAILED, RENUDGE / 2, False, False),
    Row("failed, but filter saw it since", FAILED, RENUDGE + 0.5, True, False),
    Row("failure seen after the plan, not back at filter: nudged", None, RENUDGE + 0.5, False,
        True, 1, fails_later=True),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_renudge(row: Row) -> None:
    now = [100.0]
    cache = build_cache(Settings())
    gateway = InMemoryGateway(cache)
    graph = build_graph(Settings(), cache, gateway, clock=lambda: now[0])
    cache.upsert_nodes([node("n", gpus=8)])
    members = [member("g-0", row.conditions), member("g-1", row.conditions)]
    cache.upsert_pods(members)
    graph.loop.run_once(force=True)
    assert graph.loop.records == row.written  # the plan's first write nudges these members
    if row.fails_later:
        members = [replace(p, unschedulable=True) for p in members]
        cache.upsert_pods(members)
    now[0] += row.later
    if row.asked:
        for pod in members:
            graph.planner.verdict(pod)
    before = graph.loop.nudges
    graph.loop.run_once(force=True)
    assert graph.loop.nudges - before == (2 if row.renudged else 0)


def test_conditions_are_read_and_a_malformed_list_names_the_field() -> None:
    assert member("a", FAILED).unschedulable
    assert not member("b").unschedulable
    body: dict[str, Any] = pod_json("c")
    body["status"] = {"conditions": {"type": "PodScheduled"}}
    with pytest.raises(InvalidInput, match=r"Pod\.status\.conditions"):
        pod_from_dict(body)
    body["status"] = {"conditions": ["x"]}
    with pytest.raises(InvalidInput, match=r"Pod\.status\.conditions\[0\]"):
        pod_from_dict(body)


def test_members_seen_asking_are_forgotten_once_gone() -> None:
    """Filter's sightings of members (``Nudges.asked``) are dropped for members no longer in
    any gang, once those are most of them: a long-running leader does not keep every gang
    member it ever saw."""
    book = PlanBook(ClusterCache())
    seen = module.Nudges(book, clock=lambda: 1.0)
    for i in range(module._SLACK + 10):
        seen.asked(f"gone-{i}")
    seen.asked("live")
    seen.saw([], {"live": "ns/g"})
    assert seen.was_asked("live") and not seen.was_asked("gone-0")
    seen.asked("gone-again")
    seen.saw([], {"live": "ns/g"})  # few enough: kept until they are most again
    assert seen.was_asked("gone-again")
