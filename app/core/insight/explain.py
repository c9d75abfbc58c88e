"""Why is a job pending: its first blocker, one sentence a user can act on, and changes that
would let it start sooner, each checked on the planner's snapshot.

The blockers are checked in the order the planner meets them, and the first that holds is the
``category``:

* ``gang-incomplete``: fewer members exist than min-member;
* ``constraints``: the members disagree (``problem``), or a member's node selector, affinity or
  taints leave it no node at all;
* ``quota``: its queue (or one above) does not admit the demand now;
* ``topology``: it would fit, but not inside one domain of its ``topology-required`` level;
* ``reservation``: it would fit in room held for the gang at the head of the line;
* ``priority``: it would fit in room planned for gangs ahead of it;
* ``fragmentation``: enough is free in total, but no node or domain has the shape it needs;
* ``capacity``: not enough is free;
* ``none``: nothing blocks it (running, binding, planned, or placed by the next cycle).
"""

from __future__ import annotations

import bisect
import math
import operator
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from app.core.actions.allocate import allocate, fits_all
from app.core.actions.allocate_in_domain import TopologyAllocation, allocate_topology
from app.core.actions.backfill import Ending, EndingMemo, ending, may_backfill, reserve_for
from app.core.actions.victims import (
    LoneMemo,
    Unit,
    freed,
    lone_state,
    running_units,
    same_unit,
)
from app.core.cycle.describe import gang_state
from app.core.cycle.headofline import domains_for
from app.core.cycle.makeroom import make_room
from app.core.cycle.outlook import Outlook
from app.core.cycle.plans import Why
from app.core.gpu.ask import MILLI, GpuAsk
from app.core.insight.forward import FreedViews, Occupant, earliest
from app.core.model.categories import Category, JobState
from app.core.model.gang import Gang, gang_spec
from app.core.model.labels import TOPOLOGY_REQUIRED
from app.core.model.quantity import format_milli
from app.core.model.queues import UNLIMITED, Queue
from app.core.model.runtime import EXPECTED_RUNTIME, declared_runtime, expected_end
from app.core.model.values import RESOURCE_NAMES, Pod, Resources
from app.core.policies.proportion import admit, borrowable
from app.core.policies.registry import check_reasons, constraint_of, eligible
from app.core.state.diff import changed_pods
from app.core.state.domains import Ask, ask_of, tree_for
from app.core.state.queueusage import demand_of, queue_name
from app.core.state.releases import without
from app.core.state.view import NodeView, Snapshot
from app.core.verbs.filter import filter_nodes

#: How long a waiting member's told headline stays as it is (see ``Headlines._tell``).
STEADY_SECONDS = 60.0
#: How long a gang's headline, once worked out, is given to its other members while the gang
#: keeps its members (see ``Headlines._fresh``).
REUSE_SECONDS = 5.0
#: How long a gang found short of members is told so from its member count alone, as members
#: come, before it is explained again (see ``Headlines._counted``).
COUNTED_SECONDS = 5.0

CATEGORIES = tuple(Category)
STATES = tuple(JobState)
#: Blockers another shape of the same job may get around (see ``_shape_fixes``).
_SHAPE_HELPS = frozenset({
    Category.CAPACITY, Category.FRAGMENTATION, Category.TOPOLOGY, Category.RESERVATION,
    Category.PRIORITY,
})  # fmt: skip
#: Blockers that evicting lower-priority work can lift (see ``_priority_fix``).
_ROOM_HELPS = frozenset({Category.CAPACITY, Category.FRAGMENTATION, Category.PRIORITY})
#: How many reason groups ``nodes`` lists (most common first).
NODE_REASONS = 10
#: A priority fix searches all running units up to this many lower ones (see ``_focus``).
FOCUS_UNITS = 64
#: How many waiting gangs ahead in line the ETA plays forward (beyond the head of the line).
AHEAD = 8
#: How long the running units (and the priority fixes found with them) are kept at most while
#: the running pods stay the same: victims are ordered by work lost, which grows with time.
UNITS_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class Fix:
    """A change that lets the job start sooner, checked on the snapshot: ``change`` says what
    to do, ``effect`` what then happens; ``cost`` orders fixes (cheapest first)."""

    change: str
    effect: str
    cost: int


