"""Declarative scheduling scenarios: one table row of nodes, queues and jobs -> what Muster does.

A ``Scenario`` names the cluster (``Box`` nodes with GPUs, topology labels, taints), the queue
tree (``Queue``, amounts in GPUs) and the work (``Job``: a gang, or pods on their own, either
running on given nodes or pending), and what should happen: which pending gangs get a plan and
on which nodes, which wait and why, which running work is evicted, which nodes are held for
the head of the line.

``plan`` turns a row into a cache and a planner and runs one cycle on a fixed clock;
``simulate`` plays the same row through the simulator (running jobs arrive first, pending jobs
after them) and reports which gangs start first, where, and who was evicted meanwhile. Every
construction of cache, planner and queues is here, so the tables depend only on the planner's
public API.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
import yaml

from app.core.cycle.planner import Eviction, Planner
from app.core.model import labels
from app.core.model.queues import OPEN, QueueConfig, parse_queue_config
from app.core.model.runtime import EXPECTED_RUNTIME, parse_duration
from app.core.model.values import Node, Pod, Resources
from app.core.policies.minruntime import MIN_RUNTIME
from app.core.state.cache import ClusterCache
from app.core.state.domains import DEFAULT_KEYS
from app.sim.engine import SimConfig, Simulation
from app.sim.policies import PolicyConfig, StaticQueues
from app.sim.workload import Job as SimJob
from tests.factories import EPOCH, node, pod

NAMESPACE = "default"
#: The planner's wall clock and monotonic clock in ``plan`` (seconds since the epoch).
NOW = EPOCH.timestamp() + 100_000
_SPINE, _BLOCK, _HOST = DEFAULT_KEYS[1:]
#: ``simulate``: a running job arrives ``_LEAD`` seconds earlier than its age says (so it has
#: started when the pending ones arrive); the outcome is read ``_WINDOW`` seconds after that.
_LEAD = 1.0
_WINDOW = 20.0
_SIM_RUNTIME = 10_000.0  # jobs that declare no runtime outlast the window


@dataclass(frozen=True)
class Box:
    """A node with ``gpus`` GPUs, optionally in a spine and block, optionally tainted
    (``taint``: the key of a NoSchedule taint)."""

    name: str
    gpus: int = 8
    spine: str = ""
    block: str = ""
    taint: str = ""


@dataclass(frozen=True)
class Queue:
    """A queue; amounts are GPUs (``None``: unlimited)."""

    name: str
    guaranteed: int = 0
    limit: int | None = None
    borrowing: bool = True
    lending_limit: int | None = None
    parent: str = ""
    min_runtime: str = ""


@dataclass(frozen=True)
class Job:
    """``size`` pods of ``gpu`` GPUs each: a gang (min-member ``min_member``, default all of
    them) unless ``solo``. Running when ``on`` names its nodes ("n0": every pod there, or one
    node per pod), started ``age`` seconds ago; pending otherwise, created ``age`` seconds ago.
    ``runtime`` and ``min_runtime`` are durations for ``muster.io/expected-runtime`` and
    ``muster.io/min-runtime``; ``required``/``preferred`` are topology levels."""

    name: str
    size: int
    gpu: int
    priority: int = 0
    queue: str = ""
    on: str = ""
    age: float = 0.0
    runtime: str = ""
    min_member: int | None = None
    min_runtime: str = ""
    required: str = ""
    preferred: str = ""
    tolerates: str = ""
    solo: bool = False
    priority_class: str = ""
    selector: str = ""  # "key=value": a node selector

    @property
    def running(self) -> bool:
        return bool(self.on)

    def nodes(self) -> list[str]:
        """The node of each pod of a running job."""
        where = self.on.split()
        return where * self.size if len(where) == 1 else where


@dataclass(frozen=True)
class Scenario:
    """One table row. ``placed``: pending gang -> its planned nodes, one per member, sorted
    and space-separated; ``waits``: pending gang -> part of its reason (every pending gang is in
    one of the two; a preemptor in both); ``evicted``: whole gangs by name, each elastic member
    as ``gang/elastic``, pods on their own by pod name; ``reserved``: the head of the line and
    the nodes held for it (``"big: n0 n1"``)."""

    name: str
    nodes: tuple[Box, ...]
    jobs: tuple[Job, ...]
    placed: Mapping[str, str] = field(default_factory=dict)
    waits: Mapping[str, str] = field(default_factory=dict)
    evicted: tuple[str, ...] = ()
    reserved: str = ""
    queues: tuple[Queue, ...] = ()
    min_runtime: float = 0.0
    #: PriorityClass name -> its ``minRuntime`` in the queue file.
    priority_classes: Mapping[str, str] = field(default_factory=dict)
    default_runtime: float = 3600.0
    preemption: bool = True
    #: Why the expectation is right although Muster does otherwise today (strict xfail);
    #: ``sim_bug``: why the simulator does not do what one cycle does (strict xfail there).
    bug: str = ""
    sim_bug: str = ""


@dataclass(frozen=True)
class Outcome:
    """What happened, in the terms of ``Scenario``; ``reasons`` for every gang that waits."""

    placed: dict[str, str]
    evicted: tuple[str, ...]
    reasons: dict[str, str] = field(default_factory=dict)
    reserved: str = ""


def boxes(count: int, gpus: int = 8) -> tuple[Box, ...]:
    """``count`` plain nodes ``n0``, ``n1``, ... of ``gpus`` GPUs."""
    return tuple(Box(f"n{i}", gpus) for i in range(count))


def params(rows: Iterable[Scenario], *, simulated: bool = False) -> list[Any]:
    """``rows`` for ``pytest.mark.parametrize``, named by ``Scenario.name``; a row with a
    ``bug`` (``sim_bug`` when ``simulated``) is a strict xfail."""
    out = []
    for row in rows:
        bug = row.sim_bug if simulated else row.bug
        marks = pytest.mark.xfail(strict=True, reason=bug) if bug else ()
        out.append(pytest.param(row, id=row.name, marks=marks))
    return out


def check(row: Scenario) -> None:
    """Assert that one planner cycle over ``row`` does exactly what the row expects."""
    pending = {j.name for j in row.jobs if not j.running and not j.solo}
    assert pending == set(row.placed) | set(row.waits), "every pending gang: placed or waits"
    got = plan(row)
    have = (got.placed, got.evicted, got.reserved)
    want = (dict(row.placed), tuple(sorted(row.evicted)), row.reserved)
    assert have == want, f"(placed, evicted, reserved)\n got {have}\nwant {want}\n{got.reasons}"
    for gang, why in row.waits.items():
        assert why in got.reasons.get(gang, ""), f"{gang}: {got.reasons.get(gang)!r}"


def planner_for(row: Scenario) -> Planner:
    """A cache holding ``row``'s nodes and jobs and a planner over it (clocks at ``NOW``),
    after one forced cycle."""
    cache = ClusterCache()
    cache.upsert_nodes(_node(b) for b in row.nodes)
    for job in row.jobs:
        cache.upsert_pods(_placed(job) if job.running else _pending(job))
    planner = Planner(
        cache,
        clock=lambda: NOW,
        wall=lambda: NOW,
        queues=StaticQueues(queue_config(row.queues, row.priority_classes)),
        min_runtime=row.min_runtime,
        default_runtime=row.default_runtime,
        preemption=row.preemption,
    )
    planner.cycle(force=True)
    return planner


def plan(row: Scenario) -> Outcome:
    """One forced planner cycle over ``row`` at ``NOW``: plans, evictions, reasons, holds."""
    planner = planner_for(row)
    placed = {}
    for job in row.jobs:
        found = None if job.solo else planner.plan(f"{NAMESPACE}/{job.name}")
        if found is not None:
            placed[job.name] = " ".join(sorted(found.members.values()))
    reasons = {r["gang"].split("/", 1)[1]: r["reason"] for r in planner.describe() if r["reason"]}
    reservation = planner.reservation
    reserved = ""
    if reservation is not None:
        reserved = f"{reservation.gang.split('/', 1)[1]}: {' '.join(sorted(reservation.holds))}"
    return Outcome(placed, _evicted(planner.take_evictions()), reasons, reserved)


def check_simulated(row: Scenario) -> None:
    """Assert that ``row`` played through the simulator starts exactly the gangs that one
    planner cycle places, on the same nodes, and evicts the same gangs (right or wrong: the
    tables say which)."""
    cycle, run = plan(row), simulate(row)
    have = (run.placed, run.evicted)
    want = (cycle.placed, cycle.evicted)
    assert have == want, f"(started first, evicted)\nsimulated {have}\none cycle {want}"


def simulate(row: Scenario) -> Outcome:
    """``row`` in the simulator: the pending jobs' pods all appear at one instant (stamped as
    created ``age`` seconds earlier), the running jobs' ``age`` seconds (and a little) before,
    pinned to their nodes. ``placed`` holds the pending gangs that start within ``_WINDOW``
    seconds, where they first started; ``evicted`` the jobs interrupted meanwhile."""
    sim, origin = simulation(row, _WINDOW)
    binds: list[tuple[str, str, float]] = []
    api_bind = sim.api.bind

    def bind(namespace: str, name: str, uid: str, node: str, annotations: Any = None) -> None:
        job = sim.job_of(uid)
        api_bind(namespace, name, uid, node, annotations)
        if job is not None:
            binds.append((job.name, node, sim.clock.now))

    sim.api.bind = bind  # type: ignore[method-assign]
    records = {r.name: r for r in sim.run().records}
    pending = [j.name for j in row.jobs if not j.running and not j.solo]
    placed = {}
    for name in pending:
        started = records[name].first_started
        if started is not None and started <= origin + _WINDOW:
            placed[name] = " ".join(
                sorted(n for job, n, t in binds if job == name and t <= started)
            )
    evicted = tuple(sorted(r.name for r in records.values() if r.evictions))
    return Outcome(placed, evicted)


def simulation(
    row: Scenario, window: float, *, undeclared: float = _SIM_RUNTIME
) -> tuple[Simulation, float]:
    """``row`` as a simulation, and the instant its pending jobs arrive (``origin``): the
    running jobs arrive ``age`` seconds (and a little) before, pinned to their nodes; it stops
    ``window`` seconds after ``origin``. A job that declares a runtime runs that long, others
    run ``undeclared`` seconds."""
    origin = max(j.age + _LEAD if j.running else j.age for j in row.jobs)
    jobs = [_sim_job(j, origin, undeclared) for j in row.jobs]
    config = SimConfig(
        policy_config=PolicyConfig(
            queues=queue_config(row.queues, row.priority_classes),
            min_runtime=row.min_runtime,
            preemption=row.preemption,
            default_runtime=row.default_runtime,
        ),
        max_time=origin + window,
    )
    fleet = _Fleet(tuple(_node(b) for b in row.nodes))
    sim = Simulation(fleet, jobs, config)  # type: ignore[arg-type]  # duck-typed ClusterSpec
    return sim, origin


def queue_config(
    queues: Iterable[Queue], priority_classes: Mapping[str, str] | None = None
) -> QueueConfig:
    """The queue tree of ``queues`` (plus a ``default`` queue; the open queue for none) and
    the ``minRuntime`` of ``priority_classes``."""
    given = list(queues)
    if not given and not priority_classes:
        return OPEN

    def gpus(amount: int | None) -> dict[str, int] | None:
        return None if amount is None else {"nvidia.com/gpu": amount}

    has_default = any(q.name == "default" for q in given)
    entries: list[dict[str, Any]] = [] if has_default else [{"name": "default"}]
    for q in given:
        entry = {"name": q.name, "parent": q.parent, "borrowing": q.borrowing,
                 "guaranteed": gpus(q.guaranteed), "limit": gpus(q.limit),
                 "lendingLimit": gpus(q.lending_limit),
                 "minRuntime": q.min_runtime or None}  # fmt: skip
        entries.append({k: v for k, v in entry.items() if v is not None})
    classes = {name: {"minRuntime": v} for name, v in (priority_classes or {}).items()}
    return parse_queue_config(yaml.safe_dump({"queues": entries, "priorityClasses": classes}))


# -- building blocks ----------------------------------------------------------------------


def _node(box: Box) -> Node:
    topology = {_SPINE: box.spine, _BLOCK: box.block}
    taints = [{"key": box.taint, "value": "true", "effect": "NoSchedule"}] if box.taint else []
    return node(
        box.name,
        gpus=box.gpus,
        labels={k: v for k, v in topology.items() if v},
        taints=taints,
    )


def _pods(job: Job) -> list[Pod]:
    """The job's pods, unbound, created at the epoch (callers set times and nodes)."""
    group: dict[str, str] = {}
    if not job.solo:
        group = {labels.POD_GROUP: job.name, labels.MIN_MEMBER: str(job.min_member or job.size)}
    if job.queue:
        group[labels.QUEUE] = job.queue
    asks = {
        EXPECTED_RUNTIME: job.runtime,
        MIN_RUNTIME: job.min_runtime,
        labels.TOPOLOGY_REQUIRED: job.required,
        labels.TOPOLOGY_PREFERRED: job.preferred,
    }
    tolerations = [{"key": job.tolerates, "operator": "Exists", "effect": "NoSchedule"}]
    return [
        pod(
            f"{job.name}-{i}",
            uid=f"{NAMESPACE}/{job.name}-{i}",
            namespace=NAMESPACE,
            gpu=job.gpu,
            labels=group,
            annotations={k: v for k, v in asks.items() if v},
            tolerations=tolerations if job.tolerates else None,
            node_selector=dict([job.selector.split("=", 1)]) if job.selector else None,
            priority=job.priority,
            priority_class=job.priority_class,
        )
        for i in range(job.size)
    ]


