"""Extender calls about pods that are not pending: the cache never learns them.

kube-scheduler 1.20 puts a pod whose scheduling attempt failed back into its queue as its
informer has it at that moment. When Muster bound that pod during the attempt (a parked gang
member, bound with the rest of its gang), the copy put back is bound; no later event takes it
out of the queue, and the first try after the pod is deleted sends it to filter. In the
sixty-gang benchmark, learning that copy kept three deleted pods on their node for the rest
of the run: their GPUs stayed taken and gangs waited up to 33 s next to free room.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace

import pytest

from app.core.model.values import Pod
from app.core.state.cache import ClusterCache
from app.core.state.gateway import InMemoryGateway
from app.settings import Settings
from app.wiring import build_cache, build_graph
from tests.factories import node, pod

GANG = {"muster.io/pod-group": "g", "muster.io/min-member": "2"}


def _deleted(cache: ClusterCache, p: Pod) -> None:
    cache.upsert_pod(replace(p, node_name="n0", phase="Running"))
    cache.delete_pod(p.uid)


def _relisted_away(cache: ClusterCache, p: Pod) -> None:
    cache.upsert_pod(p)
    cache.replace_pods([])


#: (history the cache saw of the pod, the copy an extender call sends, whether the cache
#: learns it, and the node the cache then has it on)
ROWS: list[tuple[str, Callable[[ClusterCache, Pod], None], Callable[[Pod], Pod], bool, str]] = [
    ("pending, not shown by the watch yet", lambda c, p: None, lambda p: p, True, ""),
    ("deleted by the watch, sent pending", _deleted, lambda p: p, False, ""),
    (
        "deleted by the watch, sent bound (1.20's requeued copy)",
        _deleted,
        lambda p: replace(p, node_name="n0", phase="Running"),
        False,
        "",
    ),
    ("never seen, sent bound", lambda c, p: None, lambda p: replace(p, node_name="n0"), False, ""),
    ("gone from a relist, sent pending", _relisted_away, lambda p: p, False, ""),
    (
        "pending, sent bound (kube-scheduler saw the bind first)",
        lambda c, p: c.upsert_pod(p),
        lambda p: replace(p, node_name="n0"),
        True,
        "n0",
    ),
    (
        "bound, sent pending (an older copy)",
        lambda c, p: c.upsert_pod(replace(p, node_name="n0")),
        lambda p: p,
        True,
        "n0",
    ),
]


@pytest.mark.parametrize(
    ("history", "sent", "learned", "where"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS]
)
def test_the_cache_learns_only_pending_pods_and_better_news(
    history: Callable[[ClusterCache, Pod], None],
    sent: Callable[[Pod], Pod],
    learned: bool,
    where: str,
) -> None:
    cache = ClusterCache()
    cache.upsert_node(node("n0", gpus=8))
    p = pod("p", gpu=1)
    history(cache, p)
    got = cache.learn_pod(sent(p))
    assert (got is not None) == learned
    cached = cache.pod(p.uid)
    assert (cached is not None) == learned
    assert (cached.node_name if cached is not None else "") == where
    assert bool(cache.view().used[0].any()) == bool(where)  # room counted only where bound


def test_a_stale_copy_of_a_deleted_gang_member_takes_no_room_and_gets_no_node(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The benchmark's case: a gang bound on n0 finishes; kube-scheduler then tries a bound
    copy of one member. It is told so on every node, the cache stays without it, and the
    next gang takes the whole node."""
    cache = build_cache(Settings())
    graph = build_graph(Settings(), cache, InMemoryGateway(cache))
    cache.upsert_nodes([node("n0", gpus=2), node("n1", gpus=2)])
    members = [pod(f"g-{i}", gpu=1, labels=GANG) for i in range(2)]
    for member in members:
        _deleted(cache, member)
    stale = replace(members[0], node_name="n0", phase="Running")
    with caplog.at_level(logging.WARNING, "muster.extender"):
        result = graph.extender.filter(stale, ["n0", "n1"])
    assert "stale copy; not learned" in caplog.text
    assert result.feasible == []
    assert set(result.unresolvable) == {"n0", "n1"}
    why = result.unresolvable["n0"]
    assert "default/g-0 is no pending pod Muster knows (deleted, or bound to n0)" in why
    assert graph.extender.prioritize(stale, ["n0", "n1"]).pairs() == [("n0", 0), ("n1", 0)]
    assert graph.extender.preempt(stale, {}) == {}
    assert cache.pod(stale.uid) is None and not cache.gang_members_of("default/g")
    nxt = [pod(f"h-{i}", gpu=1, labels={**GANG, "muster.io/pod-group": "h"}) for i in range(2)]
    cache.upsert_pods(nxt)
    graph.planner.cycle(force=True)
    plan = graph.planner.plan("default/h")
    assert plan is not None and len(plan.members) == 2


