"""What filter tells kube-scheduler about a waiting gang member (``Headlines``): a steady
story. kube-scheduler 1.20 writes a rejected pod's message into its PodScheduled condition,
and records an Event, whenever the message changes; waiting pods are retried after every
finished job, so a story that changed often meant a status write per retry."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from app.core.insight.headlines import COUNTED_SECONDS, REUSE_SECONDS, STEADY_SECONDS, Headlines
from app.core.model.values import Pod
from app.core.state.cache import ClusterCache
from app.core.state.gateway import InMemoryGateway
from app.settings import Settings
from app.wiring import Graph, build_cache, build_graph
from tests.factories import node, pod


@dataclass(frozen=True)
class Row:
    name: str
    #: Seconds after the first answer when the member is asked again.
    later: float
    #: The planner is busy with a cycle when asked again (its look answers None).
    busy: bool
    #: Asked again about the other member (never told before) instead of the first.
    other: bool
    #: "first": the story told first; "new": the story as it now is.
    told: str


ROWS = [
    Row("story changed within the steady time: the first stays", STEADY_SECONDS / 2, False,
        False, "first"),
    Row("story changed, steady time over: the new one", STEADY_SECONDS + 1, False, False, "new"),
    Row("another member: the story as it now is", REUSE_SECONDS + 1, False, True, "new"),
    Row("another member within the reuse time, same members: the gang's story as worked out",
        REUSE_SECONDS / 2, False, True, "first"),
    Row("planner busy: the story told last", STEADY_SECONDS + 1, True, False, "first"),
    Row("planner busy, never told: the gang's last story, with its category", 1.0, True, True,
        "first"),
]  # fmt: skip


def waiting_gang(
    name: str, size: int, gpu: int, created: int
) -> tuple[ClusterCache, Graph, list[Pod]]:
    """A cache with one 8-GPU node and the first ``created`` members of gang ``name`` of
    ``size`` members of ``gpu`` GPUs each, after one planner cycle; the members, all of them."""
    cache = build_cache(Settings())
    graph = build_graph(Settings(), cache, InMemoryGateway(cache))
    cache.upsert_nodes([node("n0", gpus=8)])
    labels = {"muster.io/pod-group": name, "muster.io/min-member": str(size)}
    members = [pod(f"{name}-{i}", gpu=gpu, labels=labels) for i in range(size)]
    cache.upsert_pods(members[:created])
    graph.planner.cycle(force=True)
    return cache, graph, members


def big_gang(created: int) -> tuple[ClusterCache, Graph, list[Pod]]:
    """The first ``created`` members of a gang of two 8-GPU members (16 GPUs on 8: it
    waits); see ``waiting_gang``."""
    return waiting_gang("big", 2, 8, created)


def counting(cache: ClusterCache, graph: Graph, now: list[float]) -> tuple[Headlines, list[int]]:
    """Headlines on ``graph``'s planner at time ``now[0]``, and how many looks it took."""
    looks = [0]

    def look() -> object:
        looks[0] += 1
        return graph.planner.look(wait=False)

    headlines = Headlines(
        look,  # type: ignore[arg-type]
        lambda: graph.planner.cycles,
        clock=lambda: now[0],
        members=cache.gang_size_of,
    )
    return headlines, looks


def switchable(cache: ClusterCache, graph: Graph, now: list[float], busy: list[bool]) -> Headlines:
    """Headlines on ``graph``'s planner at time ``now[0]``, whose look answers None (the
    planner busy with a cycle) while ``busy[0]``."""
    return Headlines(
        lambda: None if busy[0] else graph.planner.look(wait=False),
        lambda: graph.planner.cycles,
        clock=lambda: now[0],
        members=cache.gang_size_of,
    )


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.name)
def test_a_told_story_stays_steady(row: Row) -> None:
    now = [0.0]
    cache, graph, members = big_gang(2)
    busy = [False]
    headlines = switchable(cache, graph, now, busy)
    first = headlines(members[0])
    assert first is not None and first.startswith("capacity: ")
    # 4 of the node's GPUs go to a running pod: the story's numbers change.
    cache.upsert_pods([pod("single", gpu=4, node="n0", phase="Running")])
    graph.planner.cycle(force=True)
    now[0] += row.later
    busy[0] = row.busy
    asked: Pod = members[1] if row.other else members[0]
    told = headlines(asked)
    busy[0] = False
    fresh = Headlines(lambda: graph.planner.look(wait=False), lambda: graph.planner.cycles)(asked)
    assert fresh is not None and fresh != first  # the story did change
    assert told == (first if row.told == "first" else fresh)


