"""What explain keeps across a running pod's change (kept by identity: the order by end, the
running units brought up to date, the line played forward, free-at starts and priority
fixes) never changes an answer. After random sequences of events, most of them about running
pods (a status or label update, another runtime, a new pod binding, one ending) mixed with
pending ones and planner cycles, the clock still or moving: every gang's explanation, a pod's
and a what-if's equal those computed from scratch; ``changed_pods`` names exactly the pods
that differ; the units brought up to date equal ``running_units`` found from scratch."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from app.core.actions import backfill
from app.core.actions.backfill import Ending, EndingMemo, ending
from app.core.actions.victims import Unit, freed, running_units, same_unit
from app.core.cycle.memos import ACROSS_SCOPES, SnapshotMemo
from app.core.cycle.outlook import Outlook
from app.core.cycle.planner import Planner
from app.core.insight import eta, explain, fixes, forward, units
from app.core.insight.explain import explain_gang, explain_pod
from app.core.insight.whatif import proposal_from, what_if
from app.core.model.values import Pod
from app.core.state.cache import ClusterCache
from app.core.state.changelog import ChangeLog
from app.core.state.diff import changed_pods
from app.core.state.view import Snapshot
from tests.core import test_cache_placed
from tests.core.scenario import NOW
from tests.core.test_ending_memo import _reference as reference
from tests.core.test_ending_memo import _same as same_ending
from tests.core.test_explain_steady import NODES, RUNTIMES, _event, _member, _running
from tests.factories import node


def _running_event(cache: ClusterCache, planner: Planner, rng: random.Random, step: int) -> None:
    """Mostly a running pod changing without moving (status, labels), else any event."""
    running = [p for p in cache.snapshot().pods.values() if p.node_name and not p.terminal]
    kind = rng.choice(["status", "status", "label", "start", "other", "other"])
    if kind == "start":
        started = NOW - 60 * rng.randrange(60)
        pod = _running(f"s{step}", rng.choice(NODES), rng.choice([1, 2]), "1h", started)
        cache.upsert_pods([_muster(pod, rng.choice([0, 0, 5]))])
    elif kind == "status" and running:
        p = rng.choice(running)
        cache.upsert_pods([replace(p, annotations={**p.annotations, "status": str(step)})])
    elif kind == "label" and running:
        p = rng.choice(running)
        cache.upsert_pods([replace(p, labels={**p.labels, "seen": str(step)})])
    else:
        _event(cache, planner, rng, step)


def _muster(pod: Pod, priority: int) -> Pod:
    """``pod`` as one of Muster's own (its default queue accounts for it: a running unit)."""
    return replace(pod, scheduler_name="muster", priority=priority)


def _fresh(outlook: Outlook) -> Outlook:
    return replace(outlook, kept=SnapshotMemo(), memo={})


def _whatif_body(step: int) -> dict[str, Any]:
    requests = {"nvidia.com/gpu": str(2 ** (step % 4))}
    return {
        "name": f"w{step}",
        "replicas": 2,
        "pod": {"spec": {"containers": [{"name": "m", "resources": {"requests": requests}}]}},
    }


def _cluster(
    rng: random.Random,
    nodes: Sequence[str] = NODES,
    count: int = 10,
    gpus: Sequence[int] = (2, 4),
    priorities: Sequence[int] = (0, 0, 5),
    min_runtime: float = 0.0,
) -> tuple[ClusterCache, Planner, list[float]]:
    """``count`` of Muster's pods running on ``nodes`` (8 GPUs each), three gangs waiting."""
    cache = ClusterCache()
    cache.upsert_nodes([node(n, gpus=8) for n in nodes])
    running = [
        _muster(
            _running(
                f"r{i}",
                nodes[i % len(nodes)],
                rng.choice(gpus),
                rng.choice(RUNTIMES),
                NOW - 60 * rng.randrange(60),
            ),
            rng.choice(priorities),
        )  # fmt: skip
        for i in range(count)
    ]
    gangs = [_member(f"w{g}", i, 2, rng.choice([4, 8]), 0, "1h") for g in range(3) for i in (0, 1)]
    cache.upsert_pods([*running, *gangs])
    cache.mark_synced()
    clock = [NOW]
    planner = Planner(cache, clock=lambda: clock[0], wall=lambda: clock[0], min_runtime=min_runtime)
    return cache, planner, clock


