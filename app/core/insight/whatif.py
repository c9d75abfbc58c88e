"""What if I submit this? The same decision the planner's next cycle would take for a new
gang, taken on an uncommitted session: it changes nothing.

A request names one pod template (with ``replicas``; more than one make a gang) or a whole
workload (Job, JobSet, PyTorchJob, RayCluster, LeaderWorkerSet): its pods are built from its
templates, and its gang is sized the way the webhook sizes it (``admission.workloads``).
Optional ``queue``, ``priority``, ``topology`` and ``minMember`` override what the templates
say. The answer: whether it fits now, where each member goes (node and GPU devices), which
whole gangs would be evicted for it (with the work they lose), when it is expected to start,
and, when it does not start now, the same explanation ``/explain`` gives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from app.core.actions.victims import running_units
from app.core.admission.workloads import (
    JOBSET,
    REPLICATED_JOB,
    WorkloadRef,
    gang_of,
    kind_of,
    member_templates,
)
from app.core.cycle.makeroom import make_room, may_take_room
from app.core.cycle.memos import gangs_of
from app.core.cycle.outlook import Outlook
from app.core.insight.explain import Explanation, explain_job
from app.core.insight.jobs import Job, place_job, view_for
from app.core.insight.units import lone_memo
from app.core.model.categories import Category
from app.core.model.errors import InvalidInput
from app.core.model.gang import Gang, collect_gangs
from app.core.model.labels import MIN_MEMBER, POD_GROUP, QUEUE, TOPOLOGY_PREFERRED
from app.core.model.labels import TOPOLOGY_REQUIRED as REQUIRED
from app.core.model.parse import json_object, pod_from_dict
from app.core.model.values import Pod
from app.core.policies.proportion import admit
from app.core.state.domains import ask_of
from app.core.state.queueusage import demand_of, queue_name

#: Keys a what-if request may have.
REQUEST_KEYS = frozenset(
    {"namespace", "name", "pod", "replicas", "workload", "queue", "priority", "topology",
     "minMember"}
)  # fmt: skip
MAX_PODS = 10_000


@dataclass(frozen=True, slots=True)
class Proposal:
    """A job a user might submit, as Muster would see its pods (all pending, created now)."""

    namespace: str
    name: str
    pods: tuple[Pod, ...]
    min_member: int
    basis: str

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@dataclass(slots=True)
class WhatIf:
    """The answer of ``POST /whatif``."""

    subject: str
    fits_now: bool
    placement: dict[str, dict[str, Any]] = field(default_factory=dict)
    victims: list[dict[str, Any]] = field(default_factory=list)
    eta_seconds: float | None = None
    explanation: Explanation | None = None
    min_member: int = 1
    basis: str = ""

    def as_dict(self) -> dict[str, Any]:
        """The JSON body."""
        return {
            "subject": self.subject,
            "fits_now": self.fits_now,
            "min_member": self.min_member,
            "basis": self.basis,
            "placement": self.placement,
            "victims": self.victims,
            "eta_seconds": None if self.eta_seconds is None else round(self.eta_seconds, 1),
            "explanation": None if self.explanation is None else self.explanation.as_dict(),
        }


# -- the request -----------------------------------------------------------------------------


def proposal_from(body: Any, *, scheduler_name: str, now: float) -> Proposal:
    """Build the pods of a what-if request; ``InvalidInput`` names the offending field."""
    body = json_object(body, "body")
    unknown = sorted(set(body) - REQUEST_KEYS)
    if unknown:
        raise InvalidInput(unknown[0], f"unknown key; expected some of {sorted(REQUEST_KEYS)}")
    has_pod, has_workload = body.get("pod") is not None, body.get("workload") is not None
    if has_pod == has_workload:
        raise InvalidInput("pod", "give exactly one of pod (a pod template) or workload")
    overrides = _overrides(body)
    if has_workload:
        workload = json_object(body["workload"], "workload")
        kind = _wrap(lambda: kind_of(workload), "workload")
        meta = json_object(workload.get("metadata"), "workload.metadata")
        namespace = _name(body.get("namespace") or meta.get("namespace") or "default",
                          "namespace")  # fmt: skip
        name = _name(body.get("name") or meta.get("name"), "workload.metadata.name")
        ref = WorkloadRef(kind, namespace, name, f"{kind.kind} {namespace}/{name}", name)
        templates = _wrap(lambda: member_templates(kind, workload), "workload")
        # A staged JobSet's gang is one step: the first, whose pods the templates are.
        first = next(t.role for t in templates if t.count > 0)
        step = {REPLICATED_JOB: first} if kind == JOBSET else {}
        gang = _wrap(lambda: gang_of(ref, workload, step), "workload")
        minimum, basis = gang.min_member, f"{kind.kind}: {gang.basis}"
        overrides.setdefault("queue", gang.queue or None)
        members = [(t.role, t.count, t.template) for t in templates]
    else:
        template = json_object(body["pod"], "pod")
        meta = json_object(template.get("metadata"), "pod.metadata")
        namespace = _name(body.get("namespace") or meta.get("namespace") or "default",
                          "namespace")  # fmt: skip
        name = _name(body.get("name") or meta.get("name") or "whatif", "name")
        replicas = body.get("replicas", 1)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise InvalidInput("replicas", f"expected a positive integer, got {replicas!r}")
        members = [("", replicas, template)]
        minimum, basis = replicas, f"{replicas} replicas"
    total = sum(count for _, count, _ in members)
    if total > MAX_PODS:
        raise InvalidInput("replicas", f"{total} pods; at most {MAX_PODS}")
    if body.get("minMember") is not None:
        # More than the job's pods is a job that could never start: the answer says so.
        minimum = body["minMember"]
        if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 1:
            raise InvalidInput("minMember", f"expected a positive integer, got {minimum!r}")
        basis = "minMember"
    gang = total > 1 or has_workload or body.get("minMember") is not None
    pods = []
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for role, count, template in members:
        where = f"workload template {role or 'pod'}" if has_workload else "pod"
        # The template as given is checked once, before the overrides could hide a bad field,
        # and also when it starts no pod now (a later JobSet step, an empty worker group).
        pod_from_dict(_pod_json(template, name, namespace, stamp, scheduler_name, where), where)
        for i in range(count):
            member = f"{name}-{role}-{i}" if role else f"{name}-{i}" if total > 1 else name
            data = _pod_json(template, member, namespace, stamp, scheduler_name, where)
            labels = data["metadata"]["labels"]
            if gang:
                labels.update({POD_GROUP: name, MIN_MEMBER: str(minimum)})
            _apply(data, overrides)
            pods.append(pod_from_dict(data, where))
    return Proposal(namespace, name, tuple(pods), minimum if gang else 1, basis)


def _overrides(body: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    queue = body.get("queue")
    if queue is not None:
        out["queue"] = _name(queue, "queue")
    priority = body.get("priority")
    if priority is not None:
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise InvalidInput("priority", f"expected an integer, got {priority!r}")
        out["priority"] = priority
    topology = body.get("topology")
    if topology is not None:
        topology = json_object(topology, "topology")
        if len(topology) != 1 or next(iter(topology)) not in ("required", "preferred"):
            raise InvalidInput("topology", 'expected {"required": LEVEL} or {"preferred": LEVEL}')
        ((how, level),) = topology.items()
        out["topology"] = (REQUIRED if how == "required" else TOPOLOGY_PREFERRED,
                           _name(level, f"topology.{how}"))  # fmt: skip
    return out


def _pod_json(
    template: Mapping[str, Any],
    name: str,
    namespace: str,
    stamp: str,
    scheduler_name: str,
    where: str,
) -> dict[str, Any]:
    meta = json_object(template.get("metadata"), f"{where}.metadata")
    spec = dict(json_object(template.get("spec"), f"{where}.spec"))
    spec.setdefault("schedulerName", scheduler_name)
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"whatif/{namespace}/{name}",
            "labels": dict(json_object(meta.get("labels"), f"{where}.metadata.labels")),
            "annotations": dict(
                json_object(meta.get("annotations"), f"{where}.metadata.annotations")
            ),
            "creationTimestamp": stamp,
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def _apply(data: dict[str, Any], overrides: Mapping[str, Any]) -> None:
    if overrides.get("queue"):
        data["metadata"]["labels"][QUEUE] = overrides["queue"]
    if "priority" in overrides:
        data["spec"]["priority"] = overrides["priority"]
    if "topology" in overrides:
        key, level = overrides["topology"]
        data["metadata"]["annotations"][key] = level


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 253:
        raise InvalidInput(where, f"expected a name, got {value!r}")
    return value


def _wrap(make: Any, prefix: str) -> Any:
    """``make()``, with the field of an ``InvalidInput`` put under ``prefix``."""
    try:
        return make()
    except InvalidInput as exc:
        raise InvalidInput(f"{prefix}.{exc.field}", exc.problem) from exc


# -- the answer ------------------------------------------------------------------------------


def what_if(o: Outlook, proposal: Proposal) -> WhatIf:
    """What the planner's next cycle would do with ``proposal``, on ``o`` (nothing changes)."""
    pods = list(proposal.pods)
    gang = _gang(proposal)
    job = Job(
        proposal.key if gang is not None else pods[0].key,
        f"gang {proposal.key}" if gang is not None else f"pod {pods[0].key}",
        tuple(pods),
        proposal.min_member,
        (),
        tuple(pods),
        gang,
    )
    answer = WhatIf(job.subject, False, min_member=proposal.min_member, basis=proposal.basis)
    explanation = explain_job(o, job)
    if explanation.category == Category.NONE:
        ask, _ = ask_of(job.members)
        placed = place_job(o, view_for(o, job), job, ask)
        answer.fits_now = True
        answer.placement = _placement(placed.placed, placed.devices, pods)
        answer.eta_seconds = 0.0
        return answer
    room = _room(o, job, explanation)
    if room is not None:
        victims, allocation = room
        answer.placement = _placement(allocation.placed, allocation.devices, pods)
        answer.victims = victims
        answer.eta_seconds = 0.0
        return answer
    answer.explanation = explanation
    answer.eta_seconds = explanation.eta_seconds
    return answer


