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

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.core.cycle.describe import gang_state
from app.core.cycle.outlook import Outlook
from app.core.cycle.plans import Why
from app.core.gpu.ask import MILLI, GpuAsk
from app.core.insight.eta import job_eta
from app.core.insight.fixes import Fix, fixes_for
from app.core.insight.jobs import (
    Job,
    gang_job,
    place_job,
    planned_elsewhere,
    queue_of,
    view_for,
    waiting_lines,
    without_planned,
)
from app.core.model.categories import Category, JobState
from app.core.model.gang import gang_spec
from app.core.model.quantity import format_milli
from app.core.model.queues import UNLIMITED
from app.core.model.values import RESOURCE_NAMES, Pod, Resources
from app.core.policies.proportion import admit, borrowable
from app.core.policies.registry import check_reasons, constraint_of, eligible
from app.core.state.domains import ask_of, tree_for
from app.core.state.queueusage import demand_of
from app.core.state.view import NodeView
from app.core.verbs.filter import filter_nodes

CATEGORIES = tuple(Category)
STATES = tuple(JobState)
#: How many reason groups ``nodes`` lists (most common first).
NODE_REASONS = 10


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
    return explain_job(outlook, gang_job(gang, f"gang {key}"), brief=brief)


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
        return explain_job(outlook, gang_job(outlook.gangs[spec.key], subject))
    bound = snapshot.holds_node(pod)
    job = Job(pod.key, subject, (pod,), 1, (pod,) if bound else (), () if bound else (pod,), None)
    return explain_job(outlook, job)


# -- the story -----------------------------------------------------------------------------


def explain_job(o: Outlook, job: Job, *, brief: bool = False) -> Explanation:
    """Explain ``job`` on ``o`` (a gang need not be known yet: what-if asks about new ones;
    ``brief``: state, category and summary only)."""
    queue = queue_of(o, job)
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
    out.eta_seconds = job_eta(o, job, out.category)
    out.fixes = sorted(fixes_for(o, job, queue, view, out.category), key=lambda f: f.cost)
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
    ahead = planned_elsewhere(o, job)
    if ahead:
        freed = without_planned(o, view, job, ahead)
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
    keys = waiting_lines(o).get(queue, [])
    if job.key not in keys:
        return None
    return {"queue": queue, "index": keys.index(job.key) + 1, "of": len(keys)}


# -- fixes ----------------------------------------------------------------------------------


def _spread(nodes: Any) -> str:
    counts = Counter(nodes)
    return ", ".join(f"{n} ({c})" if c > 1 else n for n, c in sorted(counts.items()))