def _gangs_as_fresh(outlook: Outlook, step: int) -> list[dict[str, Any]]:
    """Every gang's explanation, each checked equal to one computed from scratch."""
    fresh, out = _fresh(outlook), []
    for key in sorted(outlook.gangs):
        namespace, name = key.split("/")
        out.append(explain_gang(outlook, namespace, name).as_dict())
        assert out[-1] == explain_gang(fresh, namespace, name).as_dict(), (step, key)
    return out


@pytest.mark.parametrize("advance", [False, True], ids=["still clock", "moving clock"])
@pytest.mark.parametrize("seed", range(4))
def test_kept_answers_equal_answers_from_scratch_after_running_pods_change(
    seed: int, advance: bool
) -> None:
    rng = random.Random(seed)
    cache, planner, clock = _cluster(rng)
    waited = fixes = 0
    for step in range(60):
        _running_event(cache, planner, rng, step)
        if advance:
            clock[0] += rng.choice([0.0, 0.0, 1.0, 30.0, 600.0])
        outlook = planner.look()
        fresh = _fresh(outlook)
        for kept in _gangs_as_fresh(outlook, step):
            waited += kept["state"] == "waiting"
            fixes += any(f["change"].startswith("priority") for f in kept["fixes"])
        for pod in list(outlook.session.snapshot.pods.values())[:3]:
            assert (
                explain_pod(outlook, pod.namespace, pod.name).as_dict()
                == explain_pod(fresh, pod.namespace, pod.name).as_dict()
            )
        proposal = proposal_from(_whatif_body(step), scheduler_name="muster", now=clock[0])
        assert what_if(outlook, proposal).as_dict() == what_if(fresh, proposal).as_dict(), step
    assert waited > 20 and fixes > 5  # mostly waiting gangs, some with a priority fix


def _units_from_scratch(outlook: Outlook) -> list[Any]:
    snapshot = outlook.session.snapshot
    return running_units(
        replace(snapshot, view=outlook.session.backfill_view()),
        dict(outlook.gangs),
        lambda p: outlook.queue_names.of(p, outlook.config) or None,
        now=outlook.now,
        protection=outlook.protection,
    )


@pytest.mark.parametrize("protected", [0.0, 300.0], ids=["unprotected", "protected 5 min"])
@pytest.mark.parametrize("seed", range(4))
def test_units_brought_up_to_date_equal_units_found_from_scratch(
    seed: int, protected: float
) -> None:
    """With protection, pods that start are young for a while and come of age later."""
    rng = random.Random(seed)
    cache, planner, clock = _cluster(rng, min_runtime=protected)
    kept_token = 0
    last_token: object = None
    for step in range(80):
        _running_event(cache, planner, rng, step)
        clock[0] += rng.choice([0.0, 0.0, 1.0, 5.0, 60.0])
        outlook = planner.look()
        found = units.units_of(outlook)
        scratch = _units_from_scratch(outlook)
        assert len(found.units) == len(scratch), step
        # Units of pods that started on their own since may sit elsewhere in the list (see
        # ``_units_since``): compared in the order every search puts them in.
        ordered = sorted(found.units, key=_order), sorted(scratch, key=_order)
        assert all(same_unit(a, b) for a, b in zip(*ordered, strict=True)), step
        # The units per priority brought up to date alike (what the priority fix reads).
        counted = {p: n for p, n in found.priorities.items() if n}
        assert counted == Counter(u.priority for u in scratch), step
        # The units hold the pods of the snapshot asked about, never older objects.
        pods = outlook.session.snapshot.pods
        assert all(p is pods[p.uid] for u in found.units for p in u.pods), step
        kept_token += found.token is last_token
        last_token = found.token
    assert kept_token > 10  # the units were brought up to date, not found again, many times


