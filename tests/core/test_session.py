"""Planning sessions: a cycle decides on a working copy and commits it in one step, or
discards it; plans record GPU devices, and bind uses them."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from app.core.cycle import planner as planner_module
from app.core.cycle.planner import Planner
from app.core.cycle.plans import Plan, Reason, Why
from app.core.cycle.session import Session, SessionClosed
from app.core.gpu.ask import GpuAsk, GpuOvercommit
from app.core.model.labels import GPU_IDS
from app.core.model.status import Code
from app.core.model.values import Pod
from app.core.state.cache import ClusterCache
from app.core.state.statement import Applied, Statement
from tests.core.gangsim import Cluster
from tests.factories import node, pod


def member(gang: str, i: int, gpu: int = 1, minimum: int = 2, **kw: object) -> Pod:
    labels = {"muster.io/pod-group": gang, "muster.io/min-member": str(minimum)}
    return pod(f"{gang}-{i}", gpu=gpu, labels=labels, **kw)  # type: ignore[arg-type]


def cache_with(*pods: Pod, gpus: int = 8, nodes: int = 1) -> ClusterCache:
    cache = ClusterCache()
    cache.upsert_nodes([node(f"n{i}", gpus=gpus) for i in range(nodes)])
    cache.upsert_pods(pods)
    return cache


def gpu_used(cache: ClusterCache, name: str = "n0") -> int:
    return cache.view().used_of(name).gpu // 1000


# -- the session on its own ----------------------------------------------------------------


def test_reservations_show_in_the_session_and_reach_the_cache_only_on_commit() -> None:
    a, b = member("g", 0, gpu=3), member("g", 1, gpu=3)
    cache = cache_with(a, b)
    session = Session(cache, {})
    session.reserve("default/g", {a.uid: "n0", b.uid: "n0"}, {a.uid: (0, 1, 2), b.uid: (3, 4, 5)})
    assert session.view().used_of("n0").gpu == 6000
    assert session.view().gpu_free[0, :8].tolist() == [0] * 6 + [1000] * 2
    assert gpu_used(cache) == 0 and cache.snapshot().reserved == {}
    applied = session.commit()
    assert applied.refused == {} and applied.clean
    assert gpu_used(cache) == 6
    assert cache.devices_of(a.uid) == (0, 1, 2) and cache.devices_of(b.uid) == (3, 4, 5)


@pytest.mark.parametrize(
    ("devices", "taken"),
    [
        ({"a": (2,), "b": (2,)}, ()),  # one whole GPU picked for two pods
        ({"a": (0,), "b": (8,)}, ()),  # a device the node does not have
        ({"a": (0,), "b": (-1,)}, ()),
        ({"a": (0,), "b": (1,)}, (1,)),  # a device another reservation took
        ({"a": (0,), "b": (1,)}, ("share",)),  # a device partly taken
    ],
)
def test_whole_gpu_picks_taken_together_are_still_checked(
    devices: dict[str, tuple[int, ...]], taken: tuple[object, ...]
) -> None:
    a, b, c = member("g", 0), member("g", 1), member("h", 0, minimum=1)
    share = pod("s", annotations={"muster.io/gpu-fraction": "0.5"})
    cache = cache_with(a, b, c, share)
    session = Session(cache, {})
    if taken == (1,):
        session.reserve("default/h", {c.uid: "n0"}, {c.uid: (1,)})
    elif taken:
        session.reserve("", {share.uid: "n0"}, {share.uid: (1,)})
    uids = {"a": a.uid, "b": b.uid}
    picks = {uids[k]: v for k, v in devices.items()}
    with pytest.raises(GpuOvercommit):
        session.reserve_all([("default/g", {a.uid: "n0", b.uid: "n0"}, picks)])


def test_a_whole_gpu_pick_past_a_smaller_nodes_devices_is_refused() -> None:
    """A 4-GPU node next to an 8-GPU one: its devices 4..7 are the device matrix's padding,
    never free, so a pick there is refused as one the node does not have."""
    a, b = member("g", 0), member("g", 1)
    cache = ClusterCache()
    cache.upsert_nodes([node("n0", gpus=4), node("n1", gpus=8)])
    cache.upsert_pods([a, b])
    session = Session(cache, {})
    with pytest.raises(GpuOvercommit):
        session.reserve_all([("default/g", {a.uid: "n0", b.uid: "n0"}, {a.uid: (0,), b.uid: (5,)})])
    fine = Session(cache, {})
    fine.reserve_all([("default/g", {a.uid: "n0", b.uid: "n0"}, {a.uid: (0,), b.uid: (3,)})])
    assert fine.view().gpu_free[0].tolist() == [0, 1000, 1000, 0, 0, 0, 0, 0]


def test_whole_gpu_picks_of_many_reservations_are_taken_together() -> None:
    pods = [member(f"g{k}", i, minimum=2) for k in range(3) for i in range(2)]
    cache = cache_with(*pods, nodes=2)
    session = Session(cache, {})
    runs = [
        (f"default/g{k}", {pods[2 * k].uid: "n0", pods[2 * k + 1].uid: "n1"},
         {pods[2 * k].uid: (k,), pods[2 * k + 1].uid: (7 - k,)})
        for k in range(3)
    ]  # fmt: skip
    session.reserve_all(runs)
    free = session.view().gpu_free
    assert free[0, :8].tolist() == [0, 0, 0] + [1000] * 5
    assert free[1, :8].tolist() == [1000] * 5 + [0, 0, 0]
    assert session.view().used_of("n0").gpu == 3000
    assert session.commit().refused == {}
    assert cache.devices_of(pods[5].uid) == (5,)


def test_discard_leaves_the_cache_as_it_was_and_the_session_cannot_be_used_after() -> None:
    a = member("g", 0, gpu=2)
    cache = cache_with(a)
    generation = cache.generation
    session = Session(cache, {})
    session.reserve("default/g", {a.uid: "n0"}, {a.uid: (0, 1)})
    session.hold("default/x", {"n0": a.requests}, 10.0)
    session.discard()
    assert cache.generation == generation and gpu_used(cache) == 0 and cache.holds[0] == ""
    with pytest.raises(SessionClosed):
        session.release([a.uid])
    with pytest.raises(SessionClosed):
        session.commit()


def test_commit_rechecks_what_changed_meanwhile_and_refuses_all_of_a_gang() -> None:
    a, b, intruder = member("g", 0, gpu=4), member("g", 1, gpu=4), pod("single", gpu=2)
    cache = cache_with(a, b, intruder)
    session = Session(cache, {})
    session.reserve(
        "default/g", {a.uid: "n0", b.uid: "n0"}, {a.uid: (0, 1, 2, 3), b.uid: (4, 5, 6, 7)}
    )
    cache.assume(intruder.uid, "n0")  # a bind kube-scheduler made while the cycle ran
    applied = session.commit()
    assert not applied.clean
    assert list(applied.refused) == [0] and applied.refused[0].code is Code.UNSCHEDULABLE
    assert "node n0 no longer has room" in applied.refused[0].reason
    assert gpu_used(cache) == 2  # nothing of the gang was reserved
    assert cache.snapshot().reserved == {}


def test_planned_devices_taken_meanwhile_refuse_the_reservation() -> None:
    a, other = member("g", 0, gpu=1, minimum=1), pod("single", gpu=1)
    cache = cache_with(a, other, gpus=2)
    session = Session(cache, {})
    session.reserve("default/g", {a.uid: "n0"}, {a.uid: (0,)})
    cache.assume(other.uid, "n0", (0,))
    applied = session.commit()
    assert "device 0 is partly used" in applied.refused[0].reason


def test_release_then_reserve_elsewhere_in_one_session() -> None:
    a = member("g", 0, gpu=2, minimum=1)
    cache = cache_with(a, nodes=2)
    assert cache.reserve({a.uid: "n0"}).ok
    session = Session(cache, {})
    session.release([a.uid])
    assert session.view().used_of("n0").gpu == 0
    assert session.queue_usage() == {}  # the released reservation no longer counts
    session.reserve("default/g", {a.uid: "n1"}, {a.uid: (6, 7)})
    assert session.view().used_of("n1").gpu == 2000
    assert [u[0] for u in session.queue_usage().values()] == [2000]
    session.commit()
    assert cache.snapshot().reserved == {a.uid: "n1"} and cache.devices_of(a.uid) == (6, 7)
    assert gpu_used(cache, "n0") == 0


def test_session_plans_are_copies() -> None:
    plan = Plan("default/g", {"u": "n0"}, frozenset({"u"}), 1, 0.0, 60.0)
    session = Session(cache_with(), {"default/g": plan})
    session.plans["default/g"].members["v"] = "n0"
    assert plan.members == {"u": "n0"}


# -- the planner through sessions ---------------------------------------------------------


def test_a_plan_records_the_devices_the_cache_holds_for_its_members() -> None:
    members = [member("g", i, gpu=2, minimum=3) for i in range(3)]
    cache = cache_with(*members)
    planner = Planner(cache)
    assert planner.cycle() == ["default/g"]
    plan = planner.plan("default/g")
    assert plan is not None
    assert set(plan.devices) == {p.uid for p in members}
    for p in members:
        assert plan.devices[p.uid] == cache.devices_of(p.uid)
    chosen = sorted(d for p in members for d in plan.devices[p.uid])
    assert chosen == sorted(set(chosen)) and len(chosen) == 6


def test_bind_uses_the_planned_devices() -> None:
    async def scenario() -> None:
        cluster = Cluster([node("n", gpus=8)])
        gang = [member("g", i, gpu=2, minimum=2) for i in range(2)]
        cluster.cache.upsert_pods(gang)
        attempts = [cluster.attempt(p) for p in gang]
        plan = cluster.extender.planner.plan("default/g")
        assert plan is not None
        planned = dict(plan.devices)
        outcomes = await asyncio.gather(*(t.bind for t in attempts if t.bind))
        assert [o.error for o in outcomes] == ["", ""]
        for p in gang:
            bound = cluster.cache.pod(p.uid)
            assert bound is not None
            assert bound.annotations[GPU_IDS] == ",".join(map(str, planned[p.uid]))

    asyncio.run(scenario())


class RacingCache(ClusterCache):
    """A cache where something binds a pod just before each commit lands."""

    def __init__(self, intruders: list[tuple[str, str]]) -> None:
        super().__init__()
        self.intruders = intruders

    def apply(self, statement: Statement) -> Applied:
        while self.intruders:
            uid, name = self.intruders.pop()
            self.assume(uid, name)
        return super().apply(statement)


def test_a_plan_overtaken_before_commit_is_dropped_and_planned_again() -> None:
    gang = [member("g", i, gpu=4, minimum=2) for i in range(2)]
    intruder = pod("single", gpu=4)
    cache = RacingCache([(intruder.uid, "n0")])
    cache.upsert_nodes([node("n0", gpus=8), node("n1", gpus=8)])
    cache.upsert_pods([*gang, intruder])
    planner = Planner(cache)
    assert planner.cycle() == []
    assert planner.plan("default/g") is None
    (row,) = planner.describe()
    assert "plan could not be reserved (node n0 no longer has room" in row["reason"]
    assert row["reasonCode"] == Why.REFUSED
    assert cache.snapshot().reserved == {}
    # The next cycle sees the intruder and plans around it.
    assert planner.cycle() == ["default/g"]
    plan = planner.plan("default/g")
    assert plan is not None and set(plan.members.values()) == {"n1"}


def test_a_failing_cycle_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    first = [member("a", i, gpu=1) for i in range(2)]
    second = [member("b", i, gpu=1, created=10) for i in range(2)]
    cache = cache_with(*first, *second)
    planner = Planner(cache)
    real = planner_module.allocate_topology
    calls = []

    def flaky(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(planner_module, "allocate_topology", flaky)
    generation = cache.generation
    with pytest.raises(RuntimeError):
        planner.cycle()
    assert planner.plan("default/a") is None
    assert cache.generation == generation and cache.snapshot().reserved == {}
    monkeypatch.setattr(planner_module, "allocate_topology", real)
    assert sorted(planner.cycle()) == ["default/a", "default/b"]


# -- requests never wait for a running cycle -------------------------------------------------


def test_commit_in_slices_gives_the_same_result_and_says_whether_anything_else_changed() -> None:
    pods = [member(f"g{k}", i, gpu=1) for k in range(6) for i in range(2)]
    results = []
    for slice_seconds in (10.0, 0.0):  # one slice, or one operation per slice
        cache = cache_with(*pods, nodes=2)
        session = Session(cache, {})
        for k in range(6):
            uids = [p.uid for p in pods[2 * k : 2 * k + 2]]
            session.reserve(f"default/g{k}", dict.fromkeys(uids, f"n{k % 2}"), {})
        applied = cache.apply(session.statement, slice_seconds=slice_seconds)
        assert applied.clean and applied.generation == cache.generation
        results.append((applied.refused, dict(applied.devices), cache.view().used.tolist()))
    assert results[0] == results[1]
    # Something else changed the cache after the snapshot: not clean.
    cache = cache_with(*pods)
    session = Session(cache, {})
    session.reserve("default/g0", {pods[0].uid: "n0", pods[1].uid: "n0"}, {})
    cache.upsert_pod(pod("other", gpu=1))
    assert not cache.apply(session.statement, slice_seconds=0.0).clean


def test_a_member_of_a_gang_short_of_members_runs_no_cycle() -> None:
    """No cycle could plan a gang with fewer members than its minimum: its members' filter
    says so without running one (the member that completes the gang plans it)."""
    a, b, c = member("g", 0, minimum=3), member("g", 1, minimum=3), member("g", 2, minimum=3)
    cache = cache_with(a)
    planner = Planner(cache)
    told = planner.verdict(a)
    assert (told.node, told.reason) == ("", "gang default/g: waiting for members: 1 of 3 exist")
    cache.upsert_pod(b)
    assert "2 of 3 exist" in planner.verdict(b).reason
    assert planner.cycles == 0
    cache.upsert_pod(c)
    assert planner.verdict(c).node == "n0" and planner.cycles == 1
    # Members that disagree on the minimum: a cycle says what is wrong.
    d, e = member("h", 0, minimum=3), member("h", 1, minimum=1)
    cache.upsert_pods([d, e])
    told = planner.verdict(d)
    assert planner.cycles == 2 and "min-member" in told.reason


@contextmanager
def cycle_running(planner: Planner) -> Iterator[None]:
    """Another thread holds what a running cycle holds (the planner's lock) meanwhile."""
    running, done = threading.Event(), threading.Event()

    def cycle_in_progress() -> None:
        with planner.book.lock:
            running.set()
            done.wait(10)

    thread = threading.Thread(target=cycle_in_progress)
    thread.start()
    try:
        assert running.wait(10)
        yield
    finally:
        done.set()
        thread.join()


def test_verdict_and_replan_never_wait_for_a_cycle_running_in_another_thread() -> None:
    a, b, c = member("g", 0), member("g", 1), member("h", 0, minimum=1)
    cache = cache_with(a, b)
    planner = Planner(cache)
    planner.cycle()
    assert planner.verdict(a).node == "n0"
    cache.upsert_pod(c)  # a gang no plan names yet
    with cycle_running(planner):
        # Planned members are answered from the published plans.
        assert planner.verdict(b).node == "n0" and planner.plan("default/g") is not None
        # An unplanned member is told to wait instead of waiting.
        told = planner.verdict(c)
        assert told.node == "" and planner_module.BUSY in told.reason
        assert planner_module.BUSY in planner.replan_member(a, ["n1"]).reason
        assert planner.look(wait=False) is None
    # Once the cycle is over, the member is planned on demand as before.
    assert planner.verdict(c).node == "n0"


def test_plans_of_a_run_of_alike_gangs_get_distinct_random_ids() -> None:
    cache = ClusterCache()
    cache.upsert_nodes(
        [node(f"n{i}", gpus=8, labels={"network.topology.nvidia.com/block": f"b{i // 4}"})
         for i in range(8)]
    )  # fmt: skip
    cache.upsert_pods([member(f"g{k}", i) for k in range(6) for i in range(2)])
    planner = Planner(cache, strategy="binpack", scheduler_name="muster")
    planned = planner.cycle()
    assert len(planned) == 6
    ids = [plan.id for plan in (planner.plan(key) for key in planned) if plan is not None]
    assert len(set(ids)) == 6
    assert all(len(i) == 12 and int(i, 16) >= 0 for i in ids)


def test_a_member_completing_its_gang_mid_cycle_is_not_told_the_outdated_count() -> None:
    """The last cycle found the gang one member short; the member that completes it comes
    while another thread runs a cycle: it is told a cycle is under way, not '1 of 2'."""
    a, b = member("g", 0), member("g", 1)
    cache = cache_with(a)
    planner = Planner(cache)
    planner.cycle()
    assert planner.book.reasons["default/g"] == Reason(
        Why.SHORT_OF_MEMBERS, "waiting for members: 1 of 2 exist"
    )
    cache.upsert_pod(b)
    with cycle_running(planner):
        told = planner.verdict(b)
        assert told.reason == f"gang default/g: {planner_module.BUSY}", told.reason
    assert planner.verdict(b).node == "n0"


def _alike_case(
    case: str, pods: list[Pod]
) -> tuple[ClusterCache, list[tuple[str, dict[str, str], dict[str, tuple[int, ...]]]]]:
    gpu = pods[0].requests.gpu // 1000
    cache = cache_with(*pods, pod("other", uid="other", gpu=1), nodes=3)
    runs = []
    for k in range(3):
        a, b = pods[2 * k], pods[2 * k + 1]
        devices = {a.uid: (k,), b.uid: (7 - k,)} if gpu == 1 else {}
        if gpu == 2:
            devices = {a.uid: (2 * k, 2 * k + 1), b.uid: (2 * k, 2 * k + 1)}
        if case == "one device twice" and k == 2:
            devices[b.uid] = (6,)  # g1's second member's device on n1 too
        placements = {a.uid: "n0", b.uid: "n1" if k else "n2"}
        if case == "a pod the cache does not know" and k == 1:
            placements["ghost"], devices["ghost"] = "n2", (3,)
        runs.append((f"default/g{k}", placements, devices))
    if case == "reserved in the cache":
        earlier = Session(cache, {})
        earlier.reserve("default/g1", {pods[2].uid: "n2"}, {pods[2].uid: (5,)})
        assert earlier.commit().refused == {}
    return cache, runs


def _prepare(session: Session, case: str, pods: list[Pod]) -> None:
    if case == "reserved in this session":
        session.reserve("default/g0", {pods[0].uid: "n1"}, {pods[0].uid: (6,)})
    if case == "released in this session":
        session.reserve("", {"other": "n2"}, {"other": (0,)})
        session.release(["other"])


@pytest.mark.parametrize(
    "case",
    [
        "whole GPUs",
        "no GPU",
        "two GPUs each",
        "reserved in this session",
        "reserved in the cache",
        "released in this session",
        "one device twice",
        "a pod the cache does not know",
        "one pod of other requests",
    ],
)
def test_reserving_alike_gangs_at_once_is_reserving_them_one_by_one(case: str) -> None:
    """``reserve_alike`` (list-level steps for runs of alike gangs) leaves the session as
    ``reserve_all`` does: views, reservations, the statement and the committed cache; where
    its usual case does not hold it hands the work to ``reserve_all``."""
    gpu = {"two GPUs each": 2, "no GPU": 0}.get(case, 1)
    pods = [member(f"g{k}", i, gpu=gpu, minimum=2) for k in range(3) for i in range(2)]
    if case == "one pod of other requests":
        pods[3] = member("g1", 1, gpu=gpu, minimum=2, cpu="200m")
    outcomes: list[object] = []
    for alike in (True, False):
        cache, runs = _alike_case(case, pods)
        session = Session(cache, {})
        _prepare(session, case, pods)
        requests, ask = pods[0].requests, GpuAsk.of(pods[0])
        try:
            if alike:
                session.reserve_alike(runs, requests, ask)
            else:
                session.reserve_all(runs)
        except (GpuOvercommit, KeyError) as error:
            outcomes.append((type(error).__name__, str(error)))
            continue
        view = session.view()
        state = (view.used.tolist(), view.gpu_free.tolist(), dict(session._reserved),
                 sorted(session._released), session.version, session.statement.ops)  # fmt: skip
        applied = session.commit()
        held = {p.uid: cache.devices_of(p.uid) for p in pods}
        outcomes.append((state, applied.refused, held, cache.view().used.tolist()))
    assert outcomes[0] == outcomes[1]
    if case == "one device twice":
        assert outcomes[0][0] == "GpuOvercommit"
    if case == "a pod the cache does not know":
        assert outcomes[0] == ("KeyError", "'ghost'")
