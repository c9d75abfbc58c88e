"""Pod groups (gangs) from pod metadata and the group objects pods name.

A pod belongs to a gang when it carries a group name under any convention in
``app.core.model.labels.GROUP_CONVENTIONS``, or names a group object (a Volcano or
coscheduling PodGroup, a Kubernetes PodGroup or Workload group: ``app.core.model.groupobjects``)
that the cache attached to it; the gang is that name within the pod's namespace. The minimum
size comes from ``muster.io/min-member``, else the group object, else the convention's
min-member key. Where Muster's keys and the object disagree, the keys win and the gang's
``conflicts`` say so. Members that disagree on the minimum are reported, never guessed between.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import compress

from app.core.model import labels
from app.core.model.groupobjects import workload_gang
from app.core.model.interned import Interned
from app.core.model.podfacts import PodFact
from app.core.model.values import KUBERNETES, TERMINAL_PHASES, WORKLOAD, GroupObject, Pod


@dataclass(frozen=True, slots=True)
class GangSpec:
    """What one pod says about its gang. ``problem`` explains unusable metadata."""

    namespace: str
    name: str
    min_member: int | None
    max_member: int | None = None
    timeout: float | None = None
    convention: str = labels.POD_GROUP
    problem: str = ""
    #: The group object (PodGroup ...) that declares this gang, if the pod names one.
    group: GroupObject | None = None
    #: Where the pod's own keys and its group object disagree (reported; the keys win).
    notes: tuple[str, ...] = ()
    #: ``namespace/name`` (made once: every cycle reads it for every member).
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")


def _positive_int(key: str, value: str | None) -> tuple[int | None, str]:
    if value is None or value == "":
        return None, ""
    try:
        number = int(value)
    except ValueError:
        return None, f"{key}={value!r} is not a whole number"
    if number < 1:
        return None, f"{key}={value!r} must be at least 1"
    return number, ""


def object_gang_name(pod: Pod, obj: GroupObject) -> str:
    """The gang name ``obj`` gives ``pod`` (a Workload group's replica key splits it)."""
    if obj.source == WORKLOAD and pod.workload_ref is not None:
        return workload_gang(pod.workload_ref)
    return obj.name


def explicit_queue(pod: Pod) -> tuple[str, str] | None:
    """``(source, queue)`` the pod asks for: ``muster.io/queue``, else its group object's
    queue (a Volcano PodGroup's ``spec.queue``), else another scheduler's queue key.
    Remembered per pod object (as ``gang_spec``)."""
    return _QUEUES.of(pod)


def _explicit_queue(pod: Pod) -> tuple[str, str] | None:
    own = labels.lookup(labels.QUEUE, pod.labels, pod.annotations)
    if own:
        return labels.QUEUE, own
    if pod.group is not None and pod.group.queue:
        return f"{pod.group.display} spec.queue", pod.group.queue
    return labels.first(labels.QUEUE_KEYS, pod.labels, pod.annotations)


def _object_notes(pod: Pod, obj: GroupObject, min_member: int | None, min_key: str) -> list[str]:
    """Where the pod's own keys contradict its group object (the keys win; said, not guessed)."""
    notes = []
    field_name = "minCount" if obj.source in (KUBERNETES, WORKLOAD) else "minMember"
    if min_member is not None and obj.min_member is not None and min_member != obj.min_member:
        notes.append(
            f"{min_key}={min_member} disagrees with {obj.display} {field_name} "
            f"{obj.min_member}; {min_key} wins"
        )
    own_queue = labels.lookup(labels.QUEUE, pod.labels, pod.annotations)
    if own_queue and obj.queue and own_queue != obj.queue:
        notes.append(
            f"{labels.QUEUE}={own_queue} disagrees with {obj.display} queue {obj.queue}; "
            f"{labels.QUEUE} wins"
        )
    return notes


def gang_spec(pod: Pod) -> GangSpec | None:
    """The gang ``pod`` belongs to, or ``None`` for a pod scheduled on its own (see
    ``_gang_spec``). Remembered per pod object (``PodFact``): pods are immutable, and the
    cache, each cycle and each filter call ask for the same pods' gangs again. Equal specs are
    one object (members of one gang mostly say the same: ``_agree`` then reads one)."""
    return _SPECS.of(pod)


def is_member(pod: Pod) -> bool:
    """Whether ``pod`` belongs to a gang (``gang_spec``)."""
    return _SPECS.of(pod) is not None


#: Every distinct ``GangSpec`` made, one object per value.
_DISTINCT: Interned[GangSpec] = Interned(16384)


def _shared_spec(pod: Pod) -> GangSpec | None:
    spec = _gang_spec(pod)
    return None if spec is None else _DISTINCT(spec)


def _gang_spec(pod: Pod) -> GangSpec | None:
    """The gang ``pod`` belongs to, or ``None`` for a pod scheduled on its own.

    The name comes from ``muster.io/pod-group``, else the group object the pod names
    (``Pod.group``), else another scheduler's group key. The minimum from
    ``muster.io/min-member``, else the group object, else the convention's min-member key.
    Where Muster's keys and the object disagree, Muster's keys win and ``notes`` say so.
    """
    lab, ann = pod.labels, pod.annotations
    obj = pod.group if pod.group is not None and pod.group.gang else None
    own = labels.lookup(labels.POD_GROUP, lab, ann)
    notes: list[str] = []
    if obj is not None:
        obj_name = object_gang_name(pod, obj)
        if own and own not in (obj_name, labels.label_safe(obj_name)):
            notes.append(
                f"{labels.POD_GROUP}={own} names another gang than {obj.display}; "
                f"{labels.POD_GROUP} wins"
            )
            obj = None
        elif not own:
            return _spec(pod, obj_name, None, obj, [])
    if own:
        return _spec(pod, own, labels.MIN_MEMBER, obj, notes)
    for group_key, min_key in labels.GROUP_CONVENTIONS[1:]:
        name = labels.lookup(group_key, lab, ann)
        if name:
            return _spec(pod, name, min_key, None, notes, convention=group_key)
    for named, field_path in (
        (pod.scheduling_group, "spec.schedulingGroup.podGroupName"),
        (workload_gang(pod.workload_ref) if pod.workload_ref else "", "spec.workloadRef"),
    ):
        if named:
            if pod.group is not None and not pod.group.gang:
                return None  # a basic policy: scheduled on its own
            return GangSpec(
                namespace=pod.namespace,
                name=named,
                min_member=None,
                convention=field_path,
                problem=f"{field_path} names {named!r}, which the API does not have (yet)",
            )
    return None


def _spec(
    pod: Pod,
    name: str,
    min_key: str | None,
    obj: GroupObject | None,
    notes: list[str],
    convention: str = labels.POD_GROUP,
) -> GangSpec:
    """The spec of gang ``name``; ``min_key``: the pod key stating its minimum (Muster's own
    when the name is Muster's); ``obj``: the group object of the same gang, if any."""
    lab, ann = pod.labels, pod.annotations
    problems = []
    raw_min = labels.lookup(labels.MIN_MEMBER, lab, ann)
    min_source = labels.MIN_MEMBER
    if raw_min is None and min_key is not None and obj is None:
        raw_min, min_source = labels.lookup(min_key, lab, ann), min_key
    min_member, why = _positive_int(min_source, raw_min)
    problems.append(why)
    if obj is not None:
        convention = obj.display
        notes.extend(_object_notes(pod, obj, min_member, min_source))
        if raw_min is None:
            min_member = obj.min_member
            if obj.problem:
                problems.append(f"{obj.display}: {obj.problem}")
            for group_key, other_min in labels.GROUP_CONVENTIONS[1:]:
                other = labels.lookup(other_min, lab, ann) if other_min else None
                if other and labels.lookup(group_key, lab, ann) == obj.name:
                    stated, _ = _positive_int(other_min or "", other)
                    if stated is not None and stated != obj.min_member:
                        notes.append(
                            f"{other_min}={other} disagrees with {obj.display}; the {obj.kind} wins"
                        )
    max_member, why = _positive_int(labels.MAX_MEMBER, labels.lookup(labels.MAX_MEMBER, lab, ann))
    problems.append(why)
    timeout = None
    raw_timeout = labels.lookup(labels.GANG_TIMEOUT, lab, ann)
    if raw_timeout:
        try:
            timeout = float(raw_timeout)
            if timeout <= 0:
                raise ValueError
        except ValueError:
            timeout = None
            problems.append(f"{labels.GANG_TIMEOUT}={raw_timeout!r} is not a positive number")
    elif obj is not None:
        timeout = obj.timeout
    if min_member is not None and max_member is not None and max_member < min_member:
        problems.append(f"{labels.MAX_MEMBER}={max_member} is below the min-member {min_member}")
    if min_member is None and not any(problems):
        problems.append(f"no min-member given (set {labels.MIN_MEMBER})")
    return GangSpec(
        namespace=pod.namespace,
        name=name,
        min_member=min_member,
        max_member=max_member,
        timeout=timeout,
        convention=convention,
        problem="; ".join(p for p in problems if p),
        group=obj,
        notes=tuple(notes),
    )


@dataclass(slots=True)
class Gang:
    """All known members of one gang and what they agree on.

    ``members`` holds every live (non-terminal) pod of the group; ``bound`` those counting on a
    node (bound, or a bind in flight), ``pending`` the rest. ``problem`` is non-empty when the
    gang cannot be planned as described (members disagree, bad metadata).
    """

    namespace: str
    name: str
    members: list[Pod] = field(default_factory=list)
    min_member: int = 0
    max_member: int | None = None
    timeout: float | None = None
    problem: str = ""
    bound: list[Pod] = field(default_factory=list)
    pending: list[Pod] = field(default_factory=list)
    #: The group object that declares the gang (PodGroup ...), if members name one.
    group: GroupObject | None = None
    #: Where members' own keys and the group object disagree: Muster's keys won; reported.
    conflicts: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @property
    def priority(self) -> int:
        """The highest priority among members and the group object's (if it states one)."""
        members = max(map(_PRIORITY, self.members), default=0)
        if self.group is not None and self.group.priority is not None:
            return max(members, self.group.priority)
        return members

    @property
    def created(self) -> float:
        """When the first member was created."""
        return min(map(_CREATED, self.members), default=0.0)

    @property
    def running(self) -> bool:
        """Whether at least min-member members hold their nodes."""
        return self.min_member > 0 and len(self.bound) >= self.min_member

    @property
    def limit(self) -> int:
        """How many members may run at most (max-member, else every member there is)."""
        return self.max_member or max(len(self.members), self.min_member)


def collect_gangs(pods: Iterable[Pod], holds_node: Callable[[Pod], bool]) -> dict[str, Gang]:
    """Group live pods into gangs keyed ``namespace/name``; ``holds_node(pod)`` tells bound
    members (or binds in flight) from pending ones."""
    pods = list(pods)
    return group_gangs(pods, map(holds_node, pods))


def group_gangs(pods: Iterable[Pod], held: Iterable[bool]) -> dict[str, Gang]:
    """``collect_gangs`` with ``held`` already answered for each of ``pods`` in turn."""
    gangs: dict[str, Gang] = {}
    specs: dict[str, list[GangSpec]] = {}
    known = _SPECS.lookup()  # ``gang_spec``'s memo read in line (a cycle groups every member)
    for pod, holds in zip(pods, held, strict=True):
        if pod.terminal or pod.deleting:
            continue
        hit = known(pod.uid)
        spec = hit[1] if hit is not None and hit[0] is pod else gang_spec(pod)
        if spec is None:
            continue
        key = spec.key
        same = specs.get(key)
        if same is None:
            gang = gangs[key] = Gang(spec.namespace, spec.name)
            specs[key] = [spec]
        else:
            gang = gangs[key]
            same.append(spec)
        gang.members.append(pod)
        (gang.bound if holds else gang.pending).append(pod)
    for key, gang in gangs.items():
        _agree(gang, specs[key])
    return gangs


def collect_gang(pods: list[Pod], held: Sequence[bool]) -> dict[str, Gang]:
    """``group_gangs(pods, held)`` for the members the cache indexes under one gang key
    (the answer is then one gang, or none): quick, without a step per member, when every
    member is live and their specs are one object (``gang_spec`` hands out one per distinct
    spec)."""
    specs = _SPECS.of_each(pods)
    first = specs[0] if specs else None
    if (
        first is None
        or specs.count(first) != len(specs)
        or not TERMINAL_PHASES.isdisjoint(map(_PHASE, pods))
        or any(map(_DELETING, pods))
    ):
        return group_gangs(pods, held)
    gang = Gang(first.namespace, first.name, members=list(pods))
    if any(held):
        gang.bound = list(compress(pods, held))
        gang.pending = list(compress(pods, map(operator.not_, held)))
    _agree(gang, [first])
    return {first.key: gang}


#: A member's place among its gang's members: oldest first, then by name.
_BY_AGE = operator.attrgetter("created", "name")
_PRIORITY = operator.attrgetter("priority")
_CREATED = operator.attrgetter("created")
_PHASE = operator.attrgetter("phase")
_DELETING = operator.attrgetter("deleting")


def _agree(gang: Gang, specs: list[GangSpec]) -> None:
    first = specs[0]
    if specs.count(first) == len(specs):  # (equal specs are mostly one object: quick)
        # Every member says the same: what the sets below make of one spec.
        gang.min_member = first.min_member if first.min_member is not None else 0
        gang.max_member = first.max_member
        gang.timeout = first.timeout
        gang.group = first.group
        gang.conflicts = tuple(sorted(set(first.notes)))
        gang.problem = first.problem
    else:
        _disagree(gang, specs)
    _order(gang)


def _disagree(gang: Gang, specs: list[GangSpec]) -> None:
    """``_agree``'s fields when members' specs differ."""
    problems = sorted({s.problem for s in specs if s.problem})
    mins = sorted({s.min_member for s in specs if s.min_member is not None})
    maxes = sorted({s.max_member for s in specs if s.max_member is not None})
    if len(mins) > 1:
        problems.append(f"members disagree on min-member ({', '.join(map(str, mins))})")
    if len(maxes) > 1:
        problems.append(f"members disagree on max-member ({', '.join(map(str, maxes))})")
    gang.min_member = mins[0] if len(mins) == 1 else 0
    gang.max_member = maxes[0] if len(maxes) == 1 else None
    timeouts = [s.timeout for s in specs if s.timeout is not None]
    gang.timeout = min(timeouts) if timeouts else None
    gang.group = next((s.group for s in specs if s.group is not None), None)
    gang.conflicts = tuple(sorted({note for s in specs for note in s.notes}))
    gang.problem = "; ".join(problems)


def _order(gang: Gang) -> None:
    """Every list of ``gang`` oldest member first."""
    gang.members.sort(key=_BY_AGE)
    if gang.bound:
        gang.bound.sort(key=_BY_AGE)  # (every list of a gang in one order, whatever came first)
        gang.pending.sort(key=_BY_AGE)
    else:
        gang.pending = list(gang.members)  # every member pending: the same order (stable)


#: ``gang_spec`` and ``explicit_queue``, remembered per pod object.
_SPECS: PodFact[GangSpec | None] = PodFact(_shared_spec, ahead=True)
_QUEUES: PodFact[tuple[str, str] | None] = PodFact(_explicit_queue, ahead=True)