@dataclass(slots=True)
class Explanation:
    """The answer of ``/explain`` (see the module docstring for the categories)."""

    subject: str
    state: JobState
    category: Category = Category.NONE
    summary: str = ""
    queue: list[dict[str, Any]] = field(default_factory=list)
    gang: dict[str, Any] | None = None
    nodes: list[dict[str, Any]] = field(default_factory=list)
    gpus: dict[str, Any] = field(default_factory=dict)
    position: dict[str, Any] | None = None
    eta_seconds: float | None = None
    fixes: list[Fix] = field(default_factory=list)
    #: What the planner last said about the gang (its own words), if anything.
    planner: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The JSON body."""
        return {
            "subject": self.subject,
            "state": self.state,
            "category": self.category,
            "summary": self.summary,
            "queue": self.queue,
            "gang": self.gang,
            "nodes": self.nodes,
            "gpus": self.gpus,
            "position": self.position,
            "eta_seconds": None if self.eta_seconds is None else round(self.eta_seconds, 1),
            "fixes": [{"change": f.change, "effect": f.effect} for f in self.fixes],
            "planner": self.planner,
        }

    @property
    def headline(self) -> str:
        """``"category: summary"``: how events and conditions start."""
        return f"{self.category}: {self.summary}"


@dataclass(frozen=True, slots=True)
class Job:
    """What is explained: a gang (known, or one a what-if would submit), or a pod on its own
    (a gang of one without a plan)."""

    key: str
    subject: str
    members: tuple[Pod, ...]
    min_member: int
    bound: tuple[Pod, ...]
    pending: tuple[Pod, ...]
    gang: Gang | None

    @property
    def core(self) -> list[Pod]:
        """The pending members it needs to start (all pending ones for a pod on its own)."""
        return list(self.pending[: max(self.min_member - len(self.bound), 0)])


def explain_gang(
    outlook: Outlook, namespace: str, name: str, *, brief: bool = False
) -> Explanation:
    """Explain gang ``namespace/name`` (``brief``: state, category and summary only)."""
    key = f"{namespace}/{name}"
    gang = outlook.gangs.get(key)
    if gang is None:
        return Explanation(
            f"gang {key}", JobState.UNKNOWN, summary=f"Muster knows no pod of gang {key}"
        )
    return _explain(outlook, _gang_job(gang, f"gang {key}"), brief=brief)


def explain_pod(outlook: Outlook, namespace: str, name: str) -> Explanation:
    """Explain pod ``namespace/name`` (its gang's story when it is in one)."""
    snapshot = outlook.session.snapshot
    pod = next(
        (p for p in snapshot.pods.values() if p.namespace == namespace and p.name == name), None
    )
    subject = f"pod {namespace}/{name}"
    if pod is None:
        return Explanation(
            subject,
            JobState.UNKNOWN,
            summary=f"Muster has not seen pod {namespace}/{name} (is its schedulerName Muster's?)",
        )
    spec = gang_spec(pod)
    if spec is not None and spec.key in outlook.gangs:
        return _explain(outlook, _gang_job(outlook.gangs[spec.key], subject))
    bound = snapshot.holds_node(pod)
    job = Job(pod.key, subject, (pod,), 1, (pod,) if bound else (), () if bound else (pod,), None)
    return _explain(outlook, job)


def _gang_job(gang: Gang, subject: str) -> Job:
    return Job(
        gang.key,
        subject,
        tuple(gang.members),
        gang.min_member,
        tuple(gang.bound),
        tuple(gang.pending),
        gang,
    )


# -- the story -----------------------------------------------------------------------------


def explain_job(o: Outlook, job: Job) -> Explanation:
    """Explain ``job`` on ``o`` (a gang need not be known yet: what-if asks about new ones)."""
    return _explain(o, job)


def gang_job(gang: Gang, subject: str) -> Job:
    """``gang`` as a ``Job`` to explain."""
    return _gang_job(gang, subject)


def _explain(o: Outlook, job: Job, *, brief: bool = False) -> Explanation:
    queue = _queue_of(o, job)
    out = Explanation(job.subject, _state(o, job))
    if brief:
        if out.state == JobState.WAITING:
            _blocker(o, job, queue, view_for(o, job), out)
        else:
            out.summary = _busy_summary(o, job, out.state)
        return out
    out.queue = _queue_path(o, queue) if queue else []
    if job.gang is not None:
        out.gang = {
            "name": job.key,
            "seen": len(job.members),
            "needed": job.min_member,
            "bound": len(job.bound),
        }
        if job.gang.group is not None:
            out.gang["source"] = job.gang.group.display
        if job.gang.conflicts:
            out.gang["conflicts"] = list(job.gang.conflicts)
    view = view_for(o, job)
    out.gpus = _gpus(o, o.session.backfill_view())
    probe = job.pending[0] if job.pending else job.members[0]
    out.nodes = _node_reasons(o, view, probe)
    out.position = _position(o, job, queue)
    told = o.reasons.get(job.key) if job.gang is not None else None
    out.planner = told.text if told is not None else ""
    if out.state != JobState.WAITING:
        out.summary = _busy_summary(o, job, out.state)
        out.eta_seconds = 0.0
        return out
    _blocker(o, job, queue, view, out)
    out.eta_seconds = _eta(o, job, out.category)
    out.fixes = sorted(_fixes(o, job, queue, view, out.category), key=lambda f: f.cost)
    return out


def _state(o: Outlook, job: Job) -> JobState:
    if job.gang is None:
        pod = job.members[0]
        if pod.node_name:
            return JobState.RUNNING
        return JobState.BINDING if pod.uid in o.session.snapshot.assumed else JobState.WAITING
    return gang_state(job.gang, o.plans.get(job.key))


def _busy_summary(o: Outlook, job: Job, state: JobState) -> str:
    plan = o.plans.get(job.key)
    placement = o.session.snapshot.placement
    if state == JobState.PLANNED and plan is not None:
        left = [
            u
            for u in plan.victims
            if (p := o.session.snapshot.pods.get(u)) is not None and not p.terminal
        ]
        if left:
            told = o.reasons.get(job.key)
            return f"waiting for {len(left)} evicted pods to leave" if told is None else told.text
        return f"planned on {_spread(plan.members.values())}; kube-scheduler binds it next"
    if state == JobState.BINDING:
        return "its members are being bound together now"
    nodes = [placement.get(p.uid) or p.node_name for p in job.bound]
    return f"running on {_spread(n for n in nodes if n)}"


def incomplete_summary(members: int, min_member: int) -> str:
    """The story of a gang short of members (``Category.GANG_INCOMPLETE``)."""
    missing = min_member - members
    return (
        f"{members} of {min_member} members exist; it starts once "
        f"{missing} more {'is' if missing == 1 else 'are'} created"
    )


def _blocker(o: Outlook, job: Job, queue: str, view: NodeView, out: Explanation) -> None:
    """Set ``out.category`` and ``out.summary`` to the first blocker of a waiting job."""
    if job.gang is not None and len(job.members) < job.min_member:
        out.category = Category.GANG_INCOMPLETE
        out.summary = incomplete_summary(len(job.members), job.min_member)
        return
    if job.gang is not None and job.gang.problem:
        out.category, out.summary = Category.CONSTRAINTS, job.gang.problem
        return
    told = o.reasons.get(job.key)
    if told is not None and told.why is Why.FILTERED_OUT:
        # kube-scheduler's own filters refused its planned node: a fresh look cannot see that.
        out.category, out.summary = Category.CONSTRAINTS, told.text
        return
    core = job.core
    status = admit(o.usage, queue, demand_of(core)) if queue else None
    if status is not None and not status.ok:
        out.category, out.summary = Category.QUOTA, status.reason
        return
    for pod in core:
        if not eligible(view, pod).any():
            out.category = Category.CONSTRAINTS
            out.summary = f"no node passes {pod.name}'s constraints: {_top_reason(view, pod)}"
            return
    ask, problem = ask_of(job.members)
    if problem:
        out.category, out.summary = Category.CONSTRAINTS, problem
        return
    placed = place_job(o, view, job, ask)
    if placed.complete:
        out.category = Category.NONE
        out.summary = "it fits now; the planner places it in its next cycle"
        return
    required = placed.reason and ask is not None and ask.required
    if required and place_job(o, view, job, None).complete:
        out.category, out.summary = Category.TOPOLOGY, placed.reason
        return
    owner, holds, until = o.session.holds
    backfill = o.session.backfill_view()
    held = holds and owner != job.key and view is not backfill
    if held and place_job(o, backfill, job, ask).complete:
        due = max(until - o.now, 0.0)
        out.category = Category.RESERVATION
        out.summary = (
            f"the room it needs is held for gang {owner}, due in {due:.0f}s; "
            "only work that ends before then may use it"
        )
        return
    ahead = _planned_elsewhere(o, job)
    if ahead:
        freed = _without_planned(o, view, job, ahead)
        if place_job(o, freed, job, ask).complete:
            gangs = sorted({o.session.snapshot.gang_members.get(p.uid, p.key) for p in ahead})
            out.category = Category.PRIORITY
            out.summary = (
                f"the room it needs is planned for gangs ahead of it in line: {', '.join(gangs)}"
            )
            return
    need = demand_of(core)
    rows = eligible(view, core[0]) if core else np.ones(len(view.nodes), dtype=bool)
    free = np.maximum(view.allocatable - view.used, 0)[rows].sum(axis=0)
    if (free >= need).all():
        out.category = Category.FRAGMENTATION
        out.summary = _fragmentation(view, core, free)
    else:
        out.category = Category.CAPACITY
        k = int(np.argmax(free < need))
        name = RESOURCE_NAMES[k]
        out.summary = (
            f"needs {format_milli(name, int(need[k]))} {name}, "
            f"{format_milli(name, int(free[k]))} free on the nodes it may use"
        )


def _fragmentation(view: NodeView, core: Sequence[Pod], free: np.ndarray) -> str:
    gpu = max((p.requests.gpu for p in core), default=0)
    if gpu >= MILLI:
        whole = (view.gpu_free == MILLI).sum(axis=1)
        largest = int(whole.max(initial=0))
        total = int(free[0] // MILLI)
        return (
            f"{total} nvidia.com/gpu free in total, but no node or domain has the shape it "
            f"needs ({gpu // MILLI} whole GPUs per member; largest free on one node: {largest})"
        )
    return "enough is free in total, but no node has room for each member"


# -- parts of the answer -----------------------------------------------------------------


def _queue_of(o: Outlook, job: Job) -> str:
    names = {o.queue_names.of(p, o.config) for p in job.members} - {""}
    if job.gang is not None and not names:
        return o.config.default_queue
    return min(names) if names else ""


def _amounts(values: np.ndarray | Resources) -> dict[str, str]:
    array = np.asarray(values, np.int64)
    return {
        name: format_milli(name, int(v))
        for name, v in zip(RESOURCE_NAMES, array.tolist(), strict=True)
        if name != "pods" and v < UNLIMITED
    }


def _queue_path(o: Outlook, queue: str) -> list[dict[str, Any]]:
    if queue not in o.config.queues:
        return [{"name": queue, "error": f"queue {queue} does not exist"}]
    room = np.maximum(borrowable(o.usage), 0)
    out = []
    for q in o.config.path(queue):
        out.append(
            {
                "name": q.name,
                "usage": _amounts(o.usage.of(q.name)),
                "guaranteed": _amounts(q.guaranteed),
                "limit": _amounts(q.limit),
                "borrowing": q.borrowing,
                "mayBorrow": _amounts(room) if q.borrowing else {},
            }
        )
    return out


def view_for(o: Outlook, job: Job) -> NodeView:
    """The view the planner would place ``job`` on (held room only for its owner or backfill)."""
    owner, holds, until = o.session.holds
    if holds and (owner == job.key or may_backfill(job.core or job.pending, o.now, until)):
        return o.session.backfill_view()
    return o.session.view()


def _gpus(o: Outlook, view: NodeView) -> dict[str, Any]:
    """Free GPUs in total against the largest block of whole free GPUs on one node and in one
    domain of each topology level (``view`` without holds; what is held is said apart)."""
    whole = (view.gpu_free == MILLI).sum(axis=1)
    free = np.maximum(view.allocatable[:, 0] - view.used[:, 0], 0)
    owner, holds, _ = o.session.holds
    held = sum(r.gpu for r in holds.values())
    out: dict[str, Any] = {
        "free": format_milli("nvidia.com/gpu", int(free.sum())),
        "heldForHeadOfLine": {"gang": owner, "gpus": format_milli("nvidia.com/gpu", held)}
        if holds
        else None,
    }
    if not len(whole):
        return out | {"largestNode": None, "largestDomain": []}
    row = int(np.argmax(whole))
    out["largestNode"] = {"node": view.nodes[row].name, "wholeGpus": int(whole[row])}
    tree = tree_for(view.table, o.topology_keys)
    domains = []
    for level in range(tree.depth):
        if tree.spans_all(level) or len(tree.domains[level]) == len(view.nodes):
            continue
        sums = tree.sums(level, whole)
        best = int(np.argmax(sums))
        domains.append(
            {
                "level": tree.names[level],
                "domain": tree.domains[level][best].label(tree),
                "wholeGpus": int(sums[best]),
            }
        )
    out["largestDomain"] = domains
    return out


def _node_reasons(o: Outlook, view: NodeView, pod: Pod) -> list[dict[str, Any]]:
    """``filter_nodes`` on every node for ``pod``, as reasons grouped with counts (most
    common first). Each node's verdict reads its own row alone, so it is kept per shape of
    pod and found again for the rows that differ from the view it was found on."""
    shape = (pod.requests, GpuAsk.of(pod), constraint_of(pod))
    kept: dict[object, _Verdicts] = o.kept.lasting(("node verdicts",), dict)
    hit = kept.get(shape)
    if hit is None or hit.view.table is not view.table:
        verdicts = _Verdicts.of(view, pod, np.arange(len(view.nodes)), None)
    elif hit.view is view:
        verdicts = hit
    else:
        differ = (hit.view.used != view.used).any(axis=1)
        differ |= (hit.view.gpu_free != view.gpu_free).any(axis=1)
        changed = np.flatnonzero(differ)
        few = len(changed) <= len(view.nodes) // 4
        everything = np.arange(len(view.nodes))
        verdicts = (
            _Verdicts.of(view, pod, changed, hit)
            if few
            else _Verdicts.of(view, pod, everything, None)
        )
    if len(kept) > 64:
        kept.clear()
    kept[shape] = verdicts
    return verdicts.grouped(pod)


@dataclass(frozen=True, slots=True)
class _Verdicts:
    """``filter_nodes``' verdict on each node of ``view`` for one shape of pod: per row,
    0 fits, 1 failed, 2 unresolvable, and the reason (None where it fits)."""

    view: NodeView
    kinds: np.ndarray
    reasons: list[str | None]

    @staticmethod
    def of(view: NodeView, pod: Pod, rows: np.ndarray, last: _Verdicts | None) -> _Verdicts:
        """The verdicts on ``view``: found for ``rows``, the rest as ``last`` has them."""
        kinds = np.zeros(len(view.nodes), np.int8) if last is None else last.kinds.copy()
        reasons: list[str | None] = [None] * len(view.nodes) if last is None else list(last.reasons)
        names = [view.nodes[r].name for r in rows.tolist()]
        result = filter_nodes(view, pod, names)
        index = view.index
        for row in rows.tolist():
            kinds[row], reasons[row] = 0, None
        for kind, found in ((1, result.failed), (2, result.unresolvable)):
            for name, reason in found.items():
                kinds[index[name]], reasons[index[name]] = kind, reason
        return _Verdicts(view, kinds, reasons)

    def grouped(self, pod: Pod) -> list[dict[str, Any]]:
        """The reasons with their counts, most common first (ties in the order
        ``filter_nodes`` lists them: failed nodes short of resources, then short of whole
        devices, then unresolvable ones by constraints, then those too small, each by row)."""
        view = self.view
        fits = (view.allocatable - view.used >= np.asarray(pod.requests, np.int64)).all(axis=1)
        ok = eligible(view, pod)
        order = np.where(self.kinds == 1, np.where(fits, 1, 0), np.where(ok, 3, 2))
        listed = np.flatnonzero(self.kinds != 0)
        listed = listed[np.argsort(order[listed], kind="stable")]
        reasons = self.reasons
        counts = Counter([reasons[r] for r in listed.tolist()])
        out = [{"reason": r, "count": c} for r, c in counts.most_common(NODE_REASONS)]
        feasible = int((self.kinds == 0).sum())
        if feasible:
            out.insert(0, {"reason": "fits (for this member alone)", "count": feasible})
        return out


def _top_reason(view: NodeView, pod: Pod) -> str:
    reasons = check_reasons(view, pod, np.arange(len(view.nodes)))
    if reasons is None:
        return "no nodes"
    counts = Counter(r for r in reasons.tolist() if r is not None)
    reason, count = counts.most_common(1)[0]
    return f"{reason} ({count} of {len(view.nodes)} nodes)"


def _position(o: Outlook, job: Job, queue: str) -> dict[str, Any] | None:
    if job.gang is None or not queue:
        return None
    keys = _lines(o).get(queue, [])
    if job.key not in keys:
        return None
    return {"queue": queue, "index": keys.index(job.key) + 1, "of": len(keys)}


def _lines(o: Outlook) -> dict[str, list[str]]:
    """Per queue, the gangs that neither run nor have a plan, in the planner's order within
    a queue; kept while the cache and the plans are unchanged."""

    def make() -> dict[str, list[str]]:
        # Per gang, its queue and place in the order are read from its members alone (and
        # the queue config and the order): kept per gang while those are the same objects.
        known: dict[str, tuple[tuple[object, ...], str, Any]] = o.kept.lasting(
            ("line places",), dict
        )
        if len(known) > 2 * len(o.gangs) + 1024:
            known.clear()
        lines: dict[str, list[tuple[Any, str]]] = {}
        for g in o.gangs.values():
            if g.running or g.key in o.plans:
                continue
            inputs = (o.config, o.order, *g.members)
            hit = known.get(g.key)
            if hit is None or not _same_objects(hit[0], inputs):
                hit = known[g.key] = (inputs, _queue_of(o, _gang_job(g, "")), o.order.key(g))
            lines.setdefault(hit[1], []).append((hit[2], g.key))
        return {
            queue: [k for _, k in sorted(line, key=lambda e: e[0])] for queue, line in lines.items()
        }

    # They read the gangs (the same dict while no member changed, see ``Planner.look``), the
    # plans' keys, the queue config and the order: kept while those are the same.
    return o.kept.across(("lines", frozenset(o.plans)), make, scope=[o.gangs, o.config, o.order])


def _same_objects(a: Sequence[object], b: Sequence[object]) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


def place_job(o: Outlook, view: NodeView, job: Job, ask: Ask | None) -> TopologyAllocation:
    """Place ``job``'s core on ``view`` as the planner does (``ask``: its topology ask)."""
    placement = o.session.snapshot.placement
    pinned = sorted({placement.get(p.uid) or p.node_name for p in job.bound} - {""})
    tree = tree_for(view.table, o.topology_keys)
    return allocate_topology(view, job.core, tree=tree, ask=ask, strategy=o.strategy, pinned=pinned)


def _without_planned(o: Outlook, view: NodeView, job: Job, ahead: list[Pod]) -> NodeView:
    """``view`` without the pods ``ahead`` (``_planned_elsewhere``) hold, once per outlook:
    every waiting gang without a plan of its own frees the same pods, all planned ones, from
    one of two views."""
    key = ("without-planned", id(view), job.key if job.key in o.plans else "")
    hit = o.memo.get(key)
    if hit is not None and hit[0] is view:
        freed: NodeView = hit[1]
        return freed
    freed = without(o.session.snapshot, ahead, view)
    o.memo[key] = (view, freed)
    return freed


def _planned_elsewhere(o: Outlook, job: Job) -> list[Pod]:
    """Pods whose room plans of other gangs hold (not yet binding)."""
    snapshot = o.session.snapshot
    return [
        snapshot.pods[uid]
        for key, plan in o.plans.items()
        if key != job.key
        for uid in plan.members
        if uid in snapshot.reserved and uid in snapshot.pods
    ]


def gang_eta(o: Outlook, gang: Gang, category: Category) -> float | None:
    """Seconds until waiting ``gang``, blocked by ``category``, is expected to start (as
    ``Explanation.eta_seconds``; ``None``: unknown)."""
    return _eta(o, _gang_job(gang, f"gang {gang.key}"), category)


def _eta(o: Outlook, job: Job, category: Category) -> float | None:
    """Seconds until ``job`` is expected to start: once running work (and work planned to
    start) has run for its declared or default runtime, the room it needs is free and, for a
    job its queue does not admit yet, the queue's own work has ended. None: never, as far as
    the snapshot tells (missing members, constraints, a queue that never admits it)."""
    if category == Category.NONE:
        return 0.0
    if category in (Category.GANG_INCOMPLETE, Category.CONSTRAINTS):
        return None
    if o.head is not None and o.head.gang == job.key:
        return max(o.head.start - o.now, 0.0)
    start = _room_free_at(o, job)
    if start is not None and category == Category.QUOTA:
        admitted = _admitted_at(o, job)
        start = None if admitted is None else max(start, admitted)
    return None if start is None else max(start - o.now, 0.0)


def _room_free_at(o: Outlook, job: Job) -> float | None:
    """When the room ``job`` needs is free. Room held for the head of the line stays taken
    until the head has run there, unless ``job`` may backfill it (it would end before the head
    is due)."""
    owner, holds, until = o.session.holds
    head = o.gangs.get(owner)
    ahead = _ahead(o, job)
    ask, _ = ask_of(job.members)
    required = ask is not None and ask.required
    if ahead and not required and owner != job.key:
        if holds and head is not None:
            start = _backfill_start(o, job, until)
            if start is not None:
                return start
        return _after_line(o, job, ahead)
    if not holds or owner == job.key or head is None:
        return _free_at(o, job, view_for(o, job))
    start = _backfill_start(o, job, until)
    if start is not None:
        return start
    backfill = o.session.backfill_view()
    released = max(until, o.now) + max(declared_runtime(p) or o.default_runtime
                                       for p in head.members)  # fmt: skip
    held = _free_at(o, job, o.session.view())
    if held is not None and held < released:
        return held
    after = _free_at(o, job, backfill)
    return None if after is None else max(after, released)


def _backfill_start(o: Outlook, job: Job, until: float) -> float | None:
    """When ``job`` could start in room held for the head of the line, if it declares
    runtimes that end before the head is due then (None: it may not backfill)."""
    if not may_backfill(job.core, o.now, until):
        return None  # not even if it started now
    start = _free_at(o, job, o.session.backfill_view())
    return start if start is not None and may_backfill(job.core, start, until) else None


def _ahead(o: Outlook, job: Job) -> list[Gang]:
    """The first ``AHEAD`` gangs before ``job`` in its queue's line that may start before it:
    complete, consistent, admitted by their queue now, and not the head of the line (whose
    room is held)."""
    if job.gang is None:
        return []
    queue = _queue_of(o, job)
    line = _lines(o).get(queue, [])
    if job.key in line:
        before = line[: line.index(job.key)]
    else:  # a job not submitted yet (what-if): where the gang order puts it
        mine = o.order.key(job.gang)
        before = [k for k in line if o.order.key(o.gangs[k]) < mine]
    owner = o.session.holds[0]
    out = []
    for key in before:
        gang = o.gangs[key]
        core = gang.pending[: max(gang.min_member - len(gang.bound), 0)]
        if key == owner or gang.problem or len(gang.members) < gang.min_member or not core:
            continue
        if not admit(o.usage, queue, demand_of(core)).ok:
            continue
        out.append(gang)
        if len(out) == AHEAD:
            break
    return out


def _after_line(o: Outlook, job: Job, ahead: Sequence[Gang]) -> float | None:
    """When ``job`` fits once the head of the line and the gangs ``ahead`` of it have taken
    their room, each from its own expected start for its runtime (``forward``)."""
    view = o.session.backfill_view()
    snapshot = replace(o.session.snapshot, view=view)
    order = _ending(o, snapshot)
    owner, holds, _ = o.session.holds
    head = o.gangs.get(owner) if holds else None
    freed_views = FreedViews(view, order)
    # Where the last plays found each count (a guess that is tried first; see ``earliest``).
    hints: dict[Hashable, object] = o.kept.lasting(("line hints",), dict)

    def chain() -> tuple[float, float, list[Occupant]]:
        """The occupants, and when they were found and until when they stay right: the play
        only moves with the clock once a gang in it would start (or end), or if one fits at
        once (its room then moves with the clock), or if the ends read the clock."""
        occupants: list[Occupant] = []
        horizon = math.inf if order.timeless else o.now
        for gang in [*([head] if head is not None else []), *ahead]:
            core = gang.pending[: max(gang.min_member - len(gang.bound), 0)]
            found = earliest(view, order, core, occupants, now=o.now, strategy=o.strategy,
                             freed_views=freed_views, hints=hints)  # fmt: skip
            if found is None:
                continue
            start, allocation = found
            runtime = max(declared_runtime(p) or o.default_runtime for p in core)
            since = o.now if gang is head else start  # the head's room is held already
            occupants.append(Occupant(since, start + runtime, tuple(core), allocation))
            horizon = o.now if start <= o.now else min(horizon, start)
        return o.now, horizon, occupants

    key = ("line", owner if head is not None else "", tuple(g.key for g in ahead),
           o.default_runtime, o.strategy)  # fmt: skip
    # The replay reads the view, the running pods' order by end (kept as the same objects
    # while the pods that hold room keep their rows, ends and releases) and the members of
    # the gangs in it.
    members = [p for g in [*([head] if head is not None else []), *ahead] for p in g.members]
    scope = [view, order]
    made, horizon, occupants = o.kept.across(key, chain, scope=scope, same=members)
    if not (made == o.now or made < o.now < horizon):
        made, horizon, occupants = chain()
        o.kept.put_across(key, (made, horizon, occupants), scope=scope, same=members)

    def start() -> float | None:
        found = earliest(view, order, job.core, occupants, now=o.now, strategy=o.strategy,
                         freed_views=freed_views, hints=hints)  # fmt: skip
        return None if found is None else found[0]

    # Alike jobs behind the same line start alike (a start before ``now`` means ``now``).
    shape = tuple((p.requests, GpuAsk.of(p), constraint_of(p)) for p in job.core)
    found = o.kept.across((*key, shape), start, scope=scope, same=[*members, occupants])
    return None if found is None else max(found, o.now)


def _free_at(o: Outlook, job: Job, view: NodeView) -> float | None:
    """When ``job``'s core fits on ``view`` once pods holding or planned for room there have
    run for their runtimes (what ``view`` counts beyond pods, such as holds, stays)."""
    snapshot = replace(o.session.snapshot, view=view)
    # A required domain bounds where the room may free; no domain big enough: never.
    domains = None if job.gang is None else domains_for(job.gang, view, o.topology_keys)
    if domains == []:
        return None
    if domains is None:
        # Alike jobs free alike: kept per shape while the running pods are unchanged (a start
        # before ``now`` means ``now``, so an earlier answer stays right), unless some end
        # reads the clock (a planned pod starts "now": its end moves with the clock).
        order = _ending(o, snapshot)
        if not order.timeless:
            start = _reserved_start(o, job, snapshot)
        else:
            # It reads ``view`` (the view without holds, plus the holds in the key) and the
            # order by end: kept while those are the same objects.
            shape = tuple((p.requests, GpuAsk.of(p), constraint_of(p)) for p in job.core)
            key = ("free at", _view_key(o, view), shape, o.default_runtime, o.strategy)
            start = o.kept.across(
                key,
                lambda: _reserved_start(o, job, snapshot),
                scope=[o.session.backfill_view(), order],
            )
        return None if start is None else max(start, o.now)
    return _reserved_start(o, job, snapshot, domains)


def _reserved_start(
    o: Outlook, job: Job, snapshot: Snapshot, domains: Sequence[np.ndarray] | None = None
) -> float | None:
    masks: list[np.ndarray | None] = list(domains) if domains is not None else [None]
    starts = [
        r.start
        for mask in masks
        if (
            r := reserve_for(
                snapshot,
                job.key,
                job.core,
                now=o.now,
                default_runtime=o.default_runtime,
                strategy=o.strategy,
                within=mask,
                planned_start_now=True,
                order=None if mask is not None else _ending(o, snapshot),
            )
        )
        is not None
    ]
    return min(starts, default=None)


def _view_key(o: Outlook, view: NodeView) -> object:
    """What tells the session's two views apart in memo keys: the holds it counts, if any."""
    if view is o.session.backfill_view():
        return "backfill"
    owner, holds, until = o.session.holds
    return (owner, until, tuple(sorted(holds.items())))


def _ending(o: Outlook, snapshot: Snapshot) -> Ending:
    """``ending`` of the pods on ``snapshot.view`` (the session's view with or without the
    holds), kept while the cache is unchanged."""
    key = ("ending", _view_key(o, snapshot.view))

    def make() -> Ending:
        memo = o.kept.lasting(("ending entries",), EndingMemo)
        return ending(snapshot, now=o.now, default_runtime=o.default_runtime,
                      planned_start_now=True, memo=memo)  # fmt: skip

    found = o.kept.steady(o.session.snapshot, key, make)
    if found.timeless:
        return found
    # Made once per outlook (its now) when some end reads the clock.
    hit = o.memo.get(key)
    if hit is None:
        hit = o.memo[key] = make()
    return cast(Ending, hit)


def _admitted_at(o: Outlook, job: Job) -> float | None:
    """When ``job``'s queue admits it, once pods counted against queues (holding a node,
    binding or planned) have run for their runtimes; None: not even with all of them gone."""
    queue = _queue_of(o, job)
    demand = demand_of(job.core)
    snapshot = o.session.snapshot
    releases = []
    for uid, pod in snapshot.pods.items():
        if pod.terminal or not (snapshot.holds_node(pod) or uid in snapshot.reserved):
            continue
        name = queue_name(pod, o.config, o.scheduler_name)
        if name is None or name not in o.config.queues:
            continue
        started = pod.started or snapshot.bound_at.get(uid, o.now)
        releases.append((expected_end(pod, started, o.default_runtime), name, pod.requests))
    releases.sort(key=lambda r: r[0])
    # Usage after the first k releases, per leaf queue, as running sums (admit is monotone in
    # what is released, so the first k that admits is found by bisection).
    amounts = np.asarray([r[2] for r in releases], np.int64).reshape(-1, len(RESOURCE_NAMES))
    leaves = np.asarray([r[1] for r in releases], dtype=object)
    sums = {q: np.cumsum(amounts * (leaves == q)[:, None], axis=0) for q in set(leaves.tolist())}

    def admitted(k: int) -> bool:
        if not k:
            return admit(o.usage, queue, demand).ok
        used = {name: amount.copy() for name, amount in o.usage.used.items()}
        usage = replace(o.usage, used=used)
        for q, running in sums.items():
            usage.add(q, -running[k - 1])
        return admit(usage, queue, demand).ok

    if not admitted(len(releases)):
        return None
    low = bisect.bisect_left(range(len(releases)), True, key=admitted)
    return max(o.now, releases[low - 1][0]) if low else o.now


# -- fixes ----------------------------------------------------------------------------------


def _fixes(o: Outlook, job: Job, queue: str, view: NodeView, category: Category) -> list[Fix]:
    fixes: list[Fix] = []
    core = job.core
    if category == Category.GANG_INCOMPLETE and job.gang is not None:
        fixes.extend(_fewer_members(o, view, job))
    if category == Category.QUOTA and queue in o.config.queues:
        fixes.extend(_quota_fixes(o, queue, demand_of(core)))
    if category == Category.CONSTRAINTS and core:
        fixes.extend(_constraint_fixes(view, core))
    if category == Category.RESERVATION:
        fixes.extend(_backfill_fix(o, job))
    if category == Category.TOPOLOGY:
        ask, _ = ask_of(job.members)
        level = ask.level if ask is not None else ""
        fixes.append(
            Fix(
                f"drop {TOPOLOGY_REQUIRED}: {level} (or use muster.io/topology-preferred)",
                "it fits now across domains",
                3,
            )
        )
    if category in (
        Category.CAPACITY,
        Category.FRAGMENTATION,
        Category.TOPOLOGY,
        Category.RESERVATION,
        Category.PRIORITY,
    ):
        fixes.extend(_shape_fixes(o, view, job))
    if (
        category in (Category.CAPACITY, Category.FRAGMENTATION, Category.PRIORITY)
        and o.preemption
        and core
    ):
        fixes.extend(_priority_fix(o, job, queue))
    if category == Category.PRIORITY:
        fixes.extend(_order_fix(o, job, queue))
    return fixes


def _order_fix(o: Outlook, job: Job, queue: str) -> list[Fix]:
    """Gangs ahead in its own queue are ordered by priority first: above theirs, it goes first
    (the category check showed it fits once their plans are gone)."""
    snapshot = o.session.snapshot
    ahead = {snapshot.gang_members.get(p.uid, "") for p in _planned_elsewhere(o, job)}
    gangs = [o.gangs[k] for k in sorted(ahead) if k in o.gangs]
    if not gangs or any(_queue_of(o, _gang_job(g, "")) != queue for g in gangs):
        return []
    above = max(g.priority for g in gangs) + 1
    names = ", ".join(g.key for g in gangs)
    return [Fix(f"priority ≥ {above}", f"it would be planned before {names}", 6)]


def _fewer_members(o: Outlook, view: NodeView, job: Job) -> list[Fix]:
    have = len(job.members)
    if not have:
        return []
    trial = replace(job, min_member=have)
    if not place_job(o, view, trial, None).complete:
        return []
    return [Fix(f"set muster.io/min-member to {have}", f"the {have} members that exist fit now", 2)]


def _quota_fixes(o: Outlook, queue: str, demand: np.ndarray) -> list[Fix]:
    fixes: list[Fix] = []
    leaf = o.config.queues[queue]
    if not leaf.borrowing:
        config = replace(o.config, queues={**o.config.queues, queue: replace(leaf, borrowing=True)})
        if admit(replace(o.usage, config=config), queue, demand).ok:
            over = np.maximum(o.usage.of(queue) + demand - np.asarray(leaf.guaranteed), 0)
            fixes.append(
                Fix(
                    f"turn borrowing on for queue {queue}",
                    f"queue {queue} could borrow {_gpus_text(over)} and start it now",
                    4,
                )
            )
    for q in o.config.path(queue):
        held = o.usage.of(q.name) + demand
        limit = np.asarray(q.limit, np.int64)
        short = (limit < UNLIMITED) & (held > limit)
        if not short.any():
            continue
        raised = _with_limit(q, np.where(short, held, limit))
        config = replace(o.config, queues={**o.config.queues, q.name: raised})
        if admit(replace(o.usage, config=config), queue, demand).ok:
            k = int(np.argmax(short))
            name = RESOURCE_NAMES[k]
            fixes.append(
                Fix(
                    f"raise queue {q.name}'s {name} limit to {format_milli(name, int(held[k]))}",
                    "the queue then admits it",
                    5,
                )
            )
    return fixes


def _with_limit(queue: Queue, limit: np.ndarray) -> Queue:
    return replace(queue, limit=Resources(*(int(v) for v in limit.tolist())))


def _constraint_fixes(view: NodeView, core: Sequence[Pod]) -> list[Fix]:
    pod = next((p for p in core if not eligible(view, p).any()), None)
    if pod is None:
        return []
    trials = [
        ("drop its nodeSelector", replace(pod, node_selector={})),
        ("drop its required node affinity", replace(pod, required_affinity=None)),
        ("drop both its nodeSelector and required node affinity",
         replace(pod, node_selector={}, required_affinity=None)),
    ]  # fmt: skip
    for change, trial in trials:
        count = int(eligible(view, trial).sum())
        if count and trial != pod:
            return [Fix(f"{change} ({pod.name})", f"{count} nodes would pass", 3)]
    return []


def _backfill_fix(o: Outlook, job: Job) -> list[Fix]:
    _, holds, until = o.session.holds
    window = int(until - o.now)
    if window <= 0:
        return []
    declared = [
        replace(p, annotations={**p.annotations, EXPECTED_RUNTIME: str(window)}) for p in job.core
    ]
    if not may_backfill(declared, o.now, until):
        return []
    return [
        Fix(
            f"declare {EXPECTED_RUNTIME}: {window} or less",
            "it may then use the held room now, as it ends before the head of the line starts",
            1,
        )
    ]


def _shape_fixes(o: Outlook, view: NodeView, job: Job) -> list[Fix]:
    core = job.core
    if not core or job.bound or len({p.requests for p in core}) != 1:
        return []
    each = core[0].requests.gpu
    if each < MILLI or each % MILLI:
        return []
    total = each * len(core)
    for per in (MILLI * g for g in (8, 4, 2, 1)):  # the fewest, largest members first
        if per == each or total % per:
            continue
        count = total // per
        scale = per / each
        asks = [
            replace(
                core[0],
                uid=f"{core[0].uid}/whatif-{i}",
                requests=core[0].requests._replace(
                    gpu=per,
                    cpu=int(core[0].requests.cpu * scale),
                    memory=int(core[0].requests.memory * scale),
                ),
            )
            for i in range(count)
        ]
        if fits_all(view, asks, o.strategy):
            now, was = f"{count} × {per // MILLI} GPU", f"{len(core)} × {each // MILLI}"
            return [
                Fix(f"ask for {now} instead of {was}", f"{now} fits now where {was} does not", 2)
            ]
    return []


def _priority_fix(o: Outlook, job: Job, queue: str) -> list[Fix]:
    """The lowest priority (of six tried) that would evict some running units for ``job``;
    kept per shape of job while the node view, the running units and queue usage are the
    same."""
    units = _units(o)
    shape = tuple((p.requests, constraint_of(p), p.priority) for p in job.core)
    # It reads the running units (found at ``since``; ``token`` stays while they are alike),
    # the view without holds (the same object while no pod moved, came, went or changed its
    # requests or devices: so where each unit's pods sit is the same too), queue usage and
    # the queue config.
    used = tuple(sorted((k, v.tobytes()) for k, v in o.usage.used.items()))
    key = ("priority fix", units.since, id(o.config), queue, shape, used, o.strategy)
    return o.kept.across(
        key,
        lambda: _find_priority_fix(o, job, queue, units),
        scope=[units.token, o.session.backfill_view(), o.config],
    )


@dataclass(frozen=True, slots=True)
class _Units:
    """The running units found on ``snapshot`` at ``since`` (``running_units``), kept until
    ``young`` (the first protected one comes of age) or ``UNITS_SECONDS``: the units of
    gangs, and per pod running on its own, its unit. ``token`` is the same object while later
    snapshots' units stay alike (``same_unit``)."""

    snapshot: Snapshot
    key: tuple[object, ...]
    config: object
    protection: object
    since: float
    young: float
    gangs: list[Unit]
    lone: dict[str, Unit]
    token: object
    units: list[Unit] = field(default_factory=list)
    #: The same object while the units are brought up to date from the last ones.
    lineage: object = None
    #: Per node, the pods running there on their own whose units are in ``lone``.
    by_node: dict[str, frozenset[str]] = field(default_factory=dict)

    def on(self, nodes: set[str]) -> list[Unit]:
        """The units with a pod on one of ``nodes``: the gangs' in their order, then the
        lone pods' by node."""
        placement = self.snapshot.placement
        out = [u for u in self.gangs if any(placement.get(p.uid) in nodes for p in u.pods)]
        for node in sorted(nodes):
            out.extend(self.lone[uid] for uid in sorted(self.by_node.get(node, ())))
        return out

    #: The groups (priority, kind, GPUs) in which some unit has more than one pod: a lone
    #: pod's unit there could be ordered differently by work lost as the clock moves.
    crossing: frozenset[tuple[int, bool, int]] = frozenset()
    #: Whether every unit started by ``since`` and the units of each group have one size.
    timeless: bool = False
    #: How many units there are of each priority (0 for some priorities none has now).
    priorities: Counter[int] = field(default_factory=Counter)

    def fresh(self, now: float) -> bool:
        """Whether the units are still right at ``now`` (as far as the clock goes): until a
        protected one comes of age, and for ``UNITS_SECONDS`` unless their order by work lost
        cannot change (``timeless``: units of one pod each, or alone in their group, that
        started by then keep their order by start as the clock moves)."""
        if self.timeless:
            return self.since <= now < self.young
        return self.since <= now < min(self.young, self.since + UNITS_SECONDS)


def _units(o: Outlook) -> _Units:
    """The running units that could be evicted (``running_units``), kept while the cache is
    unchanged and no protected unit has come of age; after pods changed, the last ones with
    the changed lone pods' units put in, taken out or replaced (see ``_units_since``)."""
    snapshot = o.session.snapshot
    # Units are made of pods holding nodes, cut by their gangs: kept while those pods and
    # each such gang's size, min-member and priority are the same.
    gangs = tuple(
        (k, g.min_member, g.priority, len(g.members)) for k, g in o.gangs.items() if g.bound
    )
    key = ("units", id(o.config), gangs)
    kept = o.kept.steady(snapshot, key, lambda: None)
    if isinstance(kept, _Units) and kept.fresh(o.now):
        return kept
    last: list[_Units | None] = o.kept.lasting(("units", "last"), lambda: [None])
    found = _units_since(o, last[0], key) if last[0] is not None else None
    if found is None:
        young: list[float] = []
        units = running_units(
            replace(snapshot, view=o.session.backfill_view()),
            dict(o.gangs),
            _queue_of_pod(o),
            now=o.now,
            protection=o.protection,
            protected_until=young,
            lone=lone_memo(o, "queue names"),
        )
        lone = {u.pods[0].uid: u for u in units if u.key.startswith("pod:")}
        gangs_units = units[: len(units) - len(lone)]
        sizes: dict[tuple[int, bool, int], set[int]] = {}
        for unit in units:
            sizes.setdefault(_group(unit), set()).add(len(unit.pods))
        crossing = frozenset(g for g, n in sizes.items() if n != {1})
        timeless = all(len(n) == 1 for n in sizes.values()) and all(
            u.started <= o.now for u in units
        )
        found = _Units(snapshot, key, o.config, o.protection, o.now, min(young, default=math.inf),
                       gangs_units, lone, object(), units, object(), _by_node(snapshot, lone),
                       crossing, timeless, Counter(u.priority for u in units))  # fmt: skip
    last[0] = found
    o.kept.put_steady(snapshot, key, found)
    return found


def _group(unit: Unit) -> tuple[int, bool, int]:
    """What victim searches order units by before work lost."""
    return (unit.priority, unit.elastic, unit.gpus)


def _queue_of_pod(o: Outlook) -> Callable[[Pod], str | None]:
    return lambda p: o.queue_names.of(p, o.config) or None


#: Changed pods beyond this many: the running units are found again from every pod.
FEW_CHANGES = 1024


def _units_since(o: Outlook, kept: _Units, key: tuple[object, ...]) -> _Units | None:
    """``kept`` brought to ``o``'s snapshot when the pods changed since are all outside
    gangs and none came of age or became protected: each changed pod's unit put in, taken
    out or replaced. When each adds to the units what it added before (nothing or a unit
    alike), the token stays. None: they must be found again.

    Pods that start running on their own have their units last, not where the pods are in
    the cache: every search orders units by (priority, kind, GPUs, work lost, key), and the
    key of a lone pod's unit is its own, so where it sits in the list changes no answer."""
    if kept.key != key or kept.config is not o.config or kept.protection is not o.protection:
        return None
    if not kept.since <= o.now < kept.young:
        return None  # a protected unit came of age (or the clock went back)
    old, new = kept.snapshot, o.session.snapshot
    changed = changed_pods(old, new)
    if changed is None or len(changed) > FEW_CHANGES:
        return None
    queue_of, memo = _queue_of_pod(o), lone_memo(o, "queue names")
    lone = kept.lone
    alike = True
    for uid in changed:
        if uid in old.gang_members or uid in new.gang_members:
            return None
        before = lone_state(old, uid, queue_of, now=kept.since, protection=o.protection)
        after = lone_state(new, uid, queue_of, now=o.now, protection=o.protection, lone=memo)
        if "young" in (before[0], after[0]) and before[:2] != after[:2]:
            return None  # the first time a protected one comes of age moves
        if before[2] is not None and after[2] is not None and same_unit(before[2], after[2]):
            if lone is kept.lone:
                lone = dict(lone)
            lone[uid] = after[2]  # in the same place: the pod object is new
            continue
        if before[2] is None and after[2] is None:
            continue
        alike = False
        if lone is kept.lone:
            lone = dict(lone)
        lone.pop(uid, None)
        if after[2] is not None:
            lone[uid] = after[2]
    token = kept.token if alike else object()
    since = kept.since
    timeless = kept.timeless and all(
        u.started <= since and _group(u) not in kept.crossing
        for uid in changed
        if (u := lone.get(uid)) is not None
    )
    if not kept.fresh(o.now):
        # Kept too long for victims ordered by work lost: the same units (none came of
        # age), found anew now.
        since, token = o.now, object()
    units = [*kept.gangs, *lone.values()]
    priorities = kept.priorities
    if lone is not kept.lone:  # the changed pods' units out, their units now in
        priorities = Counter(priorities)
        for uid in changed:
            if (unit := kept.lone.get(uid)) is not None:
                priorities[unit.priority] -= 1
            if (unit := lone.get(uid)) is not None:
                priorities[unit.priority] += 1
    by_node = kept.by_node
    if lone is not kept.lone:  # the changed pods' nodes, before and after
        by_node = dict(by_node)
        was = {uid: old.placement.get(uid) for uid in changed if uid in kept.lone}
        now = {uid: new.placement.get(uid) for uid in changed if uid in lone}
        for node in {*was.values(), *now.values()} - {None}:
            assert node is not None
            here = set(by_node.get(node, ()))
            here -= {u for u, n in was.items() if n == node}
            here |= {u for u, n in now.items() if n == node}
            by_node[node] = frozenset(here)
    return replace(kept, snapshot=new, since=since, lone=lone, token=token, units=units,
                   by_node=by_node, timeless=timeless, priorities=priorities)  # fmt: skip


def _by_node(snapshot: Snapshot, lone: dict[str, Unit]) -> dict[str, frozenset[str]]:
    """Per node, the uids of ``lone`` placed there."""
    found: dict[str, set[str]] = {}
    for uid in lone:
        node = snapshot.placement.get(uid)
        if node:
            found.setdefault(node, set()).add(uid)
    return {node: frozenset(uids) for node, uids in found.items()}


def lone_memo(o: Outlook, purpose: str) -> LoneMemo:
    """The memo of lone pods' units for ``running_units`` (one per ``purpose``: per way of
    naming a pod's queue), kept across snapshots while the queue config and the protection
    policy are the same objects (a unit's queue and protection come from them)."""
    held: list[Any] = o.kept.lasting(("lone units", purpose), lambda: [None, None, {}])
    if held[0] is not o.config or held[1] is not o.protection:
        held[:] = [o.config, o.protection, {}]
    return cast(LoneMemo, held[2])


def _find_priority_fix(o: Outlook, job: Job, queue: str, found: _Units) -> list[Fix]:
    snapshot = replace(o.session.snapshot, view=o.session.backfill_view())
    mine = max(p.priority for p in job.core)
    above = {p + 1 for p, count in found.priorities.items() if count and p >= mine}
    for priority in sorted(above)[:6]:
        core = [replace(p, priority=priority) for p in job.core]
        room = make_room(
            snapshot,
            job.key,
            core,
            _focus(o, snapshot, core, found, priority),
            usage=o.usage,
            queue=queue or o.config.default_queue,
            config=o.config,
            now=o.now,
            strategy=o.strategy,
        )
        if room is not None:
            names = ", ".join(sorted({u.key for u in room.victims}))
            return [Fix(f"priority ≥ {priority}", f"it would evict {names} and start", 6)]
    return []


def _focus(
    o: Outlook, snapshot: Snapshot, core: Sequence[Pod], found: _Units, priority: int
) -> list[Unit]:
    """The units worth searching for victims: all of them when few, else those on the nodes
    ``core`` takes once every unit below ``priority`` is gone. (The planner's search weighs
    thousands of running pods one by one, seconds on a big cluster; a fix needs one way that
    works, and ``make_room`` still checks it.)"""
    units = found.units
    if sum(n for p, n in found.priorities.items() if p < priority) <= FOCUS_UNITS:
        return list(units)
    view = _freed_below(o, snapshot, found, priority)
    shape = tuple((p.requests, GpuAsk.of(p), constraint_of(p)) for p in core)
    placed = o.kept.across(
        ("focus", shape, o.strategy),
        lambda: allocate(view, core, strategy=o.strategy),
        scope=[view],
    )
    if not placed.complete:
        return list(units)
    # Where each unit sits in the list changes no search (see ``_units_since``).
    return found.on(set(placed.placed.values()))


def _freed_below(o: Outlook, snapshot: Snapshot, found: _Units, priority: int) -> NodeView:
    """``freed(snapshot, lower)``: the view without holds and without every unit below
    ``priority``. Kept per priority across snapshots while the units are brought up to date
    from the same ones (``_units_since``) and each pod changed since adds the same to it as
    before: nothing (it is in a unit below ``priority``, or holds no room), or the same
    amount on the same node and devices. A unit below the priority that ends, or starts
    where it ran, so leaves it as it was."""
    kept: dict[int, tuple[_Units, NodeView]] = o.kept.lasting(("freed below",), dict)
    hit = kept.get(priority)
    if (
        hit is not None
        and hit[0].lineage is found.lineage
        and _same_residue(hit[0], found, priority)
    ):
        view = hit[1]
    else:
        view = freed(snapshot, [u for u in found.units if u.priority < priority])
    if len(kept) > 16:
        kept.clear()
    kept[priority] = (found, view)
    return view


def _same_residue(old: _Units, new: _Units, priority: int) -> bool:
    """Whether every pod that differs between ``old``'s and ``new``'s snapshots adds the
    same to ``freed`` of the units below ``priority`` in both (see ``_freed_below``)."""
    changed = changed_pods(old.snapshot, new.snapshot)
    if changed is None or len(changed) > FEW_CHANGES:
        return False
    members = old.snapshot.gang_members, new.snapshot.gang_members
    if any(uid in m for uid in changed for m in members):
        return False  # a gang's units are its own: found again whole
    return all(_residue(old, uid, priority) == _residue(new, uid, priority) for uid in changed)


def _residue(found: _Units, uid: str, priority: int) -> tuple[object, ...] | None:
    """What pod ``uid`` adds to the view without holds once the units below ``priority``
    are gone (None: nothing)."""
    snapshot = found.snapshot
    node = snapshot.placement.get(uid)
    row = snapshot.view.index.get(node) if node else None
    pod = snapshot.pods.get(uid)
    if row is None or pod is None:
        return None
    unit = found.lone.get(uid)
    if unit is not None and unit.priority < priority:
        return None
    return (row, pod.requests, snapshot.devices.get(uid))


def _gpus_text(amount: np.ndarray) -> str:
    return f"{format_milli('nvidia.com/gpu', int(amount[0]))} nvidia.com/gpu"


def _spread(nodes: Any) -> str:
    counts = Counter(nodes)
    return ", ".join(f"{n} ({c})" if c > 1 else n for n, c in sorted(counts.items()))


@dataclass(frozen=True, slots=True)
class GangLine:
    """One gang in a list of all of them: its queue and its brief story (state, category,
    summary and, when it waits, the ETA; no fixes, node reasons or queue path)."""

    key: str
    queue: str
    answer: Explanation


def explain_gangs(outlook: Outlook) -> list[GangLine]:
    """Every gang ``outlook`` knows, by key, each with its queue and brief story plus ETA."""
    lines = []
    for key in sorted(outlook.gangs):
        job = _gang_job(outlook.gangs[key], f"gang {key}")
        answer = _explain(outlook, job, brief=True)
        answer.eta_seconds = (
            _eta(outlook, job, answer.category) if answer.state == JobState.WAITING else 0.0
        )
        lines.append(GangLine(key, _queue_of(outlook, job), answer))
    return lines


class GangLines:
    """``explain_gangs`` on the planner's state, computed at most once per planner cycle and
    ``max_age`` seconds (a dashboard polling it costs one look per cycle, not one per poll)."""

    def __init__(
        self,
        look: Callable[[], Outlook],
        cycles: Callable[[], int],
        clock: Callable[[], float],
        max_age: float = 2.0,
    ) -> None:
        self._look = look
        self._cycles = cycles
        self._clock = clock
        self._max_age = max_age
        self._lock = threading.Lock()
        self._memo: tuple[int, float, list[GangLine]] | None = None

    def __call__(self) -> list[GangLine]:
        """The current lines (from the memo when no cycle ran and it is fresh)."""
        with self._lock:
            cycle, now = self._cycles(), self._clock()
            memo = self._memo
            if memo is not None and memo[0] == cycle and now - memo[1] < self._max_age:
                return memo[2]
            lines = explain_gangs(self._look())
            self._memo = (cycle, now, lines)
            return lines


class Headlines:
    """``category: summary (gang KEY)`` for waiting gang members, as filter tells
    kube-scheduler (so its FailedScheduling events and PodScheduled conditions tell the same
    story as ``/explain``). Computed once per gang and planner cycle, on one look per cycle.
    ``look`` may answer ``None`` (the planner is busy with a cycle): no headline then."""

    def __init__(
        self,
        look: Callable[[], Outlook | None],
        cycles: Callable[[], int],
        *,
        clock: Callable[[], float] = time.monotonic,
        steady: float = STEADY_SECONDS,
        reuse: float = REUSE_SECONDS,
        members: Callable[[str], int] | None = None,
    ) -> None:
        """A member's told headline changes at most once per ``steady`` seconds of ``clock``
        (see ``_tell``); a gang's headline is worked out again at most once per ``reuse``
        seconds while its members stay (``_fresh``). ``members`` (if any) says how many
        members a gang has in the cache now: a gang whose count differs from the cycle's look
        (members came without a cycle, as filter runs none for a gang short of members) is
        looked at again."""
        self._look = look
        self._cycles = cycles
        self._members = members
        self._clock = clock
        self._steady = steady
        self._reuse = reuse
        self._lock = threading.Lock()
        #: gang -> ((cycle, members), when worked out, headline)
        self._memo: dict[str, tuple[tuple[int, int], float, str]] = {}
        #: gang found short of members -> (its minimum, when explained so)
        self._short: dict[str, tuple[int, float]] = {}
        self._outlook: tuple[int, Outlook] | None = None
        self._said: dict[str, tuple[str, float]] = {}
        self._news: list[tuple[Pod, str]] = []
        #: Members answered without a story while a cycle ran, by uid (``_busy``).
        self._pending: dict[str, Pod] = {}

    def __call__(self, pod: Pod) -> str | None:
        """The headline for ``pod``'s gang (None: not in a gang Muster knows)."""
        spec = gang_spec(pod)
        if spec is None:
            return None
        cycle = self._cycles()
        seen = self._members(spec.key) if self._members is not None else -1
        with self._lock:
            held = self._held(pod)
            if held is not None:  # whatever the story is now, this one is told (``_tell``)
                return held
            hit = self._memo.get(spec.key)
            if hit is not None and self._fresh(hit, cycle, seen):
                return self._tell(pod, hit[2])
            counted = self._counted(spec.key, seen)
            if counted is not None:
                return self._tell(pod, counted)
        outlook = self.outlook(cycle)
        if outlook is not None and seen >= 0:
            gang = outlook.gangs.get(spec.key)
            if gang is None or len(gang.members) != seen:
                outlook = self.outlook(cycle, again=True)
        if outlook is None:
            return self._busy(pod, spec.key, seen)
        answer = explain_gang(outlook, spec.namespace, spec.name, brief=True)
        if answer.state == JobState.UNKNOWN:
            return None
        text = f"{answer.headline} (gang {spec.key})"
        gang = outlook.gangs.get(spec.key)
        with self._lock:
            if len(self._memo) > 4096:
                self._memo.clear()
                self._short.clear()
            self._memo[spec.key] = ((cycle, seen), self._clock(), text)
            if answer.category == Category.GANG_INCOMPLETE and gang is not None:
                self._short[spec.key] = (gang.min_member, self._clock())
            else:
                self._short.pop(spec.key, None)
            return self._tell(pod, text)

    def _busy(self, pod: Pod, gang: str, seen: int) -> str | None:
        """The story for ``pod`` while the planner is busy with a cycle: the one told last,
        else the gang's last one. ``None`` (filter then gives the planner's verdict, which
        says a cycle is under way) when there is none, or when it is a passing story the gang
        has outgrown ("1 of 2 members exist" when both exist now): such a member's story is
        worked out once the cycle is over, and given as news (``news``)."""
        with self._lock:
            said = self._said.get(pod.uid)
            last = self._memo.get(gang)
            story = said[0] if said is not None else last[2] if last is not None else None
            if story is None or (
                _passing(story) and (last is None or last[2] != story or last[0][1] != seen)
            ):
                if len(self._pending) < 4096:
                    self._pending[pod.uid] = pod
                return None
            return story if said is not None else self._tell(pod, story)

    def _counted(self, gang: str, seen: int) -> str | None:
        """The story of a gang explained as short of members less than ``COUNTED_SECONDS``
        ago, now that it has ``seen`` members, if it is still short: the explanation would
        give it (a gang without all its members is never planned, so missing members stay
        its first blocker). While shuffled pods arrive, every first-told member's gang has a
        new member count, so each would otherwise be looked at and explained, inside
        kube-scheduler's one-pod-at-a-time loop."""
        short = self._short.get(gang)
        if short is None or seen < 1:
            return None
        minimum, when = short
        if seen >= minimum or self._clock() - when >= COUNTED_SECONDS:
            return None
        return f"{Category.GANG_INCOMPLETE}: {incomplete_summary(seen, minimum)} (gang {gang})"

    def _fresh(self, hit: tuple[tuple[int, int], float, str], cycle: int, seen: int) -> bool:
        """Whether a gang's headline worked out earlier is told as it is: worked out in this
        cycle, or less than ``reuse`` seconds ago with the same members (and not one that
        gives way at once). During a burst of arriving pods the planner cycles every few
        tens of milliseconds; each first-told member would otherwise pay for explaining its
        gang again, inside kube-scheduler's one-pod-at-a-time loop."""
        (then, members), when, text = hit
        if members != seen:
            return False
        return then == cycle or (self._clock() - when < self._reuse and not _passing(text))

    def outlook(self, cycle: int | None = None, *, again: bool = False) -> Outlook | None:
        """The planner's outlook, looked at once per planner cycle (``cycle``: the current
        one, if the caller already asked; ``again``: look anew all the same); ``None`` while
        the planner is busy with a cycle."""
        cycle = self._cycles() if cycle is None else cycle
        with self._lock:
            if again or self._outlook is None or self._outlook[0] != cycle:
                look = self._look()
                if look is None:
                    return None
                self._outlook = (cycle, look)
            return self._outlook[1]

    def _held(self, pod: Pod) -> str | None:
        """The story ``pod`` was told if ``_tell`` would give it again whatever the new one
        (told less than ``steady`` seconds ago, and not one that gives way at once): then
        the gang's story need not be worked out at all (kube-scheduler retries every waiting
        pod after each finished job)."""
        said = self._said.get(pod.uid)
        if said is None or self._clock() - said[1] >= self._steady or _passing(said[0]):
            return None
        return said[0]

    def _tell(self, pod: Pod, text: str) -> str:
        """The headline to give for ``pod``: ``text``, unless the pod was told another one
        less than ``steady`` seconds ago (then that one again) and that one still holds: a
        story of missing members (or of nothing blocking) is replaced at once, since it stops
        being true rather than changing its numbers.

        kube-scheduler writes a rejected pod's message into its PodScheduled condition when
        the message changes, and before 1.27 that update puts the pod straight back into its
        queue: a story that changed on every retry kept hundreds of waiting pods cycling
        through kube-scheduler, ahead of the members Muster had just planned.
        ``/explain`` always gives the live story.
        """
        said = self._said.get(pod.uid)
        if said is not None and (said[0] == text or self._held(pod) is not None):
            return said[0]
        if len(self._said) > 16384:
            self._said.clear()
        self._said[pod.uid] = (text, self._clock())
        if len(self._news) < 4096:  # beyond that, kube-scheduler's own events still tell it
            self._news.append((pod, text))
        return text

    def news(self) -> list[tuple[Pod, str]]:
        """The pods whose headline changed since the last call, each with its new headline
        (for a ``GangWaiting`` event, so ``kubectl describe`` shows it without kube-scheduler's
        node-count prefix). First the story of each member answered without one while a
        cycle ran is worked out (call it after a cycle): kube-scheduler may not ask about
        that member again for minutes (on 1.20, until it flushes pods unschedulable for 60 s)
        when nothing else changes."""
        with self._lock:
            pending, self._pending = list(self._pending.values()), {}
        for pod in pending:
            self(pod)  # (busy again: it stays pending)
        with self._lock:
            news, self._news = self._news, []
        return news


#: Stories that stop being true (the members came, nothing blocks) rather than change.
_PASSING = tuple(f"{c}:" for c in (Category.GANG_INCOMPLETE, Category.NONE))


def _passing(told: str) -> bool:
    """Whether a told headline is one a new story replaces at once (see ``Headlines._tell``)."""
    return told.startswith(_PASSING)