def _placed(job: Job) -> list[Pod]:
    started = NOW - job.age
    return [
        replace(p, node_name=n, phase="Running", started=started, created=started)
        for p, n in zip(_pods(job), job.nodes(), strict=True)
    ]


def _pending(job: Job) -> list[Pod]:
    return [replace(p, created=NOW - job.age) for p in _pods(job)]


def _evicted(evictions: Iterable[Eviction]) -> tuple[str, ...]:
    names = []
    for eviction in evictions:
        for unit in eviction.units:
            if unit.key.startswith("pod:"):
                names.append(unit.pods[0].name)
            else:
                gang = unit.key.split("/", 1)[1]
                names.append(f"{gang}/elastic" if unit.elastic else gang)
    return tuple(sorted(names))


def _sim_job(job: Job, origin: float, undeclared: float) -> SimJob:
    """``job`` for the simulator: a running job arrives ``age`` plus ``_LEAD`` before
    ``origin``, its pods pinned to their nodes; a pending one at ``origin``, created ``age``
    before."""
    arrival = origin - job.age - _LEAD if job.running else origin
    pods = _pods(job)
    if job.running:
        pods = [
            replace(p, node_selector={_HOST: n}) for p, n in zip(pods, job.nodes(), strict=True)
        ]
    created = float(math.floor(arrival if job.running else origin - job.age))
    pods = [replace(p, created=created) for p in pods]
    runtime = parse_duration(job.runtime) if job.runtime else None
    return SimJob(
        name=job.name,
        arrival=arrival,
        runtime=runtime or undeclared,
        deadline=math.inf,
        min_member=job.min_member or job.size,
        pods=tuple(pods),
        pod_times=(arrival,) * job.size,
        queue=job.queue,
        priority=job.priority,
    )


@dataclass(frozen=True)
class _Fleet:
    """The simulator's ``ClusterSpec`` for given nodes (it reads ``build`` and ``capacity``)."""

    nodes: tuple[Node, ...]

    def build(self) -> list[Node]:
        return list(self.nodes)

    @property
    def capacity(self) -> Resources:
        total = Resources()
        for n in self.nodes:
            total = total + n.allocatable
        return total