def _gang(proposal: Proposal) -> Gang | None:
    gangs = collect_gangs(proposal.pods, lambda _: False)
    return gangs.get(proposal.key)


def _placement(
    placed: Mapping[str, str], devices: Mapping[str, tuple[int, ...]], pods: Sequence[Pod]
) -> dict[str, dict[str, Any]]:
    names = {p.uid: p.name for p in pods}
    return {
        names[uid]: {"node": node, "gpus": list(devices.get(uid, ()))}
        for uid, node in sorted(placed.items(), key=lambda item: names[item[0]])
    }


def _room(o: Outlook, job: Job, explanation: Explanation) -> Any:
    """Evictions that would let a gang start, as the planner chooses them (None: none; a pod
    on its own is kube-scheduler's to preempt for)."""
    categories = (Category.CAPACITY, Category.FRAGMENTATION, Category.PRIORITY)
    if not o.preemption or job.gang is None or explanation.category not in categories:
        return None
    core = job.core
    queue = queue_name(core[0], o.config, o.scheduler_name) or o.config.default_queue
    snapshot = replace(o.session.snapshot, view=o.session.backfill_view())
    lowest = min(
        (p.priority for p in snapshot.pods.values() if snapshot.holds_node(p)), default=None
    )
    if not may_take_room(o.config, queue, lowest, max(p.priority for p in core)):
        return None
    if not admit(o.usage, queue, demand_of(core)).ok:
        return None
    taken = {uid for plan in o.plans.values() for uid in plan.victims}
    units = [
        u
        for u in running_units(
            snapshot,
            gangs_of(snapshot),
            lambda p: queue_name(p, o.config, o.scheduler_name),
            now=o.now,
            protection=o.protection,
            lone=lone_memo(o, f"queue_name {o.scheduler_name}"),
        )
        if not any(p.uid in taken for p in u.pods)
    ]
    room = make_room(
        snapshot,
        job.key,
        core,
        units,
        usage=o.usage,
        queue=queue,
        config=o.config,
        now=o.now,
        strategy=o.strategy,
    )
    if room is None:
        return None
    victims = [
        {
            "unit": u.key,
            "pods": sorted(p.key for p in u.pods),
            "gpus": u.gpus / 1000,
            "workLostSeconds": round(u.work_lost(o.now), 1),
        }
        for u in room.victims
    ]
    return victims, room.allocation
