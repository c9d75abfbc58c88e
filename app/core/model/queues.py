"""Queue configuration: a tree of team queues with guaranteed shares, limits and weights.

The YAML file (``--queues FILE``; in deploy/ a ConfigMap mounted at /etc/muster/queues.yaml)::

    defaultQueue: default          # for Muster's pods that name no queue (must be defined)
    namespaces:                    # optional: namespace -> queue for pods that name none
      ml-research: research
    queues:
      - name: research
        parent: ""                 # optional; top level when absent
        weight: 2                  # share of what is left over, relative to siblings (default 1)
        guaranteed: {nvidia.com/gpu: 32, cpu: "256", memory: 2Ti}   # default 0
        limit: {nvidia.com/gpu: 64}                                  # default unlimited
        borrowing: true            # may use more than guaranteed when others leave it idle
        lendingLimit: {nvidia.com/gpu: 16}  # at most this much of its idle guarantee is lent
        minRuntime: 10m            # its running gangs are not preempted or reclaimed while
                                   # younger (default: the parent's, else --min-runtime)
    priorityClasses:               # optional: per PriorityClass name, over the queue's
      batch-protected: {minRuntime: 30m}

Every problem is reported with the path of the offending field; a configuration that does not
validate is refused whole (the server keeps the one it had).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from app.core.model.errors import InvalidInput
from app.core.model.quantity import parse_milli
from app.core.model.runtime import parse_duration
from app.core.model.values import RESOURCE_NAMES, Resources

#: A limit nobody reaches (unset limit / lending limit).
UNLIMITED = 2**60
_ALL = Resources(UNLIMITED, UNLIMITED, UNLIMITED, UNLIMITED)
_QUEUE_KEYS = {
    "name", "parent", "weight", "guaranteed", "limit", "borrowing", "lendingLimit", "minRuntime"
}  # fmt: skip
_TOP_KEYS = {"defaultQueue", "namespaces", "queues", "priorityClasses"}


@dataclass(frozen=True, slots=True)
class Queue:
    """One queue of the tree. Amounts are milli-units (``Resources``)."""

    name: str
    parent: str = ""
    weight: float = 1.0
    guaranteed: Resources = Resources()
    limit: Resources = _ALL
    borrowing: bool = True
    lending_limit: Resources = _ALL
    #: Seconds its running gangs are protected from preemption and reclaim (None: inherited).
    min_runtime: float | None = None


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """The whole tree, validated."""

    queues: Mapping[str, Queue]
    default_queue: str = "default"
    namespaces: Mapping[str, str] = field(default_factory=dict)
    #: PriorityClass name -> seconds its running work is protected (``priorityClasses``).
    priority_class_min_runtime: Mapping[str, float] = field(default_factory=dict)

    def path(self, name: str) -> list[Queue]:
        """The queue and its ancestors, leaf first."""
        out = []
        while name:
            queue = self.queues[name]
            out.append(queue)
            name = queue.parent
        return out

    def children(self, name: str) -> list[Queue]:
        """Direct children of ``name`` (``""``: the top-level queues)."""
        return [q for q in self.queues.values() if q.parent == name]

    def walk(self, name: str = "", depth: int = 0) -> Iterator[tuple[int, Queue]]:
        """Depth-first ``(depth, queue)`` from ``name``'s children."""
        for child in sorted(self.children(name), key=lambda q: q.name):
            yield depth, child
            yield from self.walk(child.name, depth + 1)


#: Used when no queue file is configured: one queue, no limits, everything admitted.
OPEN = QueueConfig(queues={"default": Queue("default")})


def _resources(value: Any, field_path: str, default: Resources) -> Resources:
    if value is None:
        return default
    if not isinstance(value, Mapping):
        raise InvalidInput(field_path, "expected a mapping of resource name to quantity")
    unknown = sorted(set(value) - set(RESOURCE_NAMES))
    if unknown:
        known = ", ".join(RESOURCE_NAMES)
        raise InvalidInput(f"{field_path}.{unknown[0]}", f"unknown resource (use {known})")
    return Resources(
        *(
            parse_milli(value[name], f"{field_path}.{name}") if name in value else base
            for name, base in zip(RESOURCE_NAMES, default, strict=True)
        )
    )


