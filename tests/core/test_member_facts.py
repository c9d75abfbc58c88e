"""``MemberFacts``: what a cycle derives from a gang's members is worked out again exactly
when the gang memo hands out another members list (a member changed), or the policy or
queue config it was derived under changed; otherwise it is the same answer, not read again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from app.core.cycle.memos import GangMemo, MemberFacts, QueueNames, gangs_of
from app.core.model.gang import Gang
from app.core.model.queues import Queue, QueueConfig
from app.core.policies.gangorder import Fifo, LongestFirst
from app.core.state.cache import ClusterCache
from app.core.state.queueusage import demand_of
from tests.factories import node, pod

LABELS = {"muster.io/pod-group": "g", "muster.io/min-member": "2"}


def gang_after(change: Callable[[ClusterCache], None]) -> tuple[Gang, Gang]:
    """Gang ``g`` (three members, one bound) as a cycle reads it, before and after
    ``change``, through one gang memo."""
    cache = ClusterCache()
    cache.upsert_nodes([node("n0")])
    members = [pod(f"g-{i}", gpu=1, labels=LABELS, created=float(i)) for i in range(3)]
    cache.upsert_pods([replace(members[0], node_name="n0"), *members[1:]])
    memo = GangMemo()
    first = gangs_of(cache.snapshot(), memo)["default/g"]
    change(cache)
    return first, gangs_of(cache.snapshot(), memo)["default/g"]


def _other(cache: ClusterCache) -> None:
    cache.upsert_pod(pod("single", gpu=1))


def _priority(cache: ClusterCache) -> None:
    pending = next(p for p in cache.snapshot().pods.values() if p.name == "g-2")
    cache.upsert_pod(replace(pending, priority=7))


def _bound(cache: ClusterCache) -> None:
    pending = next(p for p in cache.snapshot().pods.values() if p.name == "g-1")
    cache.upsert_pod(replace(pending, node_name="n0"))


#: (what happens between two cycles, whether the gang's facts are worked out again)
ROWS: list[tuple[str, Callable[[ClusterCache], None], bool]] = [
    ("another pod came", _other, False),
    ("a pending member's priority changed", _priority, True),
    ("a pending member was bound", _bound, True),
]


@pytest.mark.parametrize(("change", "again"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_facts_are_worked_out_again_exactly_when_a_member_changed(
    change: Callable[[ClusterCache], None], again: bool
) -> None:
    first, second = gang_after(change)
    facts, names = MemberFacts(), QueueNames("muster")
    order, config = Fifo(), QueueConfig({"default": Queue("default")})
    kept = (facts.core(first), facts.order(first, order), facts.queues(first, config, names))
    now = (facts.core(second), facts.order(second, order), facts.queues(second, config, names))
    assert (now[0] is kept[0]) is not again
    core = second.pending[: second.min_member - len(second.bound)]
    assert now[0].pods == tuple(core)
    assert np.array_equal(now[0].demand, demand_of(core))
    assert now[0].priority == max((p.priority for p in core), default=0)
    assert now[1] == order.key(second)
    assert now[2] == names.of_members(second.members, config)


def test_the_policy_or_config_it_was_derived_under_counts() -> None:
    first, _ = gang_after(_other)
    facts, names = MemberFacts(), QueueNames("muster")
    fifo, longest = Fifo(), LongestFirst(window=3600, default_runtime=600)
    assert facts.order(first, fifo) == fifo.key(first)
    assert facts.order(first, longest) == longest.key(first) != fifo.key(first)
    both = {"a": Queue("a"), "b": Queue("b")}
    one, two = (
        QueueConfig(both, namespaces={"default": "a"}),
        QueueConfig(both, namespaces={"default": "b"}),
    )
    assert facts.queues(first, one, names) == {"a"}
    assert facts.queues(first, two, names) == {"b"}


def test_a_core_demand_is_read_only() -> None:
    first, _ = gang_after(_other)
    with pytest.raises(ValueError):
        MemberFacts().core(first).demand += 1
