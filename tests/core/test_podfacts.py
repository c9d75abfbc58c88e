"""What a cycle derives from a pod alone is remembered per pod uid (``PodFact``): a pod's
newer version takes its older one's entry, and a cluster of more pods than the old
object-keyed memos held (16,384) is not derived again on every pass."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.core.gpu import ask as ask_module
from app.core.gpu.ask import GpuAsk
from app.core.model import gang as gang_module
from app.core.model import podfacts
from app.core.model.gang import gang_spec
from app.core.model.podfacts import PodFact
from app.core.model.values import Pod
from app.core.state.cache import ClusterCache
from tests.factories import pod


def test_a_newer_version_takes_the_older_ones_entry() -> None:
    derived: list[str] = []
    fact: PodFact[str] = PodFact(lambda p: derived.append(p.name) or p.labels.get("k", ""))
    first = pod("a", uid="u1", labels={"k": "one"})
    assert fact.of(first) == "one" and fact.of(first) == "one"
    second = replace(first, labels={"k": "two"})  # the same uid, a new object
    assert fact.of(second) == "two"
    assert fact.of(first) == "one"  # not the other version's value
    assert len(fact._kept) == 1 and derived == ["a", "a", "a"]


def test_past_its_limit_the_memo_keeps_the_newer_half(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``LIMIT`` the uids derived longest ago go, half of them; a newer version of a pod
    counts as derived when it is (so a pod that keeps changing stays)."""
    monkeypatch.setattr(PodFact, "LIMIT", 4)
    fact: PodFact[str] = PodFact(lambda p: p.name)
    pods = [pod(f"p{i}", uid=f"u{i}") for i in range(4)]
    assert fact.of_each(pods) == ["p0", "p1", "p2", "p3"]
    fact.of(replace(pods[0], name="p0-new"))  # u0 is the newest now
    assert list(fact._kept) == ["u1", "u2", "u3", "u0"]
    fact.of(pod("p4", uid="u4"))
    assert list(fact._kept) == ["u3", "u0", "u4"]


def test_a_lookup_hit_answers_for_that_very_object_only() -> None:
    fact: PodFact[int] = PodFact(lambda p: len(p.name))
    kept = pod("abc", uid="u")
    fact.of(kept)
    hit = fact.lookup()("u")
    assert hit is not None and hit[0] is kept and hit[1] == 3
    assert fact.lookup()("other") is None


@pytest.mark.parametrize(
    ("memo", "derive"),
    [(gang_module._SPECS, "_derive"), (ask_module._ASKS, "_derive")],
    ids=["gang_spec", "GpuAsk.of"],
)
def test_more_pods_than_the_old_bound_are_derived_once(
    memo: PodFact[object], derive: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20,000 gang members asked about twice: each derived once (the object-keyed memos
    these replace started over at 16,384 and derived them all again)."""
    calls = 0
    inner = getattr(memo, derive)

    def counting(p: Pod) -> object:
        nonlocal calls
        calls += 1
        return inner(p)

    monkeypatch.setattr(memo, derive, counting)
    template = pod("m", gpu=1, labels={"muster.io/pod-group": "g", "muster.io/min-member": "8"})
    pods = [replace(template, uid=f"many-{i}", name=f"m{i}") for i in range(20_000)]
    for _ in range(2):
        for p in pods:
            assert gang_spec(p) is not None and GpuAsk.of(p).count == 1
    assert calls == len(pods)


def test_of_each_mixes_remembered_and_new_objects() -> None:
    """The list-level path answers when every pod is remembered for that very object; any
    other pod (new, or a newer version of a remembered uid) is derived where it stands."""
    derived: list[str] = []
    fact: PodFact[str] = PodFact(lambda p: derived.append(p.name) or p.name.upper())
    a, b = pod("a", uid="ua"), pod("b", uid="ub")
    assert fact.of_each([a, b]) == ["A", "B"]
    assert fact.of_each([a, b]) == ["A", "B"] and derived == ["a", "b"]
    newer = replace(b, name="b2")
    assert fact.of_each([a, newer, pod("c", uid="uc")]) == ["A", "B2", "C"]
    assert derived == ["a", "b", "b2", "c"]


def test_the_cache_derives_ahead_facts_of_the_pods_it_stores() -> None:
    """Facts made ``ahead`` hold each stored pod object as soon as the cache stores it (so a
    cycle finds them remembered); others are left for whoever asks; a fact that fails on a
    pod is skipped there, and the pod is still stored."""
    ahead: PodFact[str] = PodFact(lambda p: p.name, ahead=True)
    later: PodFact[str] = PodFact(lambda p: p.name)

    def fails(p: Pod) -> str:
        raise ValueError(p.name)

    failing: PodFact[str] = PodFact(fails, ahead=True)
    try:
        cache = ClusterCache()
        one = pod("one", uid="u-one", labels={"muster.io/pod-group": "g"})
        cache.upsert_pod(one)
        cache.upsert_pods([pod("two", uid="u-two"), pod("three", uid="u-three")])
        cache.replace_pods([one, pod("four", uid="u-four")])
        for uid in ("u-one", "u-four"):
            stored = cache.pod(uid)
            hit = ahead.lookup()(uid)
            assert stored is not None and hit is not None and hit[0] is stored
        assert later.lookup()("u-one") is None and failing.lookup()("u-one") is None
        with pytest.raises(ValueError, match="one"):
            failing.of(one)
    finally:
        podfacts._AHEAD.remove(ahead)
        podfacts._AHEAD.remove(failing)


def test_a_fact_for_some_pods_is_derived_ahead_for_those_alone() -> None:
    """``only``: a gang member's fact is derived ahead for gang members, not for the pods
    scheduled on their own (whoever asks about one derives it then)."""
    members: PodFact[str] = PodFact(lambda p: p.name, ahead=True, only=gang_module.is_member)
    try:
        cache = ClusterCache()
        member = pod("m", uid="u-m", labels={"muster.io/pod-group": "g"})
        single = pod("s", uid="u-s")
        cache.upsert_pods([member, single])
        hit = members.lookup()("u-m")
        assert hit is not None and hit[0] is cache.pod("u-m")
        assert members.lookup()("u-s") is None
        assert members.of(single) == "s"  # on demand, as before
    finally:
        podfacts._AHEAD.remove(members)