def _duration(value: Any, where: str) -> float | None:
    """A ``minRuntime``: seconds (a number) or a duration (``"1h30m"``, ``"45m"``, ``"0"``)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidInput(where, f"expected seconds or a duration like 10m, got {value!r}")
    if isinstance(value, int | float) and value >= 0:
        return float(value)
    if isinstance(value, str) and value.strip() in {"0", "0s"}:
        return 0.0
    seconds = parse_duration(value) if isinstance(value, str) else None
    if seconds is None:
        raise InvalidInput(where, f"expected seconds or a duration like 10m, got {value!r}")
    return seconds


def _priority_classes(data: Any) -> dict[str, float]:
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise InvalidInput(
            "priorityClasses", "expected a mapping of PriorityClass name to settings"
        )
    out: dict[str, float] = {}
    for name, settings in data.items():
        where = f"priorityClasses.{name}"
        if not isinstance(settings, Mapping) or set(settings) != {"minRuntime"}:
            raise InvalidInput(where, "expected {minRuntime: DURATION}")
        seconds = _duration(settings["minRuntime"], f"{where}.minRuntime")
        if seconds is None:
            raise InvalidInput(f"{where}.minRuntime", "expected seconds or a duration like 10m")
        out[str(name)] = seconds
    return out


def _queue(entry: Any, i: int) -> Queue:
    where = f"queues[{i}]"
    if not isinstance(entry, Mapping):
        raise InvalidInput(where, "expected a mapping")
    unknown = sorted(set(entry) - _QUEUE_KEYS)
    if unknown:
        raise InvalidInput(f"{where}.{unknown[0]}", "unknown key")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{where}.name", "a non-empty string is required")
    where = f"queues[{name}]"
    parent = entry.get("parent") or ""
    if not isinstance(parent, str):
        raise InvalidInput(f"{where}.parent", "expected a queue name")
    weight = entry.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
        raise InvalidInput(f"{where}.weight", f"expected a positive number, got {weight!r}")
    borrowing = entry.get("borrowing", True)
    if not isinstance(borrowing, bool):
        raise InvalidInput(f"{where}.borrowing", "expected true or false")
    queue = Queue(
        name=name,
        parent=parent,
        weight=float(weight),
        guaranteed=_resources(entry.get("guaranteed"), f"{where}.guaranteed", Resources()),
        limit=_resources(entry.get("limit"), f"{where}.limit", _ALL),
        borrowing=borrowing,
        lending_limit=_resources(entry.get("lendingLimit"), f"{where}.lendingLimit", _ALL),
        min_runtime=_duration(entry.get("minRuntime"), f"{where}.minRuntime"),
    )
    for res, g, lim in zip(RESOURCE_NAMES, queue.guaranteed, queue.limit, strict=True):
        if g > lim:
            raise InvalidInput(f"{where}.guaranteed.{res}", "is above the queue's limit")
    return queue


def parse_queue_config(text: str) -> QueueConfig:
    """Parse and validate a queue file; raises ``InvalidInput`` naming the problem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput("", f"not valid YAML: {exc}") from exc
    if not isinstance(data, Mapping):
        raise InvalidInput("", "expected a mapping with a 'queues' list")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise InvalidInput(unknown[0], "unknown key")
    entries = data.get("queues")
    if not isinstance(entries, list) or not entries:
        raise InvalidInput("queues", "expected a non-empty list")
    queues: dict[str, Queue] = {}
    for i, entry in enumerate(entries):
        queue = _queue(entry, i)
        if queue.name in queues:
            raise InvalidInput(f"queues[{i}].name", f"duplicate queue {queue.name!r}")
        queues[queue.name] = queue
    for queue in queues.values():
        if queue.parent and queue.parent not in queues:
            raise InvalidInput(f"queues[{queue.name}].parent", f"no queue {queue.parent!r}")
        seen = {queue.name}
        up = queue.parent
        while up:
            if up in seen:
                raise InvalidInput(f"queues[{queue.name}].parent", "queues form a cycle")
            seen.add(up)
            up = queues[up].parent
    config = QueueConfig(queues=queues)
    for name in [""] + list(queues):
        kids = config.children(name)
        if not name or not kids:
            continue
        parent = queues[name]
        for k, res in enumerate(RESOURCE_NAMES):
            total = sum(q.guaranteed[k] for q in kids)
            if parent.guaranteed[k] and total > parent.guaranteed[k]:
                raise InvalidInput(
                    f"queues[{name}].guaranteed.{res}",
                    "is less than what its children are guaranteed together",
                )
    default = data.get("defaultQueue", "default")
    if default not in queues:
        raise InvalidInput("defaultQueue", f"no queue {default!r}")
    namespaces = data.get("namespaces") or {}
    if not isinstance(namespaces, Mapping):
        raise InvalidInput("namespaces", "expected a mapping of namespace to queue")
    for ns, queue_name in namespaces.items():
        if queue_name not in queues:
            raise InvalidInput(f"namespaces.{ns}", f"no queue {queue_name!r}")
    return QueueConfig(
        queues=queues,
        default_queue=default,
        namespaces=dict(namespaces),
        priority_class_min_runtime=_priority_classes(data.get("priorityClasses")),
    )
