"""``Planner.look`` (explain, what-if, census) never waits for a running cycle: it reads the
cache as it is now with the plans, reasons and hold the last cycle finished with."""

from __future__ import annotations

import random
import threading
from dataclasses import replace

import pytest

from app.core.cycle.memos import gangs_of
from app.core.cycle.planner import Planner
from app.core.model.gang import Gang
from app.core.model.values import Pod
from app.core.policies.gangorder import LongestFirst
from app.core.state.cache import ClusterCache
from tests.factories import EPOCH, node, pod


class HeldOrder:
    """Longest-first, except that it can hold a cycle inside it until released."""

    name = "held"

    def __init__(self) -> None:
        self.hold = False
        self.inside = threading.Event()
        self.go_on = threading.Event()
        self._order = LongestFirst()

    def key(self, gang: Gang) -> tuple[float, float, str]:
        if self.hold:
            self.inside.set()
            self.go_on.wait(10)
        return self._order.key(gang)


def member(gang: str, i: int) -> Pod:
    labels = {"muster.io/pod-group": gang, "muster.io/min-member": "2"}
    return pod(f"{gang}-{i}", gpu=4, labels=labels)


def test_a_look_during_a_cycle_reads_the_last_cycles_plans_and_the_cache_now() -> None:
    cache = ClusterCache()
    cache.upsert_nodes([node("n0", gpus=8), node("n1", gpus=8)])
    cache.upsert_pods([member("a", 0), member("a", 1)])
    order = HeldOrder()
    planner = Planner(cache, order=order)
    planner.cycle()
    assert set(planner.look().plans) == {"default/a"}

    cache.upsert_pods([member("b", 0), member("b", 1)])
    order.hold = True
    cycle = threading.Thread(target=planner.cycle)
    cycle.start()
    try:
        assert order.inside.wait(10), "the cycle never reached the gang order"
        assert planner.look(wait=False) is None  # the filter path's headline does not wait
        during = planner.look()  # would block until go_on were this a waiting look
        assert set(during.plans) == {"default/a"}
        assert {"default/a", "default/b"} <= set(during.gangs)  # b's pods: the cache now
    finally:
        order.go_on.set()
        cycle.join(10)
    assert not cycle.is_alive()
    assert set(planner.look().plans) == {"default/a", "default/b"}


def test_the_first_look_waits_for_the_cycle_when_nothing_was_published() -> None:
    cache = ClusterCache()
    cache.upsert_nodes([node("n0", gpus=8)])
    cache.upsert_pods([member("a", 0), member("a", 1)])
    order = HeldOrder()
    planner = Planner(cache, order=order)
    order.hold = True
    cycle = threading.Thread(target=planner.cycle)
    cycle.start()
    assert order.inside.wait(10)
    seen: list[set[str]] = []
    looker = threading.Thread(target=lambda: seen.append(set(planner.look().plans)))
    looker.start()
    looker.join(0.2)
    assert looker.is_alive()  # nothing published yet: it waits for the cycle
    order.go_on.set()
    cycle.join(10)
    looker.join(10)
    assert seen == [{"default/a"}]


def test_looks_at_an_unchanged_cache_share_its_gangs_and_see_a_change() -> None:
    cache = ClusterCache()
    cache.upsert_nodes([node("n0", gpus=8)])
    cache.upsert_pods([member("a", 0), member("a", 1), member("b", 0)])
    planner = Planner(cache)
    planner.cycle()
    first, again = planner.look(), planner.look()
    assert again.gangs is first.gangs
    cache.upsert_pods([member("b", 1)])
    later = planner.look()
    assert later.gangs is not first.gangs
    assert len(later.gangs["default/b"].members) == 2
    assert len(first.gangs["default/b"].members) == 1  # what the earlier look saw stays


@pytest.mark.parametrize("seed", range(6))
def test_looks_share_gangs_across_changes_to_pods_outside_gangs_alone(seed: int) -> None:
    """A look after pods outside any gang came, went or changed shares the last look's
    gangs; after any change to a gang member the gangs are found again; either way they
    equal the gangs found from scratch."""
    rng = random.Random(seed)
    cache = ClusterCache()
    cache.upsert_nodes([node(f"n{i}", gpus=8) for i in range(3)])
    cache.upsert_pods([member(g, i) for g in "abc" for i in range(2)])
    planner = Planner(cache)
    planner.cycle()
    last = planner.look()
    shared = 0
    for step in range(40):
        snapshot = cache.snapshot()
        lone = [p for p in snapshot.pods.values() if p.uid not in snapshot.gang_members]
        members = [snapshot.pods[u] for u in snapshot.gang_members]
        kind = rng.choice(["lone start", "lone end", "lone update", "member", "cycle"])
        touches_gangs = kind in ("member", "cycle")
        if kind == "lone start" or (kind != "lone start" and not lone and not touches_gangs):
            cache.upsert_pods([pod(f"x{step}", gpu=1, node=f"n{step % 3}", phase="Running")])
        elif kind == "lone end":
            cache.delete_pod(rng.choice(lone).uid)
        elif kind == "lone update":
            p = rng.choice(lone)
            cache.upsert_pods([replace(p, annotations={**p.annotations, "s": str(step)})])
        elif kind == "member":
            p = rng.choice(members)
            cache.upsert_pods([replace(p, labels={**p.labels, "s": str(step)})])
        else:
            planner.cycle()
        now = planner.look()
        fresh = gangs_of(now.session.snapshot)
        assert now.gangs == fresh, step
        if not touches_gangs:
            assert now.gangs is last.gangs, step
            shared += 1
        last = now
    assert shared > 10


def test_gang_ages_are_told_on_the_planner_s_wall_clock() -> None:
    """``describe`` ages a gang against the planner's wall clock (the simulator's and
    tests' own time), not the machine's."""
    cache = ClusterCache()
    cache.upsert_nodes([node("n0", gpus=8)])
    labels = {"muster.io/pod-group": "old", "muster.io/min-member": "2"}
    created = 1.8e9 - 30.0 - EPOCH.timestamp()  # the factory's offset from its epoch
    cache.upsert_pods([pod(f"old-{i}", gpu=1, labels=labels, created=created) for i in (0, 1)])
    planner = Planner(cache, wall=lambda: 1.8e9)
    rows = {r["gang"]: r for r in planner.describe()}
    assert rows["default/old"]["ageSeconds"] == 30.0
