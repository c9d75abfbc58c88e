"""What a cycle derives from a pod alone is remembered per pod uid (``PodFact``): a pod's
newer version takes its older one's entry, and a cluster of more pods than the old
object-keyed memos held (16,384) is not derived again on every pass."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.core.gpu import ask as ask_module
from app.core.gpu.ask import GpuAsk
from app.core.model import gang as gang_module
from app.core.model.gang import gang_spec
from app.core.model.podfacts import PodFact
from app.core.model.values import Pod
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


def test_the_memo_starts_over_past_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(PodFact, "LIMIT", 3)
    fact: PodFact[str] = PodFact(lambda p: p.uid)
    pods = [pod(f"p{i}", uid=f"u{i}") for i in range(4)]
    assert fact.of_each(pods) == ["u0", "u1", "u2", "u3"]
    assert len(fact._kept) == 1  # started over at the fourth


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
