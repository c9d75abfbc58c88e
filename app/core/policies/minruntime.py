"""Minimum runtime: how long running work is protected from preemption and reclaim.

The first that says something wins: the pods' own ``muster.io/min-runtime`` (label or
annotation; the longest of a gang's members), their PriorityClass (``priorityClasses`` in the
queue file), their queue's ``minRuntime`` (or its nearest ancestor's), then the server's
``--min-runtime`` for gangs (default 0: work may be preempted as soon as it starts). A pod on
its own is protected only by the first three.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.core.model import labels
from app.core.model.podfacts import PodFact
from app.core.model.queues import QueueConfig
from app.core.model.runtime import parse_duration
from app.core.model.values import Pod

#: The label or annotation a pod states its own protection with.
MIN_RUNTIME = "muster.io/min-runtime"


def declared(pods: Sequence[Pod]) -> float | None:
    """The longest ``muster.io/min-runtime`` any of ``pods`` states (None: none does;
    ``"0"`` states no protection)."""
    found = [s for s in map(_OWN.of, pods) if s is not None]
    return max(found, default=None)


def _own(pod: Pod) -> float | None:
    raw = labels.lookup(MIN_RUNTIME, pod.labels, pod.annotations)
    if not raw:
        return None
    return 0.0 if raw.strip() in {"0", "0s"} else parse_duration(raw)


#: Each pod's own ``muster.io/min-runtime``, read once per pod object.
_OWN: PodFact[float | None] = PodFact(_own, ahead=True)


class MinRuntime:
    """``Protection`` from pod annotations, priority classes, queues and a default."""

    name = "min-runtime"

    def __init__(self, config: Callable[[], QueueConfig], default: float) -> None:
        self._config = config
        self._default = default

    @property
    def default(self) -> float:
        """The server's default for gangs (``--min-runtime``)."""
        return self._default

    def seconds(self, pods: Sequence[Pod], queue: str | None, *, gang: bool) -> float:
        own = declared(pods)
        if own is not None:
            return own
        config = self._config()
        by_class = [
            config.priority_class_min_runtime[p.priority_class]
            for p in pods
            if p.priority_class in config.priority_class_min_runtime
        ]
        if by_class:
            return max(by_class)
        name = queue
        while name and name in config.queues:
            found = config.queues[name].min_runtime
            if found is not None:
                return found
            name = config.queues[name].parent
        return self._default if gang else 0.0