def test_a_story_of_missing_members_gives_way_at_once() -> None:
    """'waiting for members' stops being true when the last member comes: the next story is
    told within the steady time."""
    now = [0.0]
    cache, graph, members = big_gang(1)
    headlines = Headlines(
        lambda: graph.planner.look(wait=False),
        lambda: graph.planner.cycles,
        clock=lambda: now[0],
        members=cache.gang_size_of,
    )
    first = headlines(members[0])
    assert first is not None and first.startswith("gang-incomplete: "), first
    cache.upsert_pods(members[1:])
    graph.planner.cycle(force=True)
    now[0] += 1.0
    told = headlines(members[0])
    assert told is not None and told.startswith("capacity: "), told
    now[0] += 1.0
    assert headlines(members[0]) == told  # and that one is held


def test_a_held_story_is_told_again_without_looking() -> None:
    """A member retried within the steady time gets its story without the planner being
    looked at or the gang explained (each retry of hundreds of waiting pods was a look)."""
    now = [0.0]
    cache, graph, members = big_gang(2)
    headlines, looks = counting(cache, graph, now)
    first = headlines(members[0])
    assert first is not None and looks[0] == 1
    cache.upsert_pods([pod("single", gpu=4, node="n0", phase="Running")])
    graph.planner.cycle(force=True)
    now[0] += REUSE_SECONDS  # the gang's story is worked out afresh for a member never told
    assert headlines(members[0]) == first
    assert looks[0] == 1
    assert headlines(members[1]) != first  # never told: the story as it now is
    assert looks[0] == 2


@dataclass(frozen=True)
class Arrival:
    name: str
    #: Seconds after the gang was first explained when the next member comes and is asked.
    later: float
    #: Looks at the planner this answer took.
    looks: int


ARRIVALS = [
    Arrival("a member comes: the count tells the story, no look", 0.5, 0),
    Arrival("long after the gang was explained: explained again", COUNTED_SECONDS + 1, 1),
]


@pytest.mark.parametrize("row", ARRIVALS, ids=lambda r: r.name)
def test_a_gang_short_of_members_is_told_from_its_count(row: Arrival) -> None:
    """While shuffled members arrive, a gang found short of members is told 'k of n' from
    the cache's count, without a look: the story is the one the explanation gives."""
    now = [0.0]
    cache, graph, members = waiting_gang("slow", 4, 1, 1)
    headlines, looks = counting(cache, graph, now)
    first = headlines(members[0])
    assert first is not None and first.startswith("gang-incomplete: 1 of 4"), first
    cache.upsert_pods(members[1:3])  # no cycle: filter runs none for a gang short of members
    now[0] += row.later
    before = looks[0]
    told = headlines(members[2])
    explained = Headlines(lambda: graph.planner.look(wait=False), lambda: graph.planner.cycles,
                          members=cache.gang_size_of)(members[2])  # fmt: skip
    assert told == explained
    assert told is not None and told.startswith("gang-incomplete: 3 of 4"), told
    assert looks[0] - before == row.looks
    cache.upsert_pods(members[3:])  # complete: its story is no longer one of counting
    graph.planner.cycle(force=True)
    assert not (headlines(members[3]) or "").startswith("gang-incomplete")


@dataclass(frozen=True)
class Outgrown:
    name: str
    #: Asked about the member told '1 of 2' (else the member that completed the gang).
    told_before: bool


OUTGROWN = [
    Outgrown("the member told '1 of 2'", True),
    Outgrown("the member that completed the gang, never told", False),
]


@pytest.mark.parametrize("row", OUTGROWN, ids=lambda r: r.name)
def test_a_story_the_gang_outgrew_is_not_told_while_the_planner_is_busy(row: Outgrown) -> None:
    """The gang's last story is '1 of 2 members exist'; the second member came and the planner
    is busy with a cycle: no story (filter gives the planner's 'a cycle is under way'), and
    the story as it now is comes as news once the cycle is over."""
    now = [0.0]
    cache, graph, members = big_gang(1)
    busy = [False]
    headlines = switchable(cache, graph, now, busy)
    first = headlines(members[0])
    assert first is not None and first.startswith("gang-incomplete: 1 of 2"), first
    headlines.news()
    cache.upsert_pods(members[1:])
    busy[0] = True
    now[0] += 1.0
    asked = members[0] if row.told_before else members[1]
    assert headlines(asked) is None
    assert headlines.news() == []  # still busy: nothing to tell yet
    busy[0] = False
    graph.planner.cycle(force=True)
    news = headlines.news()
    assert [p.uid for p, _ in news] == [asked.uid], news
    assert news[0][1].startswith("capacity: "), news
    assert headlines(asked) == news[0][1]  # and that story is held
