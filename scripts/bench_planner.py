"""Benchmark one planner cycle in process, against the cycle's unavoidable read as baseline.

Usage::

    .venv/bin/python scripts/bench_planner.py                       # 5000 nodes, 1000 x 10
    .venv/bin/python scripts/bench_planner.py --nodes 500 --gangs 1000 --size 10

The cache holds ``--nodes`` nodes of 8 GPUs and ``--gangs`` pending gangs of ``--size``
one-GPU pods (min-member = size), in ``--queues`` queues. Measured, each ``--repeat`` times on
a fresh cache (median and best reported):

* **full**: the first cycle, which plans every gang that fits (all of them when there is
  room; a cluster smaller than the demand plans what fits and gives the rest a reason),
  also as the CPU time of the cycle's thread (what the load of a shared machine inflates
  least). Each run uses the same pod objects; **pods never seen** runs the full cycle on new
  pod objects each time (as when they all just arrived). What a cycle derives from a pod
  alone (its gang, GPU ask, queue keys, member shape: ``PodFact``) the cache derives as it
  stores the pod (``derive_ahead``, the watch path's work, once per pod version), so neither
  cycle derives it; **storing** gives what that costs, untimed in the rows above: storing
  the never-seen pods in a cache of the nodes, and of that the facts derived ahead; and
  storing the nodes, of which the topology tree a cycle reads, derived ahead as well
  (``ClusterCache(nodes_ahead=...)``, once per node set);
* **nodes after their pods**: the nodes stored in a cache that already holds the pods bound
  across them (the pod LIST ended first, at start), against an empty cache;
* **a node changed** (the watch path's, untimed in the cycle rows): a node cordoned, as the
  watch brings it, in a cache of the nodes and the pods bound across them (its tree and GPU
  records stay as they are), against a node added (a new node set: both built again), and a
  node deleted (its row goes), per node;
* **after one change**: one more cycle after one planned gang's pods are deleted (the
  steady state: a cycle after an event);
* **after one arrival**: every plan's pods bound, then one more gang arrives and a cycle runs;
  then another, and a forced cycle runs. With a cluster smaller than the demand the gangs
  that found no room wait: not forced, those that still cannot fit are carried over from the
  cycle before (``StillBlocked``); forced, every one is judged afresh (the planner loop forces
  a cycle every second);
* **baseline**: what any cycle must do before it decides anything, on the same cache: take
  the snapshot and group the pods into gangs (``cache.snapshot()`` + ``gangs_of``).

The header also gives the **machine reference**: how long this interpreter takes for a fixed
loop of 2,000,000 additions (``machine_reference``), so that figures taken on machines of
different speed can be compared (the cycle is pure Python and numpy, single-threaded).

Then **filter while cycles run**: the server's graph (``app.wiring.build_graph``) over the same
kind of cache; filter is called (one call at a time, as kube-scheduler does) for a pod on its
own (all nodes as candidates), a member of a planned gang, and a member of a gang no plan
knows yet (its first member: ``--probe-gangs`` such gangs, none of which fits; it is told it
waits for its other members, which no cycle could change), first with
nothing else running (the baseline), then while another thread runs full cycles back to back
(every plan released, then planned again). The extra latency is what a filter call waits
behind a running cycle (the cache lock, the planner lock, and the GIL: the cycle thread is
pure Python too).

``--against DIR`` compares the full cycle with another checkout's code (say a copy of main:
``git archive main | tar -x -C /tmp/base``): each side runs this benchmark's cycle part in a
fresh process of the same interpreter, alternately (``--pairs`` times, this checkout second in
each pair), and the medians and best of both are printed with their ratio (this / other).

Prints figures and the ratio against the baseline; the targets (issue 12) are a full cycle of
5 000 nodes and 10 000 pods in 1 000 gangs in at most 100 ms, and a filter call never waiting
behind a running cycle for more than 5 ms. It is not a pass/fail test.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.core.cycle.planner import Planner, gangs_of  # noqa: E402
from app.core.model.parse import node_from_dict, pod_from_dict  # noqa: E402
from app.core.model.podfacts import derive_ahead  # noqa: E402
from app.core.model.values import Node, Pod  # noqa: E402
from app.core.state.cache import ClusterCache  # noqa: E402
from app.core.state.domains import DEFAULT_KEYS, trees_ahead  # noqa: E402
from app.core.state.gateway import InMemoryGateway  # noqa: E402
from app.core.verbs.extender import Extender  # noqa: E402
from app.heap import freeze_heap  # noqa: E402
from app.server import SWITCH_INTERVAL  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.wiring import build_graph  # noqa: E402


def make_nodes(count: int) -> list[Node]:
    """``count`` 8-GPU nodes spread over blocks of 16."""
    alloc = {"cpu": "96", "memory": "1024Gi", "pods": "110", "nvidia.com/gpu": "8"}
    return [
        node_from_dict(
            {
                "metadata": {
                    "name": f"n{i}",
                    "labels": {
                        "kubernetes.io/hostname": f"n{i}",
                        "network.topology.nvidia.com/block": f"b{i // 16}",
                    },
                },
                "spec": {},
                "status": {"capacity": alloc, "allocatable": alloc},
            }
        )
        for i in range(count)
    ]


def make_gangs(gangs: int, size: int, queues: int) -> list[Pod]:
    """``gangs`` gangs of ``size`` one-GPU pods, older gangs first."""
    pods = []
    for g in range(gangs):
        labels = {"muster.io/pod-group": f"job-{g}", "muster.io/min-member": str(size)}
        if queues > 1:
            labels["muster.io/queue"] = f"q{g % queues}"
        for m in range(size):
            pods.append(
                pod_from_dict(
                    {
                        "metadata": {
                            "name": f"job-{g}-{m}",
                            "namespace": "bench",
                            "uid": f"uid-{g}-{m}",
                            "labels": labels,
                            "creationTimestamp": f"2026-01-01T{g // 3600 % 24:02d}:"
                            f"{g // 60 % 60:02d}:{g % 60:02d}Z",
                        },
                        "spec": {
                            "schedulerName": "muster",
                            "containers": [
                                {
                                    "name": "main",
                                    "resources": {
                                        "requests": {
                                            "cpu": "4",
                                            "memory": "32Gi",
                                            "nvidia.com/gpu": "1",
                                        }
                                    },
                                }
                            ],
                        },
                        "status": {"phase": "Pending"},
                    }
                )
            )
    return pods


def timed(action: Callable[[], object], cpu: list[float] | None = None) -> float:
    """Milliseconds ``action`` takes (garbage collection off meanwhile); ``cpu`` (if given)
    gets the CPU milliseconds of this thread meanwhile (less sensitive to the machine's load)."""
    gc.collect()
    gc.disable()
    try:
        start, start_cpu = time.perf_counter(), time.thread_time()
        action()
        if cpu is not None:
            cpu.append((time.thread_time() - start_cpu) * 1000)
        return (time.perf_counter() - start) * 1000
    finally:
        gc.enable()


def machine_reference(repeat: int = 3) -> float:
    """Median milliseconds of a fixed pure-Python loop (2,000,000 additions)."""
    times = []
    for _ in range(repeat):
        start, total = time.perf_counter(), 0
        for step in range(2_000_000):
            total += step
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def fresh_cache(nodes: list[Node], pods: list[Pod]) -> ClusterCache:
    """A synced cache holding ``nodes`` and ``pods``."""
    cache = ClusterCache()
    cache.upsert_nodes(nodes)
    cache.upsert_pods(pods)
    cache.mark_synced()
    return cache


def full_cycle(nodes: list[Node], pods: list[Pod]) -> float:
    """Milliseconds of the first cycle on a fresh cache of ``nodes`` and ``pods``."""
    planner = Planner(fresh_cache(nodes, pods), strategy="binpack", scheduler_name="muster")
    return timed(planner.cycle)


def storing(
    nodes: list[Node], gangs: int, size: int, queues: int
) -> tuple[float, float, float, float]:
    """(ms to store new pods of ``gangs`` x ``size`` in a cache of ``nodes``, ms of that
    spent deriving their facts ahead, on pod objects never seen before; ms to store
    ``nodes`` in an empty cache, ms of that spent deriving their topology tree ahead)."""
    times, node_times = [], []
    for ahead, trees in (
        (derive_ahead, trees_ahead(DEFAULT_KEYS)),  # its own: the last tree is not reused
        (lambda pods: None, lambda table: None),
    ):
        cache = ClusterCache(ahead=ahead, nodes_ahead=trees)
        node_times.append(timed(lambda: cache.upsert_nodes(nodes)))  # noqa: B023 - called at once
        pods = make_gangs(gangs, size, queues)
        times.append(timed(lambda: cache.upsert_pods(pods)))  # noqa: B023 - called at once
    return times[0], times[0] - times[1], node_times[0], node_times[0] - node_times[1]


def node_changes(
    nodes: list[Node], pods: list[Pod], count: int = 50
) -> tuple[float, float, float]:
    """(ms per node cordoned, per node added, per node deleted) as the watch brings each, in
    a cache of ``nodes`` and ``pods`` (bound across them) with the server's topology tree
    derived ahead: a cordon keeps the node set's rows, names and topology labels (its tree
    and devices stay as they are), a new node makes a new node set (tree and devices built
    again), a deleted node takes its row away (a new tree; the other devices stay)."""
    cache = ClusterCache(nodes_ahead=trees_ahead(DEFAULT_KEYS))
    cache.upsert_nodes(nodes)
    cache.upsert_pods(
        replace(p, node_name=nodes[i % len(nodes)].name, phase="Running")
        for i, p in enumerate(pods)
    )
    cordoned = timed(
        lambda: [cache.upsert_node(replace(n, unschedulable=True)) for n in nodes[:count]]
    )
    extra = make_nodes(len(nodes) + count)[len(nodes) :]
    added = timed(lambda: [cache.upsert_node(n) for n in extra])
    deleted = timed(lambda: [cache.delete_node(n.name) for n in nodes[-count:]])
    return cordoned / count, added / count, deleted / count


def nodes_after_pods(nodes: list[Node], pods: list[Pod]) -> tuple[float, float]:
    """(ms to store ``nodes`` in a cache already holding ``pods`` bound across them, as when
    the pod LIST ends before the node LIST; ms to store them in an empty cache)."""
    bound = [
        replace(p, node_name=nodes[i % len(nodes)].name, phase="Running")
        for i, p in enumerate(pods)
    ]
    cache = ClusterCache(nodes_ahead=lambda table: None)
    cache.upsert_pods(bound)
    after = timed(lambda: cache.upsert_nodes(nodes))
    alone = timed(lambda: ClusterCache(nodes_ahead=lambda table: None).upsert_nodes(nodes))
    return after, alone


def medians(measure: Callable[[], tuple[float, ...]], repeat: int) -> list[float]:
    """Each figure of ``measure()``'s tuple, median of ``repeat`` calls."""
    runs = [measure() for _ in range(repeat)]
    return [statistics.median(x) for x in zip(*runs, strict=True)]


def one_run(
    nodes: list[Node], pods: list[Pod]
) -> tuple[float, float, float, float, float, float, int]:
    """(full cycle ms, its CPU ms, cycle after one change ms, cycle after one arrival ms, the
    same forced ms, baseline ms, gangs planned) on a fresh cache."""
    cache = fresh_cache(nodes, pods)
    planner = Planner(cache, strategy="binpack", scheduler_name="muster")
    baseline = timed(lambda: gangs_of(cache.snapshot()))
    planned: list[str] = []
    cpu: list[float] = []
    full = timed(lambda: planned.extend(planner.cycle()), cpu)
    if planned:
        plan = planner.plan(planned[0])
        assert plan is not None
        for uid in plan.members:
            cache.delete_pod(uid)
    after = timed(lambda: planner.cycle())
    # Every plan binds; then one more gang arrives, twice: the waiting gangs (if the cluster
    # is smaller than the demand) are carried over in the first cycle, judged afresh in the
    # forced one (``StillBlocked``).
    for key in planner.cycle(force=True) + planned:
        plan = planner.plan(key)
        for uid, where in (plan.members if plan is not None else {}).items():
            pod = cache.pod(uid)
            if pod is not None and not pod.node_name:
                cache.upsert_pod(replace(pod, node_name=where, phase="Running"))
    planner.cycle()
    size = len(pods) // max(len({p.labels.get("muster.io/pod-group") for p in pods}), 1)
    arrived = []
    for n in range(2):
        gang = [replace(p, uid=f"{p.uid}-a{n}", name=f"{p.name}-a{n}",
                        labels={**p.labels, "muster.io/pod-group": f"arrival-{n}"})
                for p in pods[-size:]]  # fmt: skip
        cache.upsert_pods(gang)
        arrived.append(timed(lambda force=n == 1: planner.cycle(force=force)))
    return full, cpu[0], after, arrived[0], arrived[1], baseline, len(planned)


def solo_pod(i: int, gang: str = "") -> Pod:
    """A pending 1-GPU pod, on its own or (``gang``) the first of an 8-member gang."""
    labels = {"muster.io/pod-group": gang, "muster.io/min-member": "8"} if gang else {}
    gpus = "64" if gang else "1"  # a probe gang never fits (its members wait for the planner)
    return pod_from_dict(
        {
            "metadata": {"name": f"probe-{i}", "namespace": "probe", "uid": f"probe-{i}",
                         "labels": labels, "creationTimestamp": "2026-01-02T00:00:00Z"},
            "spec": {"schedulerName": "muster", "containers": [{"name": "main", "resources": {
                "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": gpus}}}]},
            "status": {"phase": "Pending"},
        }
    )  # fmt: skip