def test_the_cache_remembers_a_bounded_number_of_deleted_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from app.core.state import cache as cache_module

    monkeypatch.setattr(cache_module, "GONE_KEPT", 3)
    cache = ClusterCache()
    gone = [pod(f"p{i}") for i in range(4)]
    for p in gone:
        cache.upsert_pod(p)
        cache.delete_pod(p.uid)
    assert cache.learn_pod(gone[0]) is not None  # forgotten: the oldest of four
    assert all(cache.learn_pod(p) is None for p in gone[1:])


#: (history the cache saw of node n1, whether n1 sent whole in an extender call is then
#: known to the cache)
NODE_ROWS: list[tuple[str, Callable[[ClusterCache], None], bool]] = [
    ("never seen (no watch: learned from calls)", lambda c: None, True),
    ("deleted by the watch", lambda c: (c.upsert_node(node("n1")), c.delete_node("n1")), False),
    (
        "deleted, then registered again",
        lambda c: (c.upsert_node(node("n1")), c.delete_node("n1"), c.upsert_node(node("n1"))),
        True,
    ),
    ("gone from a relist", lambda c: (c.upsert_node(node("n1")), c.replace_nodes([])), False),
    (
        "gone from a relist, back in the next",
        lambda c: (
            c.replace_nodes([node("n1")]),
            c.replace_nodes([]),
            c.replace_nodes([node("n1")]),
        ),
        True,
    ),
]


@pytest.mark.parametrize(
    ("history", "known"), [r[1:] for r in NODE_ROWS], ids=[r[0] for r in NODE_ROWS]
)
def test_a_node_the_api_deleted_is_not_brought_back_by_a_call(
    history: Callable[[ClusterCache], None], known: bool
) -> None:
    """With ``nodeCacheCapable: false`` kube-scheduler sends whole Node objects, from a
    snapshot a call in flight may take before a node's deletion reaches it."""
    cache = build_cache(Settings())
    graph = build_graph(Settings(), cache, InMemoryGateway(cache))
    history(cache)
    result = graph.extender.filter(pod("p", gpu=1), None, [node("n1", gpus=8)])
    assert ("n1" in cache.view().index) == known
    assert result.feasible == (["n1"] if known else [])


def test_a_late_bind_of_a_member_bound_already_there_succeeds() -> None:
    """kube-scheduler still binding a member Muster bound with its gang (parked at the
    barrier, bound with the rest): done, not an error; on another node, refused."""
    cache = build_cache(Settings())
    graph = build_graph(Settings(), cache, InMemoryGateway(cache))
    cache.upsert_nodes([node("n0", gpus=2), node("n1", gpus=2)])
    members = [pod(f"g-{i}", gpu=1, labels=GANG) for i in range(2)]
    cache.upsert_pods(members)
    graph.planner.cycle(force=True)
    plan = graph.planner.plan("default/g")
    assert plan is not None
    where = {p.uid: plan.members[p.uid] for p in members}

    async def bind(p: Pod, node_name: str) -> str:
        return (await graph.extender.bind(p.namespace, p.name, p.uid, node_name)).error

    async def together() -> list[str]:
        return list(await asyncio.gather(*(bind(p, where[p.uid]) for p in members)))

    assert asyncio.run(together()) == ["", ""]
    graph.planner.cycle(force=True)  # the plan is fulfilled: dropped
    assert graph.planner.plan("default/g") is None
    first = members[0]
    assert asyncio.run(bind(first, where[first.uid])) == ""
    elsewhere = "n1" if where[first.uid] == "n0" else "n0"
    assert asyncio.run(bind(first, elsewhere))  # an error: it is on the other node
    assert cache.pod(first.uid).node_name == where[first.uid]
