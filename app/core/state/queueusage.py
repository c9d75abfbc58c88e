"""Which queue a pod belongs to, and how much each queue uses and wants, from a snapshot."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from app.core.model.gang import gang_spec
from app.core.model.queues import QueueConfig
from app.core.model.values import Pod
from app.core.state.cache import QueueKey, queue_key
from app.core.state.view import vector

_R = 4


def resolve(key: QueueKey, config: QueueConfig, scheduler_name: str = "muster") -> str | None:
    """The queue a pod with ``key`` asks for: its queue label/annotation, else its namespace's
    queue, else the default queue for Muster's own pods (its scheduler name, or any gang
    member). ``None``: a pod of another scheduler that no queue accounts for. The name may be
    unknown to ``config`` (the pod then waits)."""
    if key.explicit:
        return key.explicit
    if key.namespace in config.namespaces:
        return config.namespaces[key.namespace]
    if key.scheduler_name == scheduler_name or key.gang:
        return config.default_queue
    return None


def queue_name(pod: Pod, config: QueueConfig, scheduler_name: str = "muster") -> str | None:
    """``resolve`` for one pod."""
    return resolve(queue_key(pod, gang_spec(pod) is not None), config, scheduler_name)


@dataclass(slots=True)
class QueueUsage:
    """Per queue (own pods plus descendants): resources held and resources still wanted.

    ``used`` counts pods holding a node, binds in flight and plan reservations; ``pending``
    what queued pods without a node still ask for. Arrays follow ``RESOURCE_NAMES``.
    """

    config: QueueConfig
    capacity: np.ndarray
    used: dict[str, np.ndarray] = field(default_factory=dict)
    pending: dict[str, np.ndarray] = field(default_factory=dict)
    unknown: dict[str, int] = field(default_factory=dict)

    def of(self, name: str) -> np.ndarray:
        """What queue ``name`` holds (zeros if nothing)."""
        return self.used.get(name, np.zeros(_R, np.int64))

    def add(self, name: str, amount: np.ndarray, *, pending: bool = False) -> None:
        """Account ``amount`` to ``name`` and every ancestor."""
        book = self.pending if pending else self.used
        for queue in self.config.path(name):
            book[queue.name] = book.get(queue.name, np.zeros(_R, np.int64)) + amount


def measure(
    held: Mapping[QueueKey, np.ndarray],
    capacity: np.ndarray,
    config: QueueConfig,
    scheduler_name: str = "muster",
    pending: Iterable[Pod] = (),
) -> QueueUsage:
    """Usage of every queue from the cache's per-key totals (``ClusterCache.queue_usage``),
    plus the demand of ``pending`` pods."""
    usage = QueueUsage(config, capacity)
    for key, amount in held.items():
        name = resolve(key, config, scheduler_name)
        if name is None:
            continue
        if name not in config.queues:
            usage.unknown[name] = usage.unknown.get(name, 0) + 1
            continue
        usage.add(name, amount)
    for pod in pending:
        name = queue_name(pod, config, scheduler_name)
        if name is None:
            continue
        if name not in config.queues:
            usage.unknown[name] = usage.unknown.get(name, 0) + 1
            continue
        usage.add(name, np.asarray(pod.requests, dtype=np.int64), pending=True)
    return usage


def demand_of(pods: Iterable[Pod]) -> np.ndarray:
    """The summed requests of ``pods``."""
    total = np.zeros(_R, np.int64)
    for pod in pods:
        total += vector(pod.requests)
    return total