class TimedLock:
    """Wraps the cache's or planner's lock: adds up how long the measuring thread waits to
    acquire it (``waited``, seconds). Uncontended acquisitions cost no wait; a contended one
    counts until the thread holds the lock and the GIL again."""

    def __init__(self, inner: Any, thread: threading.Thread) -> None:
        self._inner = inner
        self._thread = thread
        self.waited = 0.0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if threading.current_thread() is not self._thread:
            return bool(self._inner.acquire(blocking, timeout))
        begin = time.perf_counter()
        got = bool(self._inner.acquire(blocking, timeout))
        self.waited += time.perf_counter() - begin
        return got

    def release(self) -> None:
        self._inner.release()

    @property
    def contended(self) -> bool:
        """The wrapped lock's ``contended`` (whether a thread waits for it)."""
        return bool(getattr(self._inner, "contended", True))

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def filter_latency(
    extender: Extender,
    names: list[str],
    planned: Pod,
    calls: int,
    start: int,
    locks: list[TimedLock],
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Milliseconds of ``calls`` filter calls of each kind (see the module docstring), and
    of each call spent waiting for the cache's and planner's locks."""
    kinds = ("pod on its own", "planned member", "unplanned gang")
    out: dict[str, list[float]] = {k: [] for k in kinds}
    waits: dict[str, list[float]] = {k: [] for k in kinds}
    for i in range(start, start + calls):
        for kind, pod, candidates in (
            ("pod on its own", solo_pod(i), names),
            ("planned member", planned, names),
            ("unplanned gang", solo_pod(i, gang=f"probe-{i}"), names),
        ):
            before = sum(lock.waited for lock in locks)
            begin = time.perf_counter()
            extender.filter(pod, candidates)
            out[kind].append((time.perf_counter() - begin) * 1000)
            waits[kind].append((sum(lock.waited for lock in locks) - before) * 1000)
    return out, waits


def filter_while_cycling(nodes: list[Node], pods: list[Pod], calls: int) -> list[str]:
    """Filter latency alone and while full cycles run in another thread (report lines)."""
    cache = fresh_cache(nodes, pods)
    graph = build_graph(Settings(strategy="binpack"), cache, InMemoryGateway(cache))
    planner, extender = graph.planner, graph.extender
    planned = planner.cycle(force=True)
    plan = planner.plan(planned[0])
    assert plan is not None
    member = cache.pod(next(iter(plan.members)))
    assert member is not None
    names = [n.name for n in nodes]
    me = threading.current_thread()
    # Measuring only: the locks are wrapped to time how long filter waits for them.
    locks = [TimedLock(cache._lock, me), TimedLock(planner.book.lock, me)]
    cache._lock, planner.book.lock = locks  # type: ignore[assignment]
    filter_latency(extender, names, member, 5, -100, locks)  # warm-up
    alone, _ = filter_latency(extender, names, member, calls, 0, locks)
    stop = threading.Event()
    cycles: list[float] = []
    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)  # as ``MusterServer.serve`` does
    freeze_heap()  # as the server does once its cache has synced

    def cycle_forever() -> None:
        while not stop.is_set():
            for gang in planned[1:]:
                planner.release(gang, "bench: plan again")
            begin = time.perf_counter()
            planner.cycle(force=True)
            cycles.append((time.perf_counter() - begin) * 1000)

    thread = threading.Thread(target=cycle_forever, name="bench-cycles", daemon=True)
    thread.start()
    try:
        while not cycles:  # the first cycle is under way once one has finished
            time.sleep(0.01)
        busy, waits = filter_latency(extender, names, member, calls, calls, locks)
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(switch)
    lines = [
        f"filter while cycles run ({len(cycles)} full cycles in the other thread, median "
        f"{statistics.median(cycles):.0f} ms; {calls} calls of each kind; load average "
        f"{os.getloadavg()[0]:.1f}; ms):",
        f"{'':18} {'alone p50':>10} {'p99':>7} {'max':>7} {'cycling p50':>12} {'p99':>7} "
        f"{'max':>7} {'lock wait p99':>14} {'max':>7}",
    ]
    for kind in alone:
        a, b, w = sorted(alone[kind]), sorted(busy[kind]), sorted(waits[kind])
        lines.append(
            f"{kind:18} {statistics.median(a):10.2f} {_p99(a):7.2f} {a[-1]:7.2f} "
            f"{statistics.median(b):12.2f} {_p99(b):7.2f} {b[-1]:7.2f} {_p99(w):14.2f} "
            f"{w[-1]:7.2f}"
        )
    lines.append(
        "lock wait: time the call waited for the cache's or planner's lock (held by the cycle "
        "thread), GIL hand-over included; target: never more than 5 ms"
    )
    return lines


def _p99(values: list[float]) -> float:
    return values[int(0.99 * (len(values) - 1))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gangs", type=int, default=1000)
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--queues", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--filter-calls", type=int, default=200, help="filter calls of each kind (0: skip)"
    )
    parser.add_argument(
        "--against",
        type=Path,
        help="another checkout (a directory holding app/ and scripts/) to compare with",
    )
    parser.add_argument("--pairs", type=int, default=3, help="alternating runs with --against")
    args = parser.parse_args(argv)
    if args.against is not None:
        return against(args)
    nodes = make_nodes(args.nodes)
    pods = make_gangs(args.gangs, args.size, args.queues)
    runs = [one_run(nodes, pods) for _ in range(args.repeat)]
    full, cpu, after, arrival, forced, base, planned = (list(x) for x in zip(*runs, strict=True))
    # The same pod objects again in each run above: after the first, what a cycle derives
    # from a pod alone (its gang, GPU ask, queue keys) is remembered from the run before.
    unseen = [
        full_cycle(nodes, make_gangs(args.gangs, args.size, args.queues))
        for _ in range(args.repeat)
    ]
    print(
        f"planner cycle: {args.nodes} nodes x 8 GPUs, {args.gangs} gangs x {args.size} pods "
        f"({len(pods)} pending), {args.queues} queue(s); {planned[0]} gangs planned; "
        f"machine reference {machine_reference():.0f} ms"
    )
    table(
        [
            ("full cycle", full),
            ("full cycle, CPU time", cpu),
            ("  pods never seen", unseen),
            ("cycle after one change", after),
            ("cycle after one arrival", arrival),
            ("  the same, forced", forced),
            ("baseline (snapshot+gangs)", base),
        ],
        base,
        width=26,
    )
    whole, ahead, node_whole, tree = medians(
        lambda: storing(nodes, args.gangs, args.size, args.queues), args.repeat
    )
    print(
        f"storing the {len(pods)} pods (never seen) in the cache: {whole:.1f} ms, of which "
        f"{ahead:.1f} ms derive their facts ahead (the watch path's, once per pod version; "
        "untimed above)"
    )
    print(
        f"storing the {len(nodes)} nodes in an empty cache: {node_whole:.1f} ms, of which "
        f"{tree:.1f} ms derive their topology tree ahead (the watch path's, once per node set; "
        "untimed above)"
    )
    cordon, add, delete = medians(lambda: node_changes(nodes, pods), args.repeat)
    print(
        f"a node changed in a cache of {len(nodes)} nodes and {len(pods)} pods bound across "
        f"them (the watch path's, untimed above): cordoned {cordon:.2f} ms, added {add:.2f} "
        f"ms, deleted {delete:.2f} ms (a cordon {cordon / add:.2f}x an addition: it keeps the "
        "tree and the devices as they are)"
    )
    after_pods, alone = medians(lambda: nodes_after_pods(nodes, pods), args.repeat)
    print(
        f"storing the {len(nodes)} nodes after the {len(pods)} pods bound across them (the "
        f"pod LIST ended first): {after_pods:.1f} ms, in an empty cache {alone:.1f} ms "
        f"({after_pods / alone:.1f}x)"
    )
    waiting = len(make_gangs(args.gangs, 1, 1)) - planned[0]
    print(
        f"after one arrival: every plan bound, {waiting + 1} gangs waiting; not forced, those "
        "that still cannot fit are carried over; forced, each is judged afresh"
    )
    if args.filter_calls > 0:
        print()
        print("\n".join(filter_while_cycling(nodes, pods, args.filter_calls)))
    return 0


#: The rows of this benchmark's table ``against`` reads: label -> (median, best) ms.
_ROW = re.compile(r"^(full cycle(?:, CPU time)?)\s+([\d.]+)\s+([\d.]+)", re.MULTILINE)


def against(args: argparse.Namespace) -> int:
    """Full cycles of ``args.against``'s code and of this checkout's, alternately in fresh
    processes; prints each pair and the medians with their ratio."""
    other = args.against.resolve()
    script = other / "scripts" / "bench_planner.py"
    if not script.is_file():
        print(f"--against {other}: no scripts/bench_planner.py there", file=sys.stderr)
        return 2
    sizes = [f"--nodes={args.nodes}", f"--gangs={args.gangs}", f"--size={args.size}",
             f"--queues={args.queues}", f"--repeat={args.repeat}", "--filter-calls=0"]  # fmt: skip
    runs: dict[str, list[dict[str, tuple[float, float]]]] = {"other": [], "this": []}
    print(
        f"full cycle, {args.nodes} nodes, {args.gangs} gangs x {args.size}: {other} (other) "
        f"against {ROOT} (this), {args.pairs} alternating pairs, median / best of "
        f"{args.repeat} fresh caches each (ms)"
    )
    print(f"{'pair':>4} {'other full':>13} {'other CPU':>13} {'this full':>13} {'this CPU':>13}")
    for pair in range(1, args.pairs + 1):
        for side, path in (("other", script), ("this", ROOT / "scripts" / "bench_planner.py")):
            done = subprocess.run(
                [sys.executable, str(path), *sizes], capture_output=True, text=True, check=True
            )
            found = {m[1]: (float(m[2]), float(m[3])) for m in _ROW.finditer(done.stdout)}
            if "full cycle" not in found:
                print(f"{side}: no 'full cycle' row in its output:\n{done.stdout}", file=sys.stderr)
                return 2
            runs[side].append(found)
        cells = [
            _pair_cell(runs[side][-1].get(row))
            for side in ("other", "this")
            for row in ("full cycle", "full cycle, CPU time")
        ]
        print(f"{pair:>4} " + " ".join(f"{c:>13}" for c in cells))
    for row in ("full cycle", "full cycle, CPU time"):
        medians = {side: [r[row][0] for r in found if row in r] for side, found in runs.items()}
        if not all(medians.values()):
            continue
        a, b = statistics.median(medians["other"]), statistics.median(medians["this"])
        print(f"{row}: median of the pairs' medians {a:.1f} (other) vs {b:.1f} (this): "
              f"ratio {b / a:.2f}; load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    return 0


def _pair_cell(found: tuple[float, float] | None) -> str:
    return "-" if found is None else f"{found[0]:.1f} / {found[1]:.1f}"


def table(rows: list[tuple[str, list[float]]], base: list[float], width: int = 24) -> None:
    """Print median and best milliseconds of each row, and the median over ``base``'s."""
    print(f"{'':{width}} {'median ms':>10} {'best ms':>10} {'x baseline':>11}")
    b = statistics.median(base)
    for label, values in rows:
        m = statistics.median(values)
        print(f"{label:{width}} {m:10.1f} {min(values):10.1f} {m / b:11.1f}")


if __name__ == "__main__":
    raise SystemExit(main())
