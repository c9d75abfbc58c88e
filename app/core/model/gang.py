"""Pod groups (gangs) from pod metadata alone: no CRDs.

A pod belongs to a gang when it carries a group name under any convention in
``app.core.model.labels.GROUP_CONVENTIONS``; the gang is that name within the pod's namespace. The
minimum size comes from the matching min-member key (``muster.io/min-member`` always wins).
Members that disagree on the minimum are reported, never guessed between.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from app.core.model import labels
from app.core.model.values import Pod


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

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


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


def gang_spec(pod: Pod) -> GangSpec | None:
    """The gang ``pod`` belongs to, or ``None`` for a pod scheduled on its own."""
    lab, ann = pod.labels, pod.annotations
    for group_key, min_key in labels.GROUP_CONVENTIONS:
        name = labels.lookup(group_key, lab, ann)
        if not name:
            continue
        problems = []
        raw_min = labels.lookup(labels.MIN_MEMBER, lab, ann)
        min_source = labels.MIN_MEMBER
        if raw_min is None and min_key is not None:
            raw_min, min_source = labels.lookup(min_key, lab, ann), min_key
        min_member, why = _positive_int(min_source, raw_min)
        problems.append(why)
        max_member, why = _positive_int(
            labels.MAX_MEMBER, labels.lookup(labels.MAX_MEMBER, lab, ann)
        )
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
        if min_member is not None and max_member is not None and max_member < min_member:
            problems.append(
                f"{labels.MAX_MEMBER}={max_member} is below the min-member {min_member}"
            )
        if min_member is None and not any(problems):
            problems.append(f"no min-member given (set {labels.MIN_MEMBER})")
        return GangSpec(
            namespace=pod.namespace,
            name=name,
            min_member=min_member,
            max_member=max_member,
            timeout=timeout,
            convention=group_key,
            problem="; ".join(p for p in problems if p),
        )
    return None


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

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @property
    def priority(self) -> int:
        """The highest priority among members."""
        return max((p.priority for p in self.members), default=0)

    @property
    def created(self) -> float:
        """When the first member was created."""
        return min((p.created for p in self.members), default=0.0)

    @property
    def running(self) -> bool:
        """Whether at least min-member members hold their nodes."""
        return self.min_member > 0 and len(self.bound) >= self.min_member

    @property
    def limit(self) -> int:
        """How many members may run at most (max-member, else every member there is)."""
        return self.max_member or max(len(self.members), self.min_member)


def collect_gangs(pods: Iterable[Pod], holds_node: Callable[[Pod], bool]) -> dict[str, Gang]:
    """Group live pods into gangs keyed ``namespace/name``.

    ``holds_node(pod)`` tells bound members (or binds in flight) from pending ones.
    """
    gangs: dict[str, Gang] = {}
    specs: dict[str, list[GangSpec]] = {}
    for pod in pods:
        if pod.terminal or pod.deleting:
            continue
        spec = gang_spec(pod)
        if spec is None:
            continue
        gang = gangs.get(spec.key)
        if gang is None:
            gang = gangs[spec.key] = Gang(spec.namespace, spec.name)
        gang.members.append(pod)
        (gang.bound if holds_node(pod) else gang.pending).append(pod)
        specs.setdefault(spec.key, []).append(spec)
    for key, gang in gangs.items():
        _agree(gang, specs[key])
    return gangs


def _agree(gang: Gang, specs: list[GangSpec]) -> None:
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
    gang.problem = "; ".join(problems)
    gang.members.sort(key=lambda p: (p.created, p.name))
    gang.pending.sort(key=lambda p: (p.created, p.name))
