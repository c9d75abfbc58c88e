"""Cluster cache: accounting, assume/confirm/forget/TTL, snapshots, thread safety."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import replace

import pytest

from app.core.model.errors import BindRejected
from app.core.model.labels import GPU_IDS, GPU_TOPOLOGY
from app.core.model.parse import node_from_dict
from app.core.model.values import Node, Pod, Resources
from app.core.state.cache import ClusterCache
from app.core.state.statement import Hold, Release, Reserve, Statement
from tests.factories import node, pod
from tests.spies import returns_of


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def gpus_used(cache: ClusterCache, name: str) -> int:
    return cache.view().used_of(name).gpu // 1000


def test_usage_follows_pod_lifecycle() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("a", gpus=8))
    p = pod(gpu=3, node="a", phase="Running")
    cache.upsert_pod(p)
    assert gpus_used(cache, "a") == 3
    cache.upsert_pod(replace(p, phase="Succeeded"))
    assert gpus_used(cache, "a") == 0
    cache.upsert_pod(replace(p, phase="Running"))
    cache.delete_pod(p.uid)
    assert gpus_used(cache, "a") == 0


def test_pod_seen_before_its_node_is_counted_when_node_arrives() -> None:
    cache = ClusterCache()
    cache.upsert_pod(pod(gpu=2, node="late"))
    cache.upsert_node(node("late", gpus=4))
    assert gpus_used(cache, "late") == 2


def test_nodes_after_their_pods_count_what_those_pods_use() -> None:
    """The pod LIST may end before the node LIST: nodes added in one batch then count what
    the pods placed on them use, as when the nodes came first."""
    names = ["a", "b", "c", "d"]
    pods = [
        pod(f"p{i}", gpu=1 + i % 3, cpu=f"{100 * (i % 4) + 100}m", node=names[i % 3])
        for i in range(9)
    ]
    nodes = [node(n, gpus=8) for n in names]
    late, early = ClusterCache(), ClusterCache()
    late.upsert_pods(pods)
    late.upsert_nodes(nodes)
    early.upsert_nodes(nodes)
    early.upsert_pods(pods)
    assert (late.view().used == early.view().used).all()
    assert [late.view().used_of(n) for n in names] == [early.view().used_of(n) for n in names]
    assert late.view().used_of("d") == Resources()


def test_assume_then_confirm() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("a", gpus=4))
    p = pod(gpu=4)
    cache.upsert_pod(p)
    cache.assume(p.uid, "a")
    assert gpus_used(cache, "a") == 4
    assert p.uid in cache.snapshot().assumed
    cache.upsert_pod(replace(p, node_name="a"))  # the watch sees the binding
    assert gpus_used(cache, "a") == 4
    assert p.uid not in cache.snapshot().assumed


def test_assume_rejects_when_node_is_full() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("a", gpus=4))
    first, second = pod(gpu=3), pod(gpu=2)
    cache.upsert_pods([first, second])
    cache.assume(first.uid, "a")
    with pytest.raises(BindRejected, match="needs 2 nvidia.com/gpu, 1 free"):
        cache.assume(second.uid, "a")
    assert gpus_used(cache, "a") == 3


@pytest.mark.parametrize(
    ("uid_known", "node_known", "message"),
    [(False, True, "unknown to Muster"), (True, False, "node ghost is unknown")],
)
def test_assume_unknowns(uid_known: bool, node_known: bool, message: str) -> None:
    cache = ClusterCache()
    cache.upsert_node(node("a"))
    p = pod(gpu=1)
    if uid_known:
        cache.upsert_pod(p)
    with pytest.raises(BindRejected, match=message):
        cache.assume(p.uid, "a" if node_known else "ghost")


def test_forget_and_ttl() -> None:
    clock = Clock()
    cache = ClusterCache(assume_ttl=30, clock=clock)
    cache.upsert_node(node("a", gpus=8))
    p, q = pod(gpu=2), pod(gpu=2)
    cache.upsert_pods([p, q])
    cache.assume(p.uid, "a")
    cache.assume(q.uid, "a")
    cache.forget(p.uid)
    assert gpus_used(cache, "a") == 2
    clock.now = 29.9
    assert gpus_used(cache, "a") == 2
    clock.now = 30.0
    assert gpus_used(cache, "a") == 0  # never confirmed: expired


def test_forget_leaves_confirmed_binds() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("a", gpus=8))
    p = pod(gpu=2)
    cache.upsert_pod(p)
    cache.assume(p.uid, "a")
    cache.confirm(p.uid, "a")
    cache.forget(p.uid)
    assert gpus_used(cache, "a") == 2


def test_a_failed_bind_gives_a_planned_pod_back_its_reservation() -> None:
    """A member's Binding fails (the API timed out): its plan still holds the room, so the
    room must stay taken, or another gang is planned into it and the member's next bind
    finds it full (and its gang is rolled back). The same when an assumption expires."""
    clock = Clock()
    cache = ClusterCache(assume_ttl=30, clock=clock)
    cache.upsert_node(node("a", gpus=8))
    p, q = pod(gpu=4), pod(gpu=4)
    cache.upsert_pods([p, q])
    assert cache.reserve({p.uid: "a", q.uid: "a"}).ok
    devices = cache.devices_of(p.uid)
    cache.assume(p.uid, "a")
    cache.forget(p.uid)
    assert gpus_used(cache, "a") == 8 and cache.devices_of(p.uid) == devices
    cache.assume(q.uid, "a")
    clock.now = 30.0
    assert cache.expire_assumed() == [q.uid]
    assert gpus_used(cache, "a") == 8
    cache.unreserve([p.uid, q.uid])  # the plan is released: now the room is free
    assert gpus_used(cache, "a") == 0


def test_learn_pod_does_not_overwrite_watch_knowledge() -> None:
    cache = ClusterCache()
    bound = pod(gpu=1, node="a")
    cache.upsert_pod(bound)
    seen = cache.learn_pod(replace(bound, node_name=""))
    assert seen.node_name == "a"


def test_views_are_immutable_and_shared_until_change() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("a", gpus=8))
    v1 = cache.view()
    assert cache.view() is v1
    cache.upsert_pod(pod(gpu=8, node="a"))
    v2 = cache.view()
    assert v2 is not v1
    assert v1.used_of("a").gpu == 0 and v2.used_of("a").gpu == 8000


def _annotated(p: Pod, **extra: str) -> Pod:
    return replace(p, annotations={**p.annotations, **extra})


@pytest.mark.parametrize(
    ("change", "new_view"),
    [
        (lambda p: _annotated(p, **{"example.com/heartbeat": "2"}), False),
        (lambda p: replace(p, labels={**p.labels, "team": "a"}), False),
        (lambda p: replace(p, gpu_ids=(0, 1)), False),  # the devices it holds already
        (lambda p: replace(p, gpu_ids=(4, 5)), True),
        (lambda p: replace(p, requests=p.requests + Resources(gpu=1000)), True),
        (lambda p: replace(p, phase="Succeeded"), True),
    ],
    ids=["annotation", "label", "same-devices", "other-devices", "requests", "finished"],
)
def test_only_usage_changes_of_a_running_pod_make_a_new_view(
    change: Callable[[Pod], Pod], new_view: bool
) -> None:
    """Pod events that leave node usage alone keep the node view (and the filter answers
    memoised on it); any change of usage or devices makes a new one."""
    cache = ClusterCache()
    cache.upsert_node(node("a", gpus=8))
    running = pod(gpu=2, node="a", phase="Running", annotations={GPU_IDS: "0,1"})
    cache.upsert_pod(running)
    cache.upsert_pod(pod(gpu=1))  # a pending pod arriving leaves node usage alone
    before = cache.view()
    generation = cache.generation
    cache.upsert_pod(change(running))
    assert cache.generation > generation
    assert (cache.view() is not before) is new_view


@pytest.mark.parametrize("known", [False, True])
def test_a_node_named_twice_in_one_batch_is_its_last_version(known: bool) -> None:
    """kube-scheduler never does it, a fuzzer did (``Nodes.items`` with one name twice)."""
    cache = ClusterCache()
    if known:
        cache.upsert_node(node("a", gpus=2))
    assert cache.upsert_nodes([node("a", gpus=4), node("b", gpus=1), node("a", gpus=8)])
    view = cache.view()
    assert [n.name for n in view.nodes] == ["a", "b"]
    assert view.free_of("a").gpu == 8000 and view.free_of("b").gpu == 1000


def test_node_update_and_delete() -> None:
    cache = ClusterCache()
    cache.upsert_nodes([node("a", gpus=8), node("b", gpus=4)])
    cache.upsert_pod(pod(gpu=1, node="b"))
    assert not cache.upsert_node(node("a", gpus=8))  # unchanged
    cache.upsert_node(node("a", gpus=4))
    cache.delete_node("a")
    view = cache.view()
    assert [n.name for n in view.nodes] == ["b"]
    assert view.used_of("b").gpu == 1000 and view.free_of("b").gpu == 3000
    cache.replace_nodes([node("c")])
    assert [n.name for n in cache.view().nodes] == ["c"]


def test_only_a_node_change_muster_reads_is_a_change() -> None:
    """Agents write their own annotations on nodes often; as the watch brings such a write it
    changes nothing in the cache (no generation, so no cycle), a topology annotation does."""

    def node_json(notes: dict[str, str]) -> dict[str, object]:
        return {
            "metadata": {"name": "a", "annotations": notes},
            "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "8"}},
        }

    cache = ClusterCache()
    assert cache.upsert_node(node_from_dict(node_json({"calico/ip": "10.0.0.1"})))
    generation = cache.generation
    assert not cache.upsert_node(node_from_dict(node_json({"calico/ip": "10.0.0.2"})))
    assert cache.generation == generation
    topology = {"calico/ip": "10.0.0.2", GPU_TOPOLOGY: "nvlink:0-3,4-7"}
    assert cache.upsert_node(node_from_dict(node_json(topology)))
    assert cache.generation > generation


def test_replace_pods_keeps_binds_in_flight() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("a", gpus=8))
    inflight, gone = pod(gpu=2), pod(gpu=1, node="a")
    cache.upsert_pods([inflight, gone])
    cache.assume(inflight.uid, "a")
    cache.replace_pods([])
    assert gpus_used(cache, "a") == 2


def test_a_stale_update_never_unbinds_a_bound_pod() -> None:
    """The API never clears spec.nodeName: a pending version of a pod the cache knows bound is
    older news (a LIST read before the bind, an event overtaken by the bind's confirmation)."""
    cache = ClusterCache()
    cache.upsert_node(node("a", gpus=8))
    p = pod(gpu=8)
    cache.upsert_pod(p)
    cache.assume(p.uid, "a")
    cache.confirm(p.uid, "a")  # the bind succeeded; the watch has not said so yet
    stale = replace(p, annotations={"muster.io/nudge": "1"})
    cache.upsert_pod(stale)  # a watch event from before the bind
    assert gpus_used(cache, "a") == 8
    assert cache.pod(p.uid).node_name == "a"
    assert cache.pod(p.uid).annotations == {"muster.io/nudge": "1"}  # the rest is taken
    cache.replace_pods([stale])  # a relist whose LIST was read before the bind
    assert gpus_used(cache, "a") == 8
    other = pod(gpu=1)
    cache.upsert_pod(other)
    with pytest.raises(BindRejected, match="no longer fits"):
        cache.assume(other.uid, "a")
    cache.upsert_pod(replace(stale, phase="Failed"))  # a finished pod still gives room back
    assert gpus_used(cache, "a") == 0


def test_parallel_assumes_never_overcommit() -> None:
    """Many threads race to bind 1-GPU pods onto few nodes: exactly capacity succeeds."""
    cache = ClusterCache()
    cache.upsert_nodes(node(f"n{i}", gpus=8) for i in range(4))
    pods = [pod(gpu=1) for _ in range(200)]
    cache.upsert_pods(pods)
    accepted: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def worker(chunk: list) -> None:
        barrier.wait()
        for i, p in enumerate(chunk):
            try:
                cache.assume(p.uid, f"n{i % 4}")
            except BindRejected:
                continue
            with lock:
                accepted.append(p.uid)

    threads = [threading.Thread(target=worker, args=(pods[k::8],)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(accepted) == 32
    view = cache.view()
    assert all(view.used_of(f"n{i}").gpu == 8000 for i in range(4))


def test_gang_index_follows_labels_and_deletions() -> None:
    cache = ClusterCache()
    labels = {"muster.io/pod-group": "g", "muster.io/min-member": "2"}
    a, b = pod("a", labels=labels), pod("b", labels=labels)
    cache.upsert_pods([a, b])
    assert {p.name for p in cache.gang_members_of("default/g")} == {"a", "b"}
    cache.upsert_pod(replace(b, labels={"muster.io/pod-group": "h", "muster.io/min-member": "1"}))
    assert [p.name for p in cache.gang_members_of("default/g")] == ["a"]
    assert [p.name for p in cache.gang_members_of("default/h")] == ["b"]
    cache.delete_pod(a.uid)
    assert cache.gang_members_of("default/g") == []
    assert cache.gang_member_count == 1


def test_releases_free_exact_sums_and_subsets() -> None:
    """``Releases.freed`` adds many pods' requests up exactly (values past float precision
    too), and ``only`` keeps just the chosen pods and their devices."""
    import numpy as np

    from app.core.state.releases import _row_sums

    rng = np.random.default_rng(7)
    for count in (0, 3, 600, 5000):
        rows = rng.integers(0, 40, count)
        values = rng.integers(0, 2**62, (count, 4)) // max(count, 1)
        expected = np.zeros((40, 4), np.int64)
        np.add.at(expected, rows, values)
        assert (_row_sums(rows, values, 40) == expected).all()
    from app.core.state.releases import Releases

    gone = Releases(
        np.asarray([0, 1, 0], np.intp),
        np.asarray([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]], np.int64),
        np.asarray([0, 1, 1, 0], np.intp),
        np.asarray([2, 0, 1, 3], np.intp),
        np.asarray([1000, 500, 500, 1000], np.int64),
        np.asarray([0, 1, 3, 4], np.intp),
    )
    kept = gone.only(np.asarray([True, False, True]))
    assert kept.rows.tolist() == [0, 0]
    assert kept.requests[:, 0].tolist() == [1, 9]
    assert kept.device_ids.tolist() == [2, 3]
    assert kept.device_end.tolist() == [0, 1, 2]


def test_the_cache_lock_knows_when_a_thread_waits_for_it() -> None:
    """``ClusterCache.apply`` steps aside between slices only for a waiting thread."""
    import time

    from app.core.state.waitedlock import WaitedLock

    lock = WaitedLock()
    got: list[bool] = []

    def wait_for_it() -> None:
        got.extend([lock.acquire(False), lock.acquire()])
        lock.release()

    with lock, lock:  # re-entrant
        assert not lock.contended
        other = threading.Thread(target=wait_for_it)
        other.start()
        deadline = time.monotonic() + 10
        while not lock.contended and time.monotonic() < deadline:
            time.sleep(0.001)
        assert lock.contended
    other.join(10)
    assert got == [False, True] and not lock.contended


def _random_statement(
    seed: int, uniform: bool = False
) -> tuple[list[Node], list[Pod], list[Pod], Statement]:
    """Nodes, running pods, pending pods and a statement reserving most of them, gang by
    gang: mostly on room and devices that are free in turn; some gangs fail alone in one
    way (devices already planned, no devices planned, a pod named twice, a node's CPU
    exceeded, GPUs on a node without any), some are forced; releases and holds between.

    ``uniform``: the usual run of a cycle instead — every pod of one requests (one whole GPU,
    or none) but for the one in trouble, and most gangs' members named node by node (one
    stretch per node), the others scattered."""
    rng = random.Random(seed)
    uniform_gpu = rng.choice([0, 1, 1])
    nodes = [node(f"n{i}", gpus=rng.choice([0, 4, 8]), cpu="64") for i in range(rng.randint(2, 8))]
    running = [
        pod(f"r{r}", uid=f"r{r}", gpu=0, cpu="2", node=rng.choice(nodes).name,
            phase="Running", labels={"muster.io/queue": "q"})
        for r in range(rng.randint(0, 6))
    ]  # fmt: skip
    gpus = {n.name: int(n.allocatable.gpu // 1000) for n in nodes}
    free = {name: list(range(count)) for name, count in gpus.items()}
    pending: list[Pod] = []
    ops: list[Reserve | Release | Hold] = []
    for g in range(rng.randint(1, 16)):
        placements: dict[str, str] = {}
        devices: dict[str, tuple[int, ...]] = {}
        gpu = uniform_gpu if uniform else rng.choice([0, 1, 1, 2])
        labels = {"muster.io/queue": rng.choice(["q", "r"])} if rng.random() < 0.7 else {}
        trouble = rng.choice(["taken", "missing", "twice", "full", "nowhere"] + [""] * 10)
        size = rng.randint(1, 6)
        for m in range(size):
            last = m == size - 1  # the member in trouble, if any
            cpu = "62" if last and trouble == "full" else rng.choice(["1", "4"][: 2 - uniform])
            p = pod(f"g{g}-{m}", uid=f"g{g}-{m}", gpu=gpu, cpu=cpu, labels=labels)
            pending.append(p)
            room = [n for n, left in free.items() if len(left) >= gpu]
            bare = [n for n, count in gpus.items() if not count]
            if last and trouble == "nowhere" and gpu and bare:
                where = rng.choice(bare)
            else:
                where = rng.choice(room or list(free))
            if last and trouble == "twice" and pending[:-1]:
                p = rng.choice(pending[:-1])
            placements[p.uid] = where
            if not gpu or (last and trouble == "missing"):
                continue
            taken = [d for d in range(gpus[where]) if d not in free[where]]
            if last and trouble == "taken" and len(taken) >= gpu:
                devices[p.uid] = tuple(sorted(rng.sample(taken, gpu)))
            elif len(free[where]) >= gpu:
                chosen = tuple(sorted(rng.sample(free[where], gpu)))
                free[where] = [d for d in free[where] if d not in chosen]
                devices[p.uid] = chosen
            else:
                devices[p.uid] = tuple(range(gpu))  # no such devices, or taken
        if uniform and rng.random() < 0.8:  # one stretch per node (as a cycle names them)
            placements = dict(sorted(placements.items(), key=lambda item: item[1]))
        ops.append(Reserve(f"g{g}", placements, devices, force=rng.random() < 0.05))
        if rng.random() < 0.1:
            ops.append(Release(tuple(rng.sample(list(placements), 1))))
        if rng.random() < 0.05:
            ops.append(Hold(f"g{g}", {nodes[0].name: Resources(cpu=1000)}, 10.0))
    return nodes, running, pending, Statement(ops, base=0)


def _applied_state(
    seed: int, monkeypatch: pytest.MonkeyPatch | None, uniform: bool = False
) -> tuple[object, ...]:
    nodes, running, pending, statement = _random_statement(seed, uniform)
    cache = ClusterCache()
    cache.upsert_nodes(nodes)
    cache.upsert_pods(running + pending)
    statement.base = cache.generation
    if monkeypatch is not None:
        monkeypatch.setattr(ClusterCache, "_reserve_together", lambda *args: False)
    applied = cache.apply(statement)
    snapshot = cache.snapshot()
    return (
        {i: str(s) for i, s in applied.refused.items()},
        dict(applied.devices),
        applied.clean,
        applied.generation,
        cache.view().used.tolist(),
        cache.view().gpu_free.tolist(),
        {k: v.tolist() for k, v in cache.queue_usage().items()},
        list(snapshot.placement.items()),
        sorted(snapshot.reserved),
        list(cache._devices.holders().items()),  # noqa: SLF001 - the ledger's records
    )


@pytest.mark.parametrize("seed", range(60))
def test_reservations_made_together_are_what_one_by_one_makes(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``apply`` reserving runs of plans together leaves the cache exactly as applying them
    one at a time does (usage, devices and their records, queues, placements, generations,
    what is refused and why), whether the run fits or not."""
    together = _applied_state(seed, None)
    with monkeypatch.context() as patched:
        alone = _applied_state(seed, patched)
    assert together == alone


@pytest.mark.parametrize("seed", range(80))
def test_usual_runs_made_together_are_what_one_by_one_makes(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for runs of one requests and one whole GPU (or none) per pod, which
    ``_reserve_whole_run`` reserves with whole-list steps: the cache ends exactly as one by
    one leaves it, and as the pod-by-pod ``_reserve_together`` leaves it."""
    together = _applied_state(seed, None, uniform=True)
    with monkeypatch.context() as patched:
        patched.setattr(ClusterCache, "_reserve_whole_run", lambda *args: None)
        pod_by_pod = _applied_state(seed, None, uniform=True)
    with monkeypatch.context() as patched:
        alone = _applied_state(seed, patched, uniform=True)
    assert together == alone == pod_by_pod


def test_usual_runs_are_reserved_with_whole_list_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above means something: ``_reserve_whole_run`` reserves many of those
    runs, refuses some (then applied one by one), and leaves others (scattered members, a
    pod of other requests) to the pod-by-pod check."""
    outcomes = returns_of(monkeypatch, ClusterCache, "_reserve_whole_run")
    for seed in range(80):
        _applied_state(seed, None, uniform=True)
    assert outcomes.count(True) >= 15
    assert outcomes.count(False) >= 10
    assert outcomes.count(None) >= 10


def test_runs_are_reserved_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above means something: many runs of those statements are reserved
    together, and some are refused together and then applied one by one."""
    outcomes = returns_of(monkeypatch, ClusterCache, "_reserve_together")
    for seed in range(60):
        _applied_state(seed, None)
    assert outcomes.count(True) >= 15
    assert outcomes.count(False) >= 20


def test_a_device_planned_twice_in_a_run_is_refused_for_the_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two plans in one run name the same free device of one node: the first holds it, the
    second is refused, as one by one (the run is checked together first)."""
    states = []
    for alone in (False, True):
        cache = ClusterCache()
        cache.upsert_nodes([node("n0", gpus=8), node("n1", gpus=8)])
        cache.upsert_pods([pod(f"p{i}", uid=f"p{i}", gpu=1) for i in range(4)])
        statement = Statement(
            [
                Reserve("a", {"p0": "n0", "p1": "n1"}, {"p0": (3,), "p1": (0,)}),
                Reserve("b", {"p2": "n0", "p3": "n1"}, {"p2": (3,), "p3": (1,)}),
            ],
            base=cache.generation,
        )
        with monkeypatch.context() as patched:
            if alone:
                patched.setattr(ClusterCache, "_reserve_together", lambda *args: False)
            applied = cache.apply(statement)
        assert list(applied.refused) == [1]
        assert "device 3" in str(applied.refused[1])
        held = cache.snapshot().devices
        states.append(
            (
                dict(applied.devices),
                cache.view().gpu_free.tolist(),
                sorted(cache.snapshot().reserved),
                {uid: h.devices for uid, h in held.items()},
            )
        )
    assert states[0] == states[1]
    assert states[0][0] == {}  # the first plan holds the devices it planned: nothing to say
    assert states[0][3] == {"p0": (3,), "p1": (0,)}


def test_applied_names_the_devices_the_cache_chose_and_not_those_planned() -> None:
    """``Applied.devices`` says where the cache's devices differ from the plan's: a GPU pod
    reserved without planned devices gets the default ones (named), a pod with planned ones
    holds exactly those (not named); one by one and together alike."""
    for together in (True, False):
        cache = ClusterCache()
        cache.upsert_nodes([node("n0", gpus=8)])
        cache.upsert_pods([pod(f"p{i}", uid=f"p{i}", gpu=1) for i in range(4)])
        statement = Statement(
            [
                Reserve("a", {"p0": "n0", "p1": "n0"}, {"p0": (5,), "p1": (6,)}),
                Reserve("b", {"p2": "n0", "p3": "n0"}, {}),
            ],
            base=cache.generation,
        )
        if not together:
            statement.ops.insert(1, Release(()))  # a run of one: applied one at a time
        applied = cache.apply(statement)
        assert not applied.refused
        held = {uid: h.devices for uid, h in cache.snapshot().devices.items()}
        assert held["p0"] == (5,) and held["p1"] == (6,)
        assert applied.devices == {"p2": held["p2"], "p3": held["p3"]}
        assert {*held["p2"], *held["p3"]}.isdisjoint({5, 6})
