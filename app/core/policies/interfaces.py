"""The small interfaces every scheduling policy implements, one per kind of decision.

Modelled on kube-scheduler's extension points: a policy is an object with a ``name`` and one
method whose signature is fixed by its kind, so the code that runs policies
(``app.core.policies.registry``) never special-cases one of them.

* ``NodeFilter``: may this pod go to this node at all, whatever the node's usage? Judged once
  per group of nodes with the same taints (cordon, taints).
* ``LabelFilter``: the same question answered from node label columns for many rows at once
  (node selector, required affinity).
* ``Scorer``: how good is each candidate node, 0..``MAX_NODE_SCORE``.
* ``QueueOrder``: which queue goes next (a sort key; lower first).
* ``GangOrder``: which gang of one queue goes next (a sort key; lower first).
* ``QuotaCheck``: may this demand start in this queue now.
* ``Protection``: how long running work is safe from preemption and reclaim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from app.core.model.gang import Gang
from app.core.model.status import Status
from app.core.model.values import Node, Pod, Resources
from app.core.state.nodetable import NodeTable
from app.core.state.queueusage import QueueUsage
from app.core.state.view import NodeView

#: The best score a node can get (kube-scheduler's extender scale is 0-10).
MAX_NODE_SCORE = 10


@runtime_checkable
class NodeFilter(Protocol):
    """A usage-independent yes/no for one node."""

    name: str

    def check(self, node: Node, pod: Pod) -> str | None:
        """``None`` if ``pod`` may go to ``node``, else why not (no eviction can change it)."""
        ...


@runtime_checkable
class LabelFilter(Protocol):
    """A usage-independent yes/no judged on node label columns, many rows at once."""

    name: str

    def applies(self, pod: Pod) -> bool:
        """Whether ``pod`` asks anything of this filter (if not, every node passes)."""
        ...

    def reasons(self, table: NodeTable, pod: Pod, rows: np.ndarray) -> np.ndarray:
        """An object array over ``rows``: ``None`` where the node passes, else why not."""
        ...


@runtime_checkable
class Scorer(Protocol):
    """Ranks candidate nodes for a pod."""

    name: str
    #: Whether a node's score never drops as pods are added to it (packing scorers): then a
    #: gang's next alike member goes where the last one went while it still fits. A packing
    #: scorer scores a node by its own allocatable and usage alone (``DomainFills`` relies on
    #: it).
    packs: bool

    def score(self, view: NodeView, rows: np.ndarray, requests: Resources) -> np.ndarray:
        """Integer scores 0..``MAX_NODE_SCORE`` for nodes ``rows`` of ``view``."""
        ...


@runtime_checkable
class QueueOrder(Protocol):
    """Orders queues for the next placement."""

    name: str

    def key(self, usage: QueueUsage, queue: str) -> tuple[float, ...]:
        """Sort key of ``queue`` given ``usage``: the lowest goes first."""
        ...


@runtime_checkable
class GangOrder(Protocol):
    """Orders the gangs waiting in one queue."""

    name: str

    def key(self, gang: Gang) -> tuple[float, float, str]:
        """Sort key of ``gang``: the lowest goes first."""
        ...


@runtime_checkable
class QuotaCheck(Protocol):
    """Decides whether demand may start in a queue."""

    name: str

    def admit(self, usage: QueueUsage, queue: str, demand: np.ndarray) -> Status:
        """``SUCCESS`` if ``demand`` may start in ``queue`` now, else why not."""
        ...


@runtime_checkable
class Protection(Protocol):
    """Decides how long running work is protected from being evicted for other work."""

    name: str

    def seconds(self, pods: Sequence[Pod], queue: str | None, *, gang: bool) -> float:
        """Seconds after it starts during which the unit ``pods`` (a whole gang when
        ``gang``, else one pod) of ``queue`` may not be preempted or reclaimed."""
        ...
