"""``gangs_of`` with a memo builds again only the gangs whose members changed, and gives the
same gangs as reading every member afresh, whatever happened between two calls."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from dataclasses import replace

import pytest

from app.core.cycle.memos import GangMemo, gangs_of
from app.core.model.values import Pod
from app.core.state.cache import BindRejected, ClusterCache
from app.core.state.view import Snapshot
from tests.factories import node, pod

NODES = 4


def member(gang: str, i: int, minimum: int = 3) -> Pod:
    labels = {"muster.io/pod-group": gang, "muster.io/min-member": str(minimum)}
    return pod(f"{gang}-{i}", gpu=1, labels=labels, created=float(i))


def _arrive(cache: ClusterCache, rng: random.Random, count: list[int]) -> None:
    count[0] += 1
    cache.upsert_pod(member(f"g{rng.randrange(6)}", count[0], minimum=rng.choice([2, 3])))


def _some(cache: ClusterCache, rng: random.Random) -> Pod | None:
    pods = sorted(cache.snapshot().pods.values(), key=lambda p: p.uid)
    return rng.choice(pods) if pods else None


def _bind(cache: ClusterCache, rng: random.Random, _: list[int]) -> None:
    p = _some(cache, rng)
    if p is not None and not p.node_name:
        cache.upsert_pod(replace(p, node_name=f"n{rng.randrange(NODES)}", phase="Running"))


def _assume(cache: ClusterCache, rng: random.Random, _: list[int]) -> None:
    p = _some(cache, rng)
    if p is not None and not p.node_name:
        with contextlib.suppress(BindRejected):
            cache.assume(p.uid, f"n{rng.randrange(NODES)}")


def _forget(cache: ClusterCache, rng: random.Random, _: list[int]) -> None:
    p = _some(cache, rng)
    if p is not None:
        cache.forget(p.uid)


def _delete(cache: ClusterCache, rng: random.Random, _: list[int]) -> None:
    p = _some(cache, rng)
    if p is not None:
        cache.delete_pod(p.uid)


def _finish(cache: ClusterCache, rng: random.Random, _: list[int]) -> None:
    p = _some(cache, rng)
    if p is not None:
        cache.upsert_pod(replace(p, phase="Succeeded"))


def _regroup(cache: ClusterCache, rng: random.Random, _: list[int]) -> None:
    p = _some(cache, rng)
    if p is not None:
        labels = {**p.labels, "muster.io/pod-group": f"g{rng.randrange(6)}"}
        if rng.random() < 0.2:
            labels.pop("muster.io/pod-group")
        cache.upsert_pod(replace(p, labels=labels))


def _disagree(cache: ClusterCache, rng: random.Random, _: list[int]) -> None:
    p = _some(cache, rng)
    if p is not None:
        cache.upsert_pod(replace(p, labels={**p.labels, "muster.io/min-member": "5"}))


def _condition(cache: ClusterCache, rng: random.Random, _: list[int]) -> None:
    p = _some(cache, rng)
    if p is not None:
        cache.upsert_pod(replace(p, unschedulable=not p.unschedulable))


def _new_node(cache: ClusterCache, rng: random.Random, count: list[int]) -> None:
    count[0] += 1
    cache.upsert_nodes([node(f"extra-{count[0]}")])


OPS: list[Callable[[ClusterCache, random.Random, list[int]], None]] = [
    _arrive, _arrive, _arrive, _bind, _assume, _forget, _delete, _finish, _regroup, _disagree,
    _condition, _new_node,
]  # fmt: skip


@pytest.mark.parametrize("seed", range(12))
def test_the_memo_gives_the_gangs_read_afresh(seed: int) -> None:
    rng = random.Random(seed)
    cache = ClusterCache()
    cache.upsert_nodes([node(f"n{i}") for i in range(NODES)])
    memo, count = GangMemo(), [0]
    for _ in range(150):
        for _ in range(rng.choice([1, 1, 2, 3])):  # one call may see several changes
            rng.choice(OPS)(cache, rng, count)
        snapshot = cache.snapshot()
        assert gangs_of(snapshot, memo) == gangs_of(snapshot)


#: (what changes between two calls, how many members are read again)
ROWS: list[tuple[str, Callable[[ClusterCache, list[Pod]], None], int]] = [
    ("nothing", lambda cache, ms: None, 0),
    ("one member's condition",
     lambda cache, ms: cache.upsert_pod(replace(ms[0], unschedulable=True)), 3),
    ("one member bound", lambda cache, ms: cache.upsert_pod(replace(ms[0], node_name="n0")), 3),
    ("a new member", lambda cache, ms: cache.upsert_pod(member("a", 9)), 4),
    ("a member moved to the other gang", lambda cache, ms: cache.upsert_pod(
        replace(ms[0], labels={**ms[0].labels, "muster.io/pod-group": "b"})), 6),
    ("a node came", lambda cache, ms: cache.upsert_nodes([node("n9")]), 0),
    ("a member's bind assumed", lambda cache, ms: cache.assume(ms[1].uid, "n0"), 3),
]  # fmt: skip


@pytest.mark.parametrize(("change", "read"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_only_the_gangs_of_changed_members_are_read_again(
    monkeypatch: pytest.MonkeyPatch, change: Callable[[ClusterCache, list[Pod]], None], read: int
) -> None:
    """Gangs ``a`` and ``b`` of three members each; counted: members asked whether they hold
    a node (once per member read)."""
    cache = ClusterCache()
    cache.upsert_nodes([node("n0")])
    ours = [member("a", i) for i in range(3)]
    cache.upsert_pods([*ours, *(member("b", i) for i in range(3))])
    memo = GangMemo()
    gangs_of(cache.snapshot(), memo)
    change(cache, ours)
    snapshot = cache.snapshot()
    asked: list[str] = []
    holds = Snapshot.holds_node

    def counting(self: Snapshot, pod: Pod) -> bool:
        asked.append(pod.uid)
        return holds(self, pod)

    monkeypatch.setattr(Snapshot, "holds_node", counting)
    patched = gangs_of(snapshot, memo)
    assert len(asked) == read
    monkeypatch.undo()
    assert patched == gangs_of(snapshot)


def _group_member(rng: random.Random, i: int, minimum: str | None) -> Pod:
    """A member of gang ``a`` (of min-member ``minimum``) mostly; now and then one that ended,
    is being deleted, names gang ``b``, says another min-member, or names no gang at all."""
    labels = {"muster.io/pod-group": "a"}
    if minimum is not None:
        labels["muster.io/min-member"] = minimum
    odd = rng.choices(["", "muster.io/pod-group=b", "muster.io/min-member=4", "-"], [87, 5, 5, 3])
    if odd[0] == "-":
        labels = {}
    elif odd[0]:
        key, value = odd[0].split("=")
        labels[key] = value
    made = pod(f"m{i}", gpu=1, labels=labels, created=float(rng.randrange(5)))
    if rng.random() < 0.05:
        made = replace(made, phase=rng.choice(["Succeeded", "Failed"]))
    if rng.random() < 0.05:
        made = replace(made, deleting=True)
    return made


@pytest.mark.parametrize("seed", range(40))
def test_one_gangs_members_are_collected_as_collect_gangs_does(seed: int) -> None:
    from app.core.model.gang import collect_gang, collect_gangs

    rng = random.Random(seed)
    minimum = rng.choice(["3", None])
    members = [_group_member(rng, i, minimum) for i in range(rng.randint(1, 12))]
    held = [rng.random() < 0.3 for _ in members]
    holds = dict(zip((m.uid for m in members), held, strict=True))
    assert collect_gang(members, held) == collect_gangs(members, lambda p: holds[p.uid])


@pytest.mark.parametrize("seed", range(20))
def test_members_of_one_spec_agree_as_the_general_rule_says(seed: int) -> None:
    """``_agree``'s shortcut for members that all say the same against ``_disagree``."""
    from app.core.model.gang import Gang, GangSpec, _agree, _disagree

    rng = random.Random(seed)
    spec = GangSpec(
        "ns", "a", rng.choice([None, 0, 3]), rng.choice([None, 4]), rng.choice([None, 30.0]),
        problem=rng.choice(["", "no min-member given"]),
        notes=rng.choice([(), ("b", "a"), ("a", "a")]),
    )  # fmt: skip
    members = [pod(f"m{i}", created=float(rng.randrange(3))) for i in range(rng.randint(1, 5))]
    quick, general = Gang("ns", "a", list(members)), Gang("ns", "a", list(members))
    _agree(quick, [spec] * len(members))
    _disagree(general, [spec] * len(members))
    general.members.sort(key=lambda p: (p.created, p.name))
    general.pending = list(general.members)
    assert quick == general
