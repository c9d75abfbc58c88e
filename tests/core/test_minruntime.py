"""How long running work is protected from preemption: pod, PriorityClass, queue, default."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from app.core.model.errors import InvalidInput
from app.core.model.queues import parse_queue_config
from app.core.policies.interfaces import Protection
from app.core.policies.minruntime import MIN_RUNTIME, MinRuntime
from tests.factories import pod

QUEUES = parse_queue_config(
    """
queues:
  - name: default
  - name: org
    minRuntime: 10m
  - name: team
    parent: org
  - name: strict
    parent: org
    minRuntime: 1h
  - name: open
    minRuntime: 0
priorityClasses:
  batch-protected: {minRuntime: 30m}
  no-protection: {minRuntime: "0"}
"""
)


@dataclass(frozen=True)
class Row:
    name: str
    queue: str | None
    seconds: float
    own: str = ""
    priority_class: str = ""
    gang: bool = True
    default: float = 0.0


ROWS = [
    Row("nothing configured: no protection by default", "default", 0.0),
    Row("the server default protects gangs", "default", 90.0, default=90.0),
    Row("the server default does not protect a pod on its own", "default", 0.0,
        gang=False, default=90.0),
    Row("a queue's minRuntime", "org", 600.0),
    Row("inherited from the nearest ancestor that says", "team", 600.0),
    Row("a child's own minRuntime wins over its parent's", "strict", 3600.0),
    Row("a queue's minRuntime 0 wins over the server default", "open", 0.0, default=90.0),
    Row("a queue's minRuntime protects a pod on its own too", "org", 600.0, gang=False),
    Row("the PriorityClass wins over the queue", "strict", 1800.0,
        priority_class="batch-protected"),
    Row("a PriorityClass with 0 waives the queue's", "org", 0.0, priority_class="no-protection"),
    Row("an unlisted PriorityClass changes nothing", "org", 600.0, priority_class="other"),
    Row("the pod's own annotation wins over everything", "strict", 120.0, own="2m",
        priority_class="batch-protected"),
    Row("the pod's own 0 waives all protection", "strict", 0.0, own="0", default=90.0),
    Row("an unreadable annotation is ignored", "org", 600.0, own="soon"),
    Row("a pod without a queue falls back to the default", None, 90.0, default=90.0),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_protection(row: Row) -> None:
    policy = MinRuntime(lambda: QUEUES, row.default)
    assert isinstance(policy, Protection)
    member = pod(
        annotations={MIN_RUNTIME: row.own} if row.own else None,
        priority_class=row.priority_class,
    )
    assert policy.seconds([member], row.queue, gang=row.gang) == row.seconds


def test_the_longest_of_a_gangs_members_counts() -> None:
    policy = MinRuntime(lambda: QUEUES, 0.0)
    members = [pod(annotations={MIN_RUNTIME: "5m"}), pod(annotations={MIN_RUNTIME: "1h"}), pod()]
    assert policy.seconds(members, "default", gang=True) == 3600.0


BAD = [
    ("queues: [{name: default, minRuntime: soon}]", "queues[default].minRuntime"),
    ("queues: [{name: default, minRuntime: -5}]", "queues[default].minRuntime"),
    ("queues: [{name: default, minRuntime: true}]", "queues[default].minRuntime"),
    ("queues: [{name: default}]\npriorityClasses: [a]", "priorityClasses"),
    ("queues: [{name: default}]\npriorityClasses: {a: 5}", "priorityClasses.a"),
    ("queues: [{name: default}]\npriorityClasses: {a: {minRuntime: x}}",
     "priorityClasses.a.minRuntime"),
    ("queues: [{name: default}]\npriorityClasses: {a: {minRuntime: null}}",
     "priorityClasses.a.minRuntime"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "where"), BAD, ids=[w for _, w in BAD])
def test_bad_settings_are_refused_naming_the_field(text: str, where: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_queue_config(text)
    assert caught.value.field == where