def _order(unit: Unit) -> tuple[object, ...]:
    return (unit.key, unit.elastic, unit.started, tuple(p.uid for p in unit.pods))


def _by_hand(old: Snapshot, new: Snapshot) -> set[str]:
    facts = ("placement", "reserved", "bound_at", "gang_members", "devices")
    out = {u for u in old.pods.keys() | new.pods.keys() if old.pods.get(u) is not new.pods.get(u)}
    for name in facts:
        a, b = getattr(old, name), getattr(new, name)
        out |= {u for u in a.keys() | b.keys() if a.get(u) != b.get(u)}
    return out | (old.assumed ^ new.assumed)


@pytest.mark.parametrize("seed", range(6))
def test_changed_pods_names_exactly_the_pods_that_differ(seed: int) -> None:
    rng = random.Random(seed)
    cache = ClusterCache()
    cache.upsert_nodes([node(n, gpus=4) for n in test_cache_placed.NODES])
    before = cache.snapshot()
    seen = logged = 0
    for step in range(300):
        test_cache_placed.event(cache, rng, step)
        after = cache.snapshot()
        assert changed_pods(before, after) == _by_hand(before, after), step
        assert after.changes is not None
        said = after.changes.since(before.generation, after.generation)
        if said is not None:  # what the cache recorded names the same pods
            assert said == _by_hand(before, after), step
            logged += 1
        seen += bool(_by_hand(before, after))
        before = after
    cache.upsert_nodes([node("another", gpus=4)])
    assert changed_pods(before, cache.snapshot()) is None  # other nodes: anything may differ
    assert seen > 100 and logged > 100


def test_the_change_log_says_nothing_beyond_what_it_holds() -> None:
    log = ChangeLog(size=4)
    for generation in range(1, 11):
        log.record(generation, (f"p{generation}",) if generation != 6 else None)
    assert log.since(8, 10) == {"p9", "p10"}
    assert log.since(10, 10) == frozenset()
    assert log.since(5, 7) is None  # generation 6 did not say which pods it changed
    assert log.since(0, 3) is None  # no longer held


def test_a_running_pods_status_update_keeps_the_order_units_and_priority_fix() -> None:
    """The common event of a live cluster: a running pod's status changes, nothing moves.
    What explain derived from the running pods is kept as the very same objects."""
    rng = random.Random(3)
    cache, planner, _ = _cluster(rng)
    planner.cycle(force=True)
    outlook = planner.look()
    answers = {k: explain_gang(outlook, *k.split("/")).as_dict() for k in outlook.gangs}
    order = eta._ending(outlook, replace(outlook.session.snapshot,
                                             view=outlook.session.backfill_view()))  # fmt: skip
    token = units.units_of(outlook).token
    running = next(p for p in cache.snapshot().pods.values() if p.node_name)
    cache.upsert_pods([replace(running, annotations={**running.annotations, "status": "x"})])
    after = planner.look()
    assert after.session.snapshot.placed_generation != outlook.session.snapshot.placed_generation
    again = {k: explain_gang(after, *k.split("/")).as_dict() for k in after.gangs}
    assert again == answers
    snapshot = replace(after.session.snapshot, view=after.session.backfill_view())
    assert eta._ending(after, snapshot) is order
    assert units.units_of(after).token is token
    # A runtime change moves that pod's end: the order is found again (and differs).
    pod = cache.pod(running.uid)
    assert pod is not None
    cache.upsert_pods([replace(pod, annotations={**pod.annotations,
                                                 "muster.io/expected-runtime": "7h"})])  # fmt: skip
    later = planner.look()
    snapshot = replace(later.session.snapshot, view=later.session.backfill_view())
    assert eta._ending(later, snapshot) is not order
    assert eta._ending(later, snapshot).ends != order.ends


