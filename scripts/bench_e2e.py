"""End-to-end benchmark: the same GPU workloads through kube-scheduler alone and through Muster.

Runs on the e2e control plane (etcd + kube-apiserver + kube-scheduler 1.20, loopback only, see
tests/e2e/controlplane.py). One run starts one control plane, then, for each system in turn,
kube-scheduler with a profile *without* extender ("alone"), or Muster (a child ``muster serve``
process watching the API) plus kube-scheduler with Muster as its extender, using the backoff
of the shipped ``scheduler-config/`` profile. Every scenario gets its own namespace and
nodes (deleted afterwards). An event-driven fake kubelet starts a job once all its pods are
bound and completes it by deleting them after its runtime.

A third system, "null", runs the singles only: kube-scheduler with Muster's profile calling a
null extender (``bench_extender.create_null_app``: the same HTTP stack and request parsing,
filter answering the first candidate alone as Muster answers a pod on its own, so
kube-scheduler scores nothing, the Binding created as Muster creates it). It decides nothing
(so it over-commits GPUs); its rate is the floor of any extender on this machine, and its time
for as many single pods the floor of gangs, each member of which passes one filter call.

Scenarios (issue 12's targets):

* ``singles``: 400 x 1-GPU pods on 50 x 8-GPU nodes, all submitted at once: bind rate. Run
  ``--singles-trials`` times (default 3), the systems taking turns within each trial so that
  the machine's drift hits them alike; the median run of each is reported.
* ``gangs``: 50 x 8-pod gangs on the same 50 nodes (room for all), and 150 gangs (three times
  the capacity, job order): time until a capacity's worth is bound whole, against
  kube-scheduler alone binding the same number of single pods.
* ``contention``: 20 x 8-GPU nodes, sixty 8-pod gangs of 1-GPU pods, shuffled, runtime
  60 s +- 50 % (``--time-scale`` shrinks it), declared as ``muster.io/expected-runtime`` as a
  batch job's time limit would be (``--undeclared``: not): GPU capacity idle while work
  waits, freed GPUs -> next gang bound latency, makespan against the capacity bound, whole
  jobs, partial gangs, over-commit. kube-scheduler alone gets the same jobs in job order
  (shuffled, it deadlocks).
* ``preemption``: a high-priority 8-pod gang arriving at a full cluster of low-priority
  gangs: time until it is bound whole (p50 over ``--trials``), victim gangs broken.

It prints figures, not verdicts: ``python scripts/bench_e2e.py [--time-scale 0.1]``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import kubernetes.client
import yaml
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "scripts", ROOT / "tests" / "e2e"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import benchproc  # noqa: E402
from benchproc import child_server  # noqa: E402
from controlplane import (  # noqa: E402
    GPU_RESOURCE,
    ControlPlane,
    create_gpu_node,
    free_ports,
    wait_for,
)
from harness import SCHEDULER_CONFIG  # noqa: E402

GPUS_PER_NODE = 8
SHIPPED_PROFILE = ROOT / "scheduler-config" / "muster-profile.yaml"
SYSTEMS = ("alone", "null", "muster")
#: How the benchmark starts Muster (a child process, so it does not share this one's GIL).
MUSTER_COMMAND = [sys.executable, "-m", "app.cli"]
#: The null extender's server (``--serve null``).
NULL_EXTENDER = ROOT / "scripts" / "bench_extender.py"


#: (podInitialBackoffSeconds, podMaxBackoffSeconds) instead of the shipped profile's.
BACKOFF: tuple[int, int] | None = None
#: (qps, burst) of kube-scheduler's API client instead of the shipped profile's.
CLIENT: tuple[float, int] | None = None
#: Where the contention scenario writes each pod's life (``--timeline``), if anywhere.
TIMELINE: Path | None = None
#: Extra flags for ``muster serve`` (``--muster-args``).
MUSTER_ARGS: list[str] = []
#: kube-scheduler's /metrics while a system runs (read for the contention diagnostics).
SCHEDULER_METRICS = ""


def shipped_timing() -> tuple[tuple[int, int], tuple[float, int]]:
    """The shipped profile's (podInitialBackoffSeconds, podMaxBackoffSeconds) and its
    clientConnection (qps, burst) (kube-scheduler's defaults, 50 / 100, where it sets none),
    each unless ``--backoff`` / ``--client-rate`` gave others."""
    config = yaml.safe_load(SHIPPED_PROFILE.read_text())
    connection = config.get("clientConnection") or {}
    backoff = int(config["podInitialBackoffSeconds"]), int(config["podMaxBackoffSeconds"])
    client = float(connection.get("qps", 50)), int(connection.get("burst", 100))
    return BACKOFF or backoff, CLIENT or client


def scheduler_config(system: str, muster_url: str = "") -> str:
    """kube-scheduler 1.20's configuration: Muster's (the e2e one, with the shipped backoff
    and API client rate) or the same profile without extender, where kube-scheduler counts
    GPUs and preempts pods itself."""
    config = yaml.safe_load(SCHEDULER_CONFIG.replace("MUSTER_URL", muster_url or "x"))
    (initial, most), (qps, burst) = shipped_timing()
    config["podInitialBackoffSeconds"], config["podMaxBackoffSeconds"] = initial, most
    config.setdefault("clientConnection", {}).update(qps=qps, burst=burst)
    if system == "alone":
        del config["extenders"]
        config["profiles"] = [{"schedulerName": "muster"}]
    return yaml.safe_dump(config, sort_keys=False)


# ---- pods and their lives ----------------------------------------------------------------


def pod_body(
    name: str,
    ns: str,
    group: str,
    job: str = "",
    size: int = 0,
    priority_class: str = "",
    runtime: float = 0.0,
) -> dict[str, Any]:
    """A 1-GPU pod for the ``muster`` profile, confined to nodes labelled ``bench=<group>``;
    a gang member when ``size`` is set; ``runtime`` is declared as Muster's expected runtime
    (as a batch job's time limit would be)."""
    labels = {"job": job or name}
    if size:
        labels.update({"muster.io/pod-group": job, "muster.io/min-member": str(size)})
    spec: dict[str, Any] = {
        "schedulerName": "muster",
        "nodeSelector": {"bench": group},
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.9",
                "resources": {
                    "requests": {"cpu": "10m", GPU_RESOURCE: "1"},
                    "limits": {GPU_RESOURCE: "1"},
                },
            }
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels}
    if runtime:
        meta["annotations"] = {"muster.io/expected-runtime": f"{runtime:.0f}"}
    return {"metadata": meta, "spec": spec}


@dataclass(slots=True)
class PodLife:
    """What the watch saw of one pod (monotonic seconds)."""

    job: str
    bound: float | None = None
    node: str = ""
    gone: float | None = None
    evicted: bool = False
    #: When kube-scheduler first marked it unschedulable, and how many distinct
    #: ``PodScheduled=False`` messages it wrote (each a synchronous status write).
    rejected: float | None = None
    messages: int = 0
    #: When Muster first nudged it (``muster.io/planned``, or its plan record ``muster.io/plan``).
    nudged: float | None = None
    #: The last ``PodScheduled=False`` message kube-scheduler wrote (what the pod was told).
    told: str = ""


def drain(response: Any) -> None:
    """Read a raw (``_preload_content=False``) response to its end and give its connection
    back to the pool. A response left unread keeps its connection out of the pool, so the
    next call opens a new TLS connection: the harness then cost the API server a handshake
    per pod created, patched or deleted, on the same 2 cores as the systems it measures."""
    try:
        response.read()
    finally:
        response.release_conn()


class Tracker:
    """Watches one namespace's pods (raw JSON) in a thread; keeps each pod's life, the GPUs
    in use per node (and the most ever), and calls ``on_change(name, life)`` on a bind or a
    deletion."""

    def __init__(self, core: kubernetes.client.CoreV1Api, ns: str) -> None:
        self.core, self.ns = core, ns
        self.pods: dict[str, PodLife] = {}
        self.used: Counter[str] = Counter()
        self.most: Counter[str] = Counter()
        self.listeners: list[Callable[[str, PodLife, dict[str, Any]], None]] = []
        self.lock = threading.Lock()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name="bench-watch", daemon=True)
        self._version = ""

    def __enter__(self) -> Tracker:
        body = json.loads(self.core.list_namespaced_pod(self.ns, _preload_content=False).data)
        self._version = body["metadata"]["resourceVersion"]
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def by_job(self) -> dict[str, list[PodLife]]:
        """Each job's pod lives as the watch has them now (the lives are live objects)."""
        with self.lock:
            lives = list(self.pods.values())
        jobs: dict[str, list[PodLife]] = {}
        for life in lives:
            jobs.setdefault(life.job, []).append(life)
        return jobs

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                response = self.core.list_namespaced_pod(
                    self.ns,
                    watch=True,
                    resource_version=self._version,
                    timeout_seconds=2,
                    allow_watch_bookmarks=True,
                    _preload_content=False,
                    _request_timeout=(5, 10),
                )
                try:
                    for line in response:
                        for part in line.splitlines():
                            if part.strip():
                                self._apply(json.loads(part))
                finally:
                    response.release_conn()
            except Exception as exc:  # surfaced by the runner
                if not self._stop.is_set():
                    self.error = exc
                return

    def _apply(self, event: dict[str, Any]) -> None:
        obj = event["object"]
        meta = obj.get("metadata", {})
        self._version = meta.get("resourceVersion") or self._version
        if event["type"] in ("BOOKMARK", "ERROR"):
            if event["type"] == "ERROR":
                raise RuntimeError(f"watch error: {obj}")
            return
        name = meta["name"]
        now = time.monotonic()
        with self.lock:
            life = self.pods.setdefault(name, PodLife(meta.get("labels", {}).get("job", "")))
            node = obj.get("spec", {}).get("nodeName") or ""
            changed = False
            if event["type"] == "DELETED":
                if life.gone is None:
                    life.gone, changed = now, True
                    if life.node:
                        self.used[life.node] -= 1
            elif node and life.bound is None:
                life.bound, life.node, changed = now, node, True
                self.used[node] += 1
                self.most[node] = max(self.most[node], self.used[node])
            for cond in obj.get("status", {}).get("conditions") or ():
                told = cond.get("message", "")
                if cond.get("type") == "PodScheduled" and cond.get("status") == "False" and (
                    told != life.told
                ):
                    life.told, life.messages = told, life.messages + 1
                    life.rejected = now if life.rejected is None else life.rejected
            notes = meta.get("annotations") or {}
            if life.nudged is None and ("muster.io/planned" in notes or "muster.io/plan" in notes):
                life.nudged = now
            if meta.get("deletionTimestamp") and life.gone is None:
                life.evicted = True
                changed = True
        if changed:
            for listener in self.listeners:
                listener(name, life, obj)

    def bound_count(self) -> int:
        with self.lock:
            return sum(1 for p in self.pods.values() if p.bound is not None)

    def overcommit(self) -> int:
        """GPUs bound beyond a node's capacity, at the worst moment, summed over nodes."""
        with self.lock:
            return sum(max(n - GPUS_PER_NODE, 0) for n in self.most.values())


class Kubelet:
    """Event-driven fake kubelet: a job starts when all its pods are bound (they are marked
    Running), and after its runtime its pods are deleted; evicted pods are confirmed gone."""

    def __init__(
        self, core: kubernetes.client.CoreV1Api, ns: str, jobs: dict[str, tuple[int, float]]
    ) -> None:
        self.core, self.ns, self.jobs = core, ns, jobs  # job -> (size, runtime)
        self.members: dict[str, set[str]] = {j: set() for j in jobs}
        self.started: dict[str, float] = {}
        self.finished: dict[str, float] = {}
        self.error: BaseException | None = None
        self._due: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self._stop = False
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="bench-kubelet")
        self._thread = threading.Thread(target=self._run, name="bench-kubelet", daemon=True)

    def on_change(self, name: str, life: PodLife, obj: dict[str, Any]) -> None:
        """Tracker listener (runs on the watch thread: quick, no API calls here)."""
        job = life.job
        if life.evicted and life.gone is None:
            self._pool.submit(self._delete, name)
        if job not in self.jobs:
            return
        if life.gone is not None:
            self.members[job].discard(name)
            return
        if life.bound is None:
            return
        self.members[job].add(name)
        size, runtime = self.jobs[job]
        if job not in self.started and len(self.members[job]) == size:
            now = time.monotonic()
            self.started[job] = now
            for member in self.members[job]:
                self._pool.submit(self._mark_running, member)
            with self._cond:
                heapq.heappush(self._due, (now + runtime, job))
                self._cond.notify()

    def _mark_running(self, name: str) -> None:
        try:
            drain(
                self.core.patch_namespaced_pod_status(
                    name, self.ns, {"status": {"phase": "Running"}}, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status != 404:
                self.error = exc

    def _delete(self, name: str) -> None:
        try:
            drain(
                self.core.delete_namespaced_pod(
                    name, self.ns, grace_period_seconds=0, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status != 404:
                self.error = exc

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stop and (not self._due or self._due[0][0] > time.monotonic()):
                    timeout = self._due[0][0] - time.monotonic() if self._due else None
                    self._cond.wait(timeout)
                if self._stop:
                    return
                _, job = heapq.heappop(self._due)
            self.finished[job] = time.monotonic()
            for name in list(self.members[job]):
                self._pool.submit(self._delete, name)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=10)
        self._pool.shutdown(wait=True)


# ---- systems ---------------------------------------------------------------------------


@contextmanager
def muster_process(cp: ControlPlane) -> Iterator[str]:
    """``muster serve`` in cluster mode against ``cp`` (default settings, 1.20's mirror of
    unresolvable reasons); yields its URL once it has synced."""
    (port,) = free_ports(1)
    assert cp.dir is not None
    log = (cp.dir / "muster.log").open("wb")
    argv = [*MUSTER_COMMAND, "serve", "--kubeconfig", str(cp.kubeconfig),
            "--port", str(port), "--mirror-unresolvable", "--log-level", "WARNING",
            *MUSTER_ARGS]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"muster exited: {(cp.dir / 'muster.log').read_text()[-2000:]}")
            return _ready(url)

        wait_for(ready, 60, "Muster to sync")
        yield url
    finally:
        benchproc.stop(proc)
        log.close()


def _ready(url: str) -> bool:
    """Whether the extender at ``url`` answers ``/readyz`` with 200 now."""
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def _scheduler(cp: ControlPlane, config: str, system: str) -> Iterator[None]:
    """kube-scheduler with ``config`` for the duration of the block (of ``system``: its log
    goes beside ``--timeline``'s file under that name)."""
    cp.start_scheduler(config)
    try:
        yield
    finally:
        cp.stop_scheduler()
        if TIMELINE is not None:  # (kube-scheduler's own account of the attempts, --v=3)
            TIMELINE.with_name(f"{TIMELINE.stem}.{system}.kube-scheduler.log").write_text(
                cp.scheduler_log()
            )


@contextmanager
def system(cp: ControlPlane, name: str) -> Iterator[str]:
    """kube-scheduler alone, Muster + kube-scheduler with Muster as extender, or the null
    extender in Muster's place; yields the extender's URL ("" alone)."""
    if name == "alone":
        with _scheduler(cp, scheduler_config("alone"), name):
            yield ""
        return
    if name == "null":
        args = ["--serve", "null", "--kubeconfig", str(cp.kubeconfig)]
        with child_server(NULL_EXTENDER, args) as url:
            wait_for(lambda: _ready(url), 60, "the null extender")
            with _scheduler(cp, scheduler_config("muster", url + "/"), name):
                yield url
        return
    global SCHEDULER_METRICS
    with muster_process(cp) as url, _scheduler(cp, scheduler_config("muster", url + "/"), name):
        SCHEDULER_METRICS = cp.scheduler_metrics_url
        yield url


# ---- scenario plumbing ----------------------------------------------------------------


@dataclass
class Run:
    """One scenario on one system: a namespace, its nodes, a tracker; cleaned up after."""

    core: kubernetes.client.CoreV1Api
    ns: str
    nodes: list[str]
    muster: str
    tracker: Tracker
    pool: ThreadPoolExecutor
    #: When each pod's create call returned (pod name -> monotonic seconds).
    created: dict[str, float] = field(default_factory=dict)

    def create(self, bodies: Sequence[dict[str, Any]], *, in_order: bool = False) -> float:
        """Create pods concurrently (``in_order``: one by one); returns when it started."""
        started = time.monotonic()

        def one(body: dict[str, Any]) -> None:
            drain(self.core.create_namespaced_pod(self.ns, body, _preload_content=False))
            self.created[body["metadata"]["name"]] = time.monotonic()

        if in_order:
            for body in bodies:
                one(body)
            return started
        for done in self.pool.map(one, bodies):
            del done
        return started

    def wait(self, check: Callable[[], bool], timeout: float, what: str) -> float:
        """Wait for ``check`` (watch failures raise); returns when it held."""

        def ok() -> bool:
            if self.tracker.error is not None:
                raise RuntimeError(f"watch failed: {self.tracker.error}")
            return check()

        wait_for(ok, timeout, what, interval=0.02)
        return time.monotonic()


_counter = iter(range(1_000_000))


@contextmanager
def scenario(
    core: kubernetes.client.CoreV1Api, muster: str, name: str, nodes: int
) -> Iterator[Run]:
    tag = f"{name}-{next(_counter)}"
    drain(core.create_namespace({"metadata": {"name": tag}}, _preload_content=False))
    names = [f"{tag}-n{i}" for i in range(nodes)]
    with ThreadPoolExecutor(8, thread_name_prefix="bench-create") as pool:
        list(
            pool.map(
                lambda n: create_gpu_node(core, n, gpus=GPUS_PER_NODE, labels={"bench": tag}),
                names,
            )
        )
        if muster:
            wait_for(lambda: _muster_knows(muster, names), 60, "Muster to see the nodes")
        try:
            with Tracker(core, tag) as tracker:
                yield Run(core, tag, names, muster, tracker, pool)
        finally:
            drain(
                core.delete_collection_namespaced_pod(
                    tag, grace_period_seconds=0, _preload_content=False
                )
            )
            wait_for(lambda: not core.list_namespaced_pod(tag).items, 60, "pods to go")
            for n in names:
                drain(core.delete_node(n, _preload_content=False))


def _muster_knows(url: str, names: list[str]) -> bool:
    nodes = httpx.get(f"{url}/debug/nodes", timeout=10).json()["nodes"]
    return set(names) <= {n["name"] for n in nodes}


def gang_bodies(
    ns: str,
    jobs: Sequence[str],
    size: int,
    priority_class: str = "",
    runtimes: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    declared = runtimes or {}
    return [
        pod_body(f"{j}-{i}", ns, ns, j, size, priority_class, declared.get(j, 0.0))
        for j in jobs
        for i in range(size)
    ]


def whole_gangs(tracker: Tracker, jobs: Sequence[str], size: int) -> int:
    with tracker.lock:
        by_job = Counter(p.job for p in tracker.pods.values() if p.bound and p.gone is None)
    return sum(1 for j in jobs if by_job[j] == size)


def partial_gangs(tracker: Tracker, size: int, hold: float = 2.0) -> int:
    """Gangs whose first member was bound over ``hold`` s before the last (or never)."""
    with tracker.lock:
        times: dict[str, list[float]] = {}
        for p in tracker.pods.values():
            if p.bound is not None:
                times.setdefault(p.job, []).append(p.bound)
    return sum(1 for t in times.values() if len(t) < size or max(t) - min(t) > hold)


# ---- scenarios --------------------------------------------------------------------------


@dataclass
class Sizes:
    """Workload sizes (the issue's by default; the smoke test shrinks them)."""

    nodes: int = 50
    singles: int = 400
    gang_size: int = 8
    over: int = 3
    contention_nodes: int = 20
    contention_jobs: int = 60
    runtime: float = 60.0
    preempt_nodes: int = 4
    trials: int = 5
    #: whether contention jobs declare their runtime (``muster.io/expected-runtime``)
    declare: bool = True
    #: singles runs per system (the median is reported)
    singles_trials: int = 3


def run_singles(core: kubernetes.client.CoreV1Api, muster: str, s: Sizes) -> dict[str, Any]:
    with scenario(core, muster, "singles", s.nodes) as run:
        bodies = [pod_body(f"p{i}", run.ns, run.ns) for i in range(s.singles)]
        before = _diagnostics(muster)
        start = run.create(bodies)
        end = run.wait(lambda: run.tracker.bound_count() == s.singles, 300, "singles bound")
        took = end - start
        figures: dict[str, Any] = {
            "seconds": took, "rate": s.singles / took, "overcommit": run.tracker.overcommit()
        }  # fmt: skip
        if muster:
            figures["diagnostics"] = _delta(_diagnostics(muster), before)
        return figures


def median_run(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The run of median rate (the lower one of an even count), with every run's rate."""
    ranked = sorted(runs, key=lambda r: r["rate"])
    return {**ranked[(len(ranked) - 1) // 2], "rates": [r["rate"] for r in runs]}


def run_gangs(
    core: kubernetes.client.CoreV1Api, muster: str, s: Sizes, factor: int
) -> dict[str, Any]:
    """``factor`` x the cluster's worth of gangs, job order; time until a capacity's worth
    of gangs is bound whole."""
    fit = s.nodes * GPUS_PER_NODE // s.gang_size
    with scenario(core, muster, f"gangs{factor}x", s.nodes) as run:
        jobs = [f"g{k:03d}" for k in range(fit * factor)]
        bodies = gang_bodies(run.ns, jobs, s.gang_size)
        before = _diagnostics(muster)
        box: list[float] = []
        creator = threading.Thread(target=lambda: box.append(run.create(bodies)))
        begin = time.monotonic()
        creator.start()
        try:
            if muster:
                end = run.wait(lambda: whole_gangs(run.tracker, jobs, s.gang_size) >= fit, 300,
                               f"{fit} gangs bound whole")  # fmt: skip
            else:  # kube-scheduler alone fills the cluster pod by pod, whole gangs or not
                end = run.wait(lambda: run.tracker.bound_count() >= fit * s.gang_size, 300,
                               "the cluster to fill")  # fmt: skip
        finally:
            creator.join()
        start = box[0] if box else begin
        took = end - start
        figures: dict[str, Any] = {
            "seconds": took,
            "whole": whole_gangs(run.tracker, jobs, s.gang_size),
            "pods": fit * s.gang_size,
            "partial": partial_gangs(run.tracker, s.gang_size) if factor == 1 else 0,
            "overcommit": run.tracker.overcommit(),
        }
        ready = [run.created.get(b["metadata"]["name"]) for b in bodies[: fit * s.gang_size]]
        if all(t is not None for t in ready):
            figures["ready_seconds"] = max(t for t in ready if t is not None) - start
        if muster:
            figures["diagnostics"] = _delta(_diagnostics(muster), before)
        if TIMELINE is not None:
            where = TIMELINE.with_name(f"{TIMELINE.stem}.gangs{factor}x{TIMELINE.suffix}")
            where.write_text(json.dumps(_timeline(run, start), indent=0))
        return figures


def run_contention(
    core: kubernetes.client.CoreV1Api, muster: str, s: Sizes, scale: float, shuffled: bool
) -> dict[str, Any]:
    rng = random.Random(12)
    jobs = {f"j{k:02d}": (s.gang_size, s.runtime * scale * rng.uniform(0.5, 1.5))
            for k in range(s.contention_jobs)}  # fmt: skip
    capacity = s.contention_nodes * GPUS_PER_NODE
    fit = capacity // s.gang_size
    with scenario(core, muster, "contention", s.contention_nodes) as run:
        declared = {j: r for j, (_, r) in jobs.items()} if s.declare else None
        bodies = gang_bodies(run.ns, list(jobs), s.gang_size, runtimes=declared)
        if shuffled:
            rng.shuffle(bodies)
        with Kubelet(core, run.ns, jobs) as kubelet, _idle_probe(run, muster, s) as idle:
            run.tracker.listeners.append(kubelet.on_change)
            before = _diagnostics(muster)
            start = run.create(bodies, in_order=not shuffled)
            first = run.wait(lambda: len(kubelet.started) >= min(fit, len(jobs)), 600,
                             "the cluster to fill")  # fmt: skip
            at_fill = _diagnostics(muster)
            limit = 20 * s.runtime * scale + 300
            stuck = False
            try:
                end = run.wait(
                    lambda: len(kubelet.finished) == len(jobs) and _all_gone(run.tracker, jobs),
                    limit, "every job to finish",
                )  # fmt: skip
            except TimeoutError:
                # kube-scheduler alone can deadlock: partial gangs hold every GPU, so no job
                # ever starts again. Report what was done by then instead of nothing.
                end, stuck = time.monotonic(), True
            if kubelet.error is not None:
                raise RuntimeError(f"kubelet failed: {kubelet.error}")
        ready = {
            j: max(run.created.get(f"{j}-{i}", end) for i in range(n)) for j, (n, _) in jobs.items()
        }
        figures = contention_figures(run.tracker, jobs, capacity, start, end, ready)
        if muster:
            figures["diagnostics"] = {
                "fill": _delta(at_fill, before),
                "after_fill": _delta(_diagnostics(muster), at_fill),
            }
        if TIMELINE is not None:
            TIMELINE.write_text(json.dumps(_timeline(run, start), indent=0))
            if muster:
                where = TIMELINE.with_name(f"{TIMELINE.stem}.idle{TIMELINE.suffix}")
                where.write_text(json.dumps([{**i, "t": i["t"] - start} for i in idle], indent=0))
        figures.update(
            {
                "fill_seconds": first - start,
                "fill_pods": fit * s.gang_size,
                "whole": len(kubelet.started),
                "jobs": len(jobs),
                "stuck": stuck,
                "partial": partial_gangs(run.tracker, s.gang_size),
                "overcommit": run.tracker.overcommit(),
            }
        )
        return figures


@contextmanager
def _idle_probe(run: Run, muster: str, s: Sizes) -> Iterator[list[dict[str, Any]]]:
    """With ``--timeline`` and Muster: twice a second, once a gang's worth of GPUs has been
    free for 2 s while a whole gang (every member created, none bound) waits, what
    ``/explain`` says of the first such gang by name; yields the list the samples go to
    (``t`` monotonic)."""
    samples: list[dict[str, Any]] = []
    stop = threading.Event()

    def probe() -> None:
        since: float | None = None
        while not stop.wait(0.5):
            with run.tracker.lock:
                free = {n: GPUS_PER_NODE - run.tracker.used[n] for n in run.nodes}
            jobs = run.tracker.by_job()
            waiting = sorted(
                j for j, ls in jobs.items()
                if len(ls) == s.gang_size and all(x.bound is None for x in ls)
            )  # fmt: skip
            if not waiting or sum(free.values()) < s.gang_size:
                since = None
                continue
            since = since or time.monotonic()
            if time.monotonic() - since < 2:
                continue
            try:
                said = httpx.get(f"{muster}/explain/{run.ns}/gang/{waiting[0]}", timeout=5)
                told: Any = said.json()
            except (httpx.HTTPError, ValueError) as exc:
                told = repr(exc)
            samples.append({"t": time.monotonic(), "gang": waiting[0], "waiting": len(waiting),
                            "free": {n: f for n, f in sorted(free.items()) if f},
                            "explain": told})  # fmt: skip

    thread = threading.Thread(target=probe, name="bench-idle-probe", daemon=True)
    if TIMELINE is not None and muster:
        thread.start()
    try:
        yield samples
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(timeout=10)


#: (histogram, labels it must carry) summed for the diagnostics: Muster's verbs and planner
#: cycles, and kube-scheduler's scheduling attempts by result.
_SERIES: dict[str, tuple[str, dict[str, str]]] = {
    "filter": ("muster_extender_request_duration_seconds", {"verb": "filter"}),
    "prioritize": ("muster_extender_request_duration_seconds", {"verb": "prioritize"}),
    "bind": ("muster_extender_request_duration_seconds", {"verb": "bind"}),
    "preempt": ("muster_extender_request_duration_seconds", {"verb": "preempt"}),
    "cycle": ("muster_planner_cycle_duration_seconds", {}),
    "attempt_scheduled": ("scheduler_e2e_scheduling_duration_seconds", {"result": "scheduled"}),
    "attempt_unschedulable": (
        "scheduler_e2e_scheduling_duration_seconds", {"result": "unschedulable"}),
    "attempt_error": ("scheduler_e2e_scheduling_duration_seconds", {"result": "error"}),
    "preemption_eval": ("scheduler_scheduling_algorithm_preemption_evaluation_seconds", {}),
}  # fmt: skip


def _diagnostics(muster: str) -> dict[str, float]:
    """Sums and counts of ``_SERIES`` from Muster's and kube-scheduler's /metrics now
    (nothing without Muster: ``muster`` empty)."""
    if not muster:
        return {}
    text = ""
    for url in (f"{muster}/metrics", SCHEDULER_METRICS):
        with suppress(httpx.HTTPError):
            text += httpx.get(url, timeout=10).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for key, (name, labels) in _SERIES.items():
                for part in ("sum", "count"):
                    if sample.name == f"{name}_{part}" and labels.items() <= sample.labels.items():
                        out[f"{key}_{part}"] = out.get(f"{key}_{part}", 0.0) + sample.value
    return out


def _delta(now: dict[str, float], then: dict[str, float]) -> dict[str, float]:
    """Calls and mean milliseconds per series between two ``_diagnostics``."""
    out: dict[str, float] = {}
    for key in _SERIES:
        count = now.get(f"{key}_count", 0.0) - then.get(f"{key}_count", 0.0)
        total = now.get(f"{key}_sum", 0.0) - then.get(f"{key}_sum", 0.0)
        out[f"{key}_calls"] = count
        out[f"{key}_mean_ms"] = round(1000 * total / count, 2) if count else 0.0
    return out


def _timeline(run: Run, start: float) -> list[dict[str, Any]]:
    """Each pod's life, seconds from ``start`` (for ``--timeline``)."""

    def at(t: float | None) -> float | None:
        return None if t is None else round(t - start, 3)

    with run.tracker.lock:
        lives = dict(run.tracker.pods)
    return [
        {
            "pod": name,
            "job": life.job,
            "created": at(run.created.get(name)),
            "rejected": at(life.rejected),
            "messages": life.messages,
            "nudged": at(life.nudged),
            "bound": at(life.bound),
            "gone": at(life.gone),
            "node": life.node,
            "told": life.told,
        }
        for name, life in sorted(lives.items())
    ]


def _all_gone(tracker: Tracker, jobs: dict[str, tuple[int, float]]) -> bool:
    with tracker.lock:
        return all(p.gone is not None for p in tracker.pods.values() if p.job in jobs)


def contention_figures(
    tracker: Tracker,
    jobs: dict[str, tuple[int, float]],
    capacity: int,
    start: float,
    end: float,
    ready: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Idle capacity while work waits, freed -> next gang latency, makespan / bound.

    A job *runs* from its last member's bind to its first member's deletion; GPUs not held by
    running jobs are idle. Work *waits* while some job has not started. Each job frees one
    gang's worth of GPUs; while jobs wait, the k-th freeing is matched with the k-th start
    that follows the initial fill (every gang fits any freed gang's worth).

    ``ready`` (job -> when its last member was created) adds what submission order allows:
    idle capacity while a *whole* job (every member created) waits, and when the first
    capacity's worth of jobs was whole (no scheduler can start a gang before that).
    """
    by_job = tracker.by_job()
    starts, ends = {}, {}
    for job in jobs:
        lives = by_job.get(job, [])
        bound = [p.bound for p in lives if p.bound is not None]
        gone = [p.gone for p in lives if p.gone is not None]
        if len(bound) == jobs[job][0]:
            starts[job] = max(bound)
            ends[job] = min(gone) if gone else end
    changes: list[tuple[float, int, int]] = []  # (time, GPU delta, waiting delta)
    size = {j: n for j, (n, _) in jobs.items()}
    for job in jobs:
        changes.append((start, 0, 1))
        if job in starts:
            changes.append((starts[job], size[job], -1))
            changes.append((ends[job], -size[job], 0))
    changes.sort()
    order = sorted(starts.values())
    fit = capacity // max(size.values())
    filled = order[fit - 1] if len(order) >= fit else end
    idle, after_fill = _idle(changes, capacity, start, filled)
    whole: dict[str, Any] = {}
    if ready is not None:
        waits = [(ready[j], 0, 1) for j in jobs]
        waits += [(starts[j], 0, -1) for j in starts]
        runs = [(t, g, 0) for t, g, w in changes if g]
        whole_idle, _ = _idle(sorted(runs + waits), capacity, start, filled)
        whole = {
            "idle_whole_pct": 100.0 * whole_idle / (capacity * (end - start)),
            "fill_ready_seconds": sorted(ready.values())[fit - 1] - start,
        }
    makespan = end - start
    work = sum(n * r for n, r in jobs.values())
    bound = max(work / capacity, max(r for _, r in jobs.values()))
    later_starts = order[fit:]
    frees = sorted(ends.values())
    latencies = [s - f for f, s in zip(frees, later_starts, strict=False)]
    return {
        "idle_pct": 100.0 * idle / (capacity * makespan),
        "idle_after_fill_pct": 100.0 * after_fill / (capacity * max(end - filled, 1e-9)),
        "makespan": makespan,
        "bound": bound,
        "makespan_ratio": makespan / bound,
        "reuse_p50": _pct(latencies, 50),
        "reuse_p99": _pct(latencies, 99),
        "reuse_n": len(latencies),
        **whole,
    }


def _idle(
    changes: Sequence[tuple[float, int, int]], capacity: int, start: float, filled: float
) -> tuple[float, float]:
    """GPU-seconds idle while the waiting count is positive, in all and from ``filled`` on;
    ``changes``: sorted (time, GPU delta, waiting delta)."""
    idle = after_fill = 0.0
    busy = waiting = 0
    last = start
    for t, gpus, wait in changes:
        if waiting > 0:
            idle += (capacity - busy) * (t - last)
            if last >= filled:
                after_fill += (capacity - busy) * (t - last)
        busy += gpus
        waiting += wait
        last = t
    return idle, after_fill


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def run_preemption(core: kubernetes.client.CoreV1Api, muster: str, s: Sizes) -> dict[str, Any]:
    """Per trial: fill ``preempt_nodes`` with low-priority 8-pod gangs, let them run, then
    submit a high-priority 8-pod gang; time until it is bound whole."""
    times: list[float] = []
    broken = 0
    fit = s.preempt_nodes * GPUS_PER_NODE // s.gang_size
    overcommit = 0
    for trial in range(s.trials):
        with scenario(core, muster, "preempt", s.preempt_nodes) as run:
            low = [f"low{trial}x{k}" for k in range(fit)]
            jobs = {j: (s.gang_size, 3600.0) for j in [*low, f"high{trial}"]}
            with Kubelet(core, run.ns, jobs) as kubelet:
                run.tracker.listeners.append(kubelet.on_change)
                run.create(gang_bodies(run.ns, low, s.gang_size, priority_class="bench-low"))
                run.wait(lambda: len(kubelet.started) == fit, 120, "the low gangs to run")
                high = f"high{trial}"
                start = run.create(
                    gang_bodies(run.ns, [high], s.gang_size, priority_class="bench-high")
                )
                end = run.wait(
                    lambda job=high: job in kubelet.started,
                    120,
                    "the high gang to run",
                )
                times.append(end - start)
                with run.tracker.lock:
                    gone = Counter(p.job for p in run.tracker.pods.values() if p.gone or p.evicted)
                broken += sum(1 for j in low if 0 < gone[j] < s.gang_size)
            overcommit += run.tracker.overcommit()
    return {
        "p50": statistics.median(times),
        "times": times,
        "broken": broken,
        "overcommit": overcommit,
    }


def priority_classes(core: kubernetes.client.CoreV1Api) -> None:
    scheduling = kubernetes.client.SchedulingV1Api(core.api_client)
    for name, value in (("bench-low", 10), ("bench-high", 1000)):
        drain(
            scheduling.create_priority_class(
                {"metadata": {"name": name}, "value": value}, _preload_content=False
            )
        )


# ---- the run ---------------------------------------------------------------------------

SCENARIOS = ("singles", "gangs", "contention", "preemption")


@dataclass
class Results:
    """Figures per system and scenario."""

    figures: dict[str, dict[str, Any]] = field(default_factory=lambda: {s: {} for s in SYSTEMS})


def run(
    sizes: Sizes, *, time_scale: float = 1.0, only: Sequence[str] = SCENARIOS,
    systems: Sequence[str] = SYSTEMS, log: Callable[[str], None] = print,
) -> Results:  # fmt: skip
    """Run the chosen scenarios on each system on one control plane; returns the figures."""
    results = Results()
    with ControlPlane() as cp:
        api = cp.api_client()
        api.configuration.connection_pool_maxsize = 16
        core = kubernetes.client.CoreV1Api(api)
        priority_classes(core)
        if "singles" in only:
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
            for trial in range(sizes.singles_trials):
                for name in systems:
                    with system(cp, name) as url:
                        runs[name].append(run_singles(core, url if name == "muster" else "",
                                                      sizes))  # fmt: skip
                    log(f"{name} singles, trial {trial + 1}: {runs[name][-1]}")
            for name, done in runs.items():
                results.figures[name]["singles"] = median_run(done)
        rest = [s for s in only if s != "singles"]
        for name in systems:
            if name == "null" or not rest:
                continue
            with system(cp, name) as muster:
                out = results.figures[name]
                if "gangs" in only:
                    out["gangs"] = run_gangs(core, muster, sizes, 1)
                    log(f"{name} gangs with room: {out['gangs']}")
                    out["gangs_over"] = run_gangs(core, muster, sizes, sizes.over)
                    log(f"{name} gangs {sizes.over}x over: {out['gangs_over']}")
                if "contention" in only:
                    shuffled = name == "muster"
                    out["contention"] = run_contention(core, muster, sizes, time_scale, shuffled)
                    log(f"{name} contention: {out['contention']}")
                if "preemption" in only:
                    out["preemption"] = run_preemption(core, muster, sizes)
                    log(f"{name} preemption: {out['preemption']}")
        api.close()
    return results


def _rates(rates: Sequence[float]) -> str:
    return ", ".join(f"{r:.0f}" for r in rates)


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def report(results: Results, sizes: Sizes, time_scale: float) -> str:
    """The figures as a table: Muster, kube-scheduler alone, ratio, target."""
    alone, muster = results.figures["alone"], results.figures["muster"]
    rows: list[tuple[str, str, str, str, str]] = []

    def row(what: str, m: str, a: str, ratio: str, target: str) -> None:
        rows.append((what, m, a, ratio, target))

    if "singles" in muster and "singles" in alone:
        m, a = muster["singles"], alone["singles"]
        row(f"1 singles: {sizes.singles} pods bind rate (pods/s)", f"{m['rate']:.0f}",
            f"{a['rate']:.0f}", f"{100 * m['rate'] / a['rate']:.0f}%", ">= 80%")  # fmt: skip
        if len(m["rates"]) > 1:
            row(f"1   median of {len(m['rates'])} runs each; all runs",
                _rates(m["rates"]), _rates(a["rates"]), "", "")  # fmt: skip
        null = results.figures.get("null", {}).get("singles")
        if null:
            row("1   a null extender in Muster's place (its median; all runs)",
                f"{null['rate']:.0f} ({_rates(null['rates'])})", f"{a['rate']:.0f}",
                f"{100 * null['rate'] / a['rate']:.0f}%", "")  # fmt: skip
    if "gangs" in muster and "singles" in alone:
        base = alone["singles"]["seconds"] * (muster["gangs"]["pods"] / sizes.singles)
        for key, label in (("gangs", "2a gangs with room"),
                           ("gangs_over", f"2b gangs {sizes.over}x over")):  # fmt: skip
            m = muster[key]
            a = alone.get(key)
            also = f" (these gangs: {a['seconds']:.1f}, {a['whole']} whole)" if a else ""
            row(f"{label}: {m['pods']} pods bound whole (s)", f"{m['seconds']:.1f}",
                f"{base:.1f} singles{also}",
                _ratio(m["seconds"], base), "<= 1.5x")  # fmt: skip
        null = results.figures.get("null", {}).get("singles")
        if null:
            # Every member passes one filter call: no extender binds a gang's pods faster
            # than the null extender binds as many single pods.
            floor = null["seconds"] * (muster["gangs"]["pods"] / sizes.singles)
            row("2   floor of any extender: the null extender's time for as many singles",
                f"{floor:.1f}", f"{base:.1f}", _ratio(floor, base), "")  # fmt: skip
    if "contention" in muster:
        m, a = muster["contention"], alone.get("contention", {})

        def g(d: dict[str, Any], k: str, f: str) -> str:
            if k not in d:
                return "-"
            return format(d[k], f) + (" (stuck)" if d.get("stuck") else "")

        row("3 contention: GPU idle while work waits (%)", g(m, "idle_pct", ".1f"),
            g(a, "idle_pct", ".1f"), "", "<= 2%")  # fmt: skip
        row("3   the same, from the first fill on (%)", g(m, "idle_after_fill_pct", ".1f"),
            g(a, "idle_after_fill_pct", ".1f"), "", "")  # fmt: skip
        row("3   the same, while a whole job (every pod created) waits (%)",
            g(m, "idle_whole_pct", ".1f"), g(a, "idle_whole_pct", ".1f"), "", "")  # fmt: skip
        row("3 freed GPUs -> next gang bound p50 (s)", g(m, "reuse_p50", ".2f"),
            g(a, "reuse_p50", ".2f"), "", "<= 1 s")  # fmt: skip
        row("3 freed GPUs -> next gang bound p99 (s)", g(m, "reuse_p99", ".2f"),
            g(a, "reuse_p99", ".2f"), "", "<= 3 s")  # fmt: skip
        row("3 makespan / capacity bound", g(m, "makespan_ratio", ".2f"),
            g(a, "makespan_ratio", ".2f"), "", "<= 1.15")  # fmt: skip
        row("3 makespan (s)", g(m, "makespan", ".1f"), g(a, "makespan", ".1f"),
            _ratio(m["makespan"], a["makespan"]) if a else "", "")  # fmt: skip
        def whole(d: dict[str, Any]) -> str:
            return f"{d['whole']}/{d['jobs']}" + (" (stuck)" if d.get("stuck") else "")

        row("3 jobs whole", whole(m), whole(a) if a else "-", "", "all")
        row("3 partial gangs / over-commit", f"{m['partial']} / {m['overcommit']}",
            f"{a['partial']} / {a['overcommit']}" if a else "-", "", "0 / 0")  # fmt: skip
        if "singles" in alone:
            base = alone["singles"]["seconds"] * m["fill_pods"] / sizes.singles
            row(f"3 first {m['fill_pods']} pods bound whole (s)", f"{m['fill_seconds']:.1f}",
                f"{base:.1f} singles", _ratio(m["fill_seconds"], base), "<= 1.5x")  # fmt: skip
            if "fill_ready_seconds" in m:
                row(f"3   their {m['fill_pods'] // sizes.gang_size} gangs whole in the API at (s)",
                    f"{m['fill_ready_seconds']:.1f}", "", "", "")  # fmt: skip
    if "preemption" in muster:
        m, a = muster["preemption"], alone.get("preemption", {})
        row(f"4 preemption: high gang whole, p50 of {len(m['times'])} (s)", f"{m['p50']:.2f}",
            f"{a['p50']:.2f}" if a else "-", _ratio(m["p50"], a["p50"]) if a else "",
            "<= 5 s")  # fmt: skip
        row("4 victim gangs broken / over-commit", f"{m['broken']} / {m['overcommit']}",
            f"{a['broken']} / {a['overcommit']}" if a else "-", "", "0 / 0")  # fmt: skip
    head = ("target", "Muster", "kube-scheduler alone", "ratio", "goal")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    lines = [
        f"bench_e2e: kube-scheduler 1.20 on the e2e control plane; runtimes x{time_scale:g}"
        + (" (contention: Muster shuffled, alone in job order)" if rows else ""),
        "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="multiply job runtimes (60 s +- 50%%) by this (quick run: 0.1)",
    )
    parser.add_argument("--trials", type=int, default=5, help="preemption trials (default 5)")
    parser.add_argument(
        "--singles-trials", type=int, default=3, help="singles runs per system (default 3)"
    )
    parser.add_argument("--only", nargs="*", choices=SCENARIOS, default=list(SCENARIOS))
    parser.add_argument("--systems", nargs="*", choices=SYSTEMS, default=list(SYSTEMS))
    parser.add_argument(
        "--undeclared",
        action="store_true",
        help="contention jobs do not declare their runtime (muster.io/expected-runtime)",
    )
    for flag, kind, names, what in (
        ("--backoff", int, ("INITIAL", "MAX"), "pod backoff seconds"),
        ("--client-rate", float, ("QPS", "BURST"), "API client rate (clientConnection)"),
    ):
        parser.add_argument(
            flag, type=kind, nargs=2, metavar=names,
            help=f"kube-scheduler's {what} (default: the shipped profile's)",
        )  # fmt: skip
    parser.add_argument(
        "--timeline",
        type=Path,
        help="write each contention pod's life (created, rejected, nudged, bound, gone) here; "
        "the gangs scenarios beside it (NAME.gangs1x.json, NAME.gangs3x.json)",
    )
    parser.add_argument(
        "--muster-args",
        default="",
        metavar="FLAGS",
        help="extra flags for muster serve, as one string (e.g. '--bind-barrier 4')",
    )
    args = parser.parse_args(argv)  # fmt: skip
    global BACKOFF, CLIENT, TIMELINE, MUSTER_ARGS
    MUSTER_ARGS = shlex.split(args.muster_args)
    BACKOFF = tuple(args.backoff) if args.backoff else None
    CLIENT = (args.client_rate[0], int(args.client_rate[1])) if args.client_rate else None
    TIMELINE = args.timeline
    if args.singles_trials < 1:
        parser.error("--singles-trials must be at least 1")
    sizes = Sizes(trials=args.trials, declare=not args.undeclared,
                  singles_trials=args.singles_trials)  # fmt: skip
    results = run(sizes, time_scale=args.time_scale, only=args.only, systems=args.systems,
                  log=lambda text: print(text, file=sys.stderr, flush=True))  # fmt: skip
    print(report(results, sizes, args.time_scale))
    return 0


if __name__ == "__main__":
    sys.exit(main())