@pytest.mark.parametrize("planned", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_the_order_by_end_brought_up_to_date_equals_a_sort_of_every_pod(
    seed: int, planned: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ending`` with one memo after each event: the same answer, pods taken out and put in
    again, or every pod read again; each equals ``ending`` without a memo and the first
    implementation (a stable sort of every counted pod by expected end)."""
    outcomes: list[str] = []
    update = backfill._updated

    def spy(last: Any, new: Snapshot, now: float, memo: EndingMemo) -> Ending | None:
        kept = last.ending
        out = update(last, new, now, memo)
        outcomes.append("read all" if out is None else "same" if out is kept else "spliced")
        return out

    monkeypatch.setattr(backfill, "_updated", spy)
    rng = random.Random(seed)
    cache = ClusterCache()
    cache.upsert_nodes([node(n, gpus=4) for n in test_cache_placed.NODES])
    memo = EndingMemo()
    for step in range(300):
        if rng.random() < 0.3:
            running = [p for p in cache.snapshot().pods.values() if p.node_name]
            if running:
                p = rng.choice(running)
                cache.upsert_pods([replace(p, labels={**p.labels, "seen": str(step)})])
        else:
            test_cache_placed.event(cache, rng, step)
        snapshot = cache.snapshot()
        if rng.random() < 0.3:  # a call for some rows first brings the memo's entries on
            within = np.array([rng.random() < 0.7 for _ in test_cache_placed.NODES])
            ending(snapshot, now=5000.0, default_runtime=1800.0, memo=memo, within=within,
                   planned_start_now=planned)  # fmt: skip
        kept = ending(snapshot, now=5000.0, default_runtime=1800.0, memo=memo,
                      planned_start_now=planned)  # fmt: skip
        fresh = ending(snapshot, now=5000.0, default_runtime=1800.0, planned_start_now=planned)
        assert same_ending(kept, fresh), step
        assert same_ending(fresh, reference(snapshot, None, planned)), step
    assert {"same", "spliced"} <= set(outcomes), outcomes
    assert outcomes.count("spliced") >= 3


def _crowded_event(cache: ClusterCache, rng: random.Random, step: int) -> None:
    running = [p for p in cache.snapshot().pods.values() if p.node_name and not p.terminal]
    kind = rng.choice(["status", "status", "end", "end", "start", "restart", "cordon"])
    p = rng.choice(running)
    if kind == "status":
        cache.upsert_pods([replace(p, annotations={**p.annotations, "status": str(step)})])
    elif kind == "end":
        cache.delete_pod(p.uid)
    elif kind == "restart":  # it ends and starts again where it ran
        cache.delete_pod(p.uid)
        cache.upsert_pods([p])
    elif kind == "start":
        node_name = rng.choice(sorted(cache.backfill_view().index))
        pod = _running(f"s{step}", node_name, 1, "1h", NOW - 60 * rng.randrange(60))
        cache.upsert_pods([_muster(pod, rng.choice([0, 5]))])
    else:  # a running pod of another scheduler: it holds room but is no unit
        cache.upsert_pods([_running(f"o{step}", p.node_name, 1, "1h", NOW)])


@pytest.mark.parametrize("seed", range(3))
def test_the_view_without_lower_units_kept_equals_one_freed_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    # More running units than a priority fix searches whole (``FOCUS_UNITS``).
    nodes = [f"m{i}" for i in range(12)]
    cache, planner, clock = _cluster(rng, nodes, 90, (1,), (0, 0, 0, 5))
    kept = 0
    last_view: object = None
    for step in range(50):
        _crowded_event(cache, rng, step)
        clock[0] += rng.choice([0.0, 0.0, 1.0])
        outlook = planner.look()
        offered = [f for a in _gangs_as_fresh(outlook, step) for f in a["fixes"]]
        assert any(f["change"].startswith("priority") for f in offered), step
        found = units.units_of(outlook)
        snapshot = replace(outlook.session.snapshot, view=outlook.session.backfill_view())
        lower = [u for u in found.units if u.priority < 1]
        view = fixes._freed_below(outlook, snapshot, found, 1)
        scratch = freed(snapshot, lower)
        assert np.array_equal(view.used, scratch.used), step
        assert np.array_equal(view.gpu_free, scratch.gpu_free), step
        kept += view is last_view
        last_view = view
        placement = snapshot.placement
        nodes = set(rng.sample(sorted(snapshot.view.index), 3))
        listed = [u for u in found.units if any(placement.get(p.uid) in nodes for p in u.pods)]
        on = found.on(nodes)
        assert sorted(on, key=_order) == sorted(listed, key=_order), step
        assert len(on) == len(listed), step
    assert kept > 5  # kept across running pods' events, not freed again each time


def test_values_kept_across_snapshots_are_kept_per_scope_for_the_last_scopes() -> None:
    memo = SnapshotMemo()
    made: list[str] = []

    def make(name: str) -> str:
        made.append(name)
        return name

    view, pod = object(), object()
    assert memo.across("k", lambda: make("a"), scope=[view], same=[pod]) == "a"
    assert memo.across("k", lambda: make("b"), scope=[view], same=[pod]) == "a"  # kept
    assert memo.across("k", lambda: make("c"), scope=[view], same=[object()]) == "c"
    assert memo.across("k", lambda: make("d"), scope=[object()]) == "d"  # another scope
    scopes = [object() for _ in range(ACROSS_SCOPES)]
    for s in scopes:
        memo.across("k", lambda: make("e"), scope=[s])
    assert memo.across("k", lambda: make("f"), scope=[scopes[-1]]) == "e"  # still kept
    assert memo.across("k", lambda: make("g"), scope=[view]) == "g"  # the oldest went
    assert made == ["a", "c", "d", *["e"] * ACROSS_SCOPES, "g"]


def test_units_keep_past_ten_seconds_only_while_their_order_by_work_lost_cannot_change() -> None:
    """Lone pods' units order by start whatever the clock: kept until one comes of age. A
    running gang of two pods holding as many GPUs as a lone pod may overtake it in work lost
    (seconds run times pods) as the clock moves: kept ten seconds at most then."""
    rng = random.Random(5)
    cache, planner, clock = _cluster(rng)
    outlook = planner.look()
    assert units.units_of(outlook).timeless
    clock[0] += 3600.0
    later = planner.look()
    assert units.units_of(later).token is units.units_of(outlook).token
    gang = [replace(_member("pair", i, 2, 1, 0, "1h"), node_name=NODES[i], phase="Running",
                    started=clock[0] - 600) for i in (0, 1)]  # fmt: skip
    cache.upsert_pods([replace(p, scheduler_name="muster") for p in gang])
    found = units.units_of(planner.look())
    assert any(len(u.pods) == 2 for u in found.units)
    assert not found.timeless
    assert not found.fresh(found.since + units.UNITS_SECONDS)


def test_starts_and_ends_take_the_kept_placements_hints_and_verdicts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The random sequences above (every answer equal to one from scratch) go through what
    is kept across a start or an end: placements taken again, counts searched from the last
    ones, node verdicts found again for the changed rows alone."""
    taken: Counter[str] = Counter()
    placed, near, verdicts = forward.placed_alike, forward._first_near, explain._Verdicts.of

    def spy_placed(*args: Any, **kwargs: Any) -> bool:
        found = placed(*args, **kwargs)
        taken["placement kept"] += found
        return found

    def spy_near(*args: Any) -> int:
        taken["count searched from a hint"] += args[3] is not None
        return near(*args)

    def spy_verdicts(view: Any, pod: Any, rows: Any, last: Any) -> Any:
        taken["verdicts of changed rows"] += last is not None
        return verdicts(view, pod, rows, last)

    monkeypatch.setattr(forward, "placed_alike", spy_placed)
    monkeypatch.setattr(forward, "_first_near", spy_near)
    monkeypatch.setattr(explain._Verdicts, "of", staticmethod(spy_verdicts))
    test_kept_answers_equal_answers_from_scratch_after_running_pods_change(0, True)
    assert all(taken[k] > 20 for k in ("placement kept", "count searched from a hint",
                                       "verdicts of changed rows")), taken  # fmt: skip
