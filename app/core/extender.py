"""The extender service: the four kube-scheduler verbs over the cluster cache.

HTTP handlers translate wire JSON into model values and call this; it owns no I/O except
through the ``Gateway`` that ``Binder`` uses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app.core import preempt
from app.core.binding import Binder, BindOutcome
from app.core.cache import ClusterCache
from app.core.filter import FilterResult, filter_nodes
from app.core.gateway import Gateway
from app.core.model import Node, Pod
from app.core.prioritize import STRATEGIES, prioritize


class Extender:
    """filter / prioritize / preempt / bind for one cluster cache."""

    def __init__(self, cache: ClusterCache, gateway: Gateway, *, strategy: str = "binpack") -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; choose one of {sorted(STRATEGIES)}")
        self.cache = cache
        self.strategy = strategy
        self._binder = Binder(cache, gateway)

    def _candidates(
        self, pod: Pod, names: Sequence[str] | None, nodes: Sequence[Node] | None
    ) -> tuple[Pod, list[str]]:
        """Learn the pod (and full nodes, when kube-scheduler sends them); the candidate names."""
        if nodes is not None:
            self.cache.upsert_nodes(nodes)
            names = [n.name for n in nodes]
        pod = self.cache.learn_pod(pod)
        return pod, list(names or ())

    def filter(
        self, pod: Pod, names: Sequence[str] | None, nodes: Sequence[Node] | None = None
    ) -> FilterResult:
        """Which candidates may take ``pod`` (``nodes`` also refresh the cache)."""
        pod, names = self._candidates(pod, names, nodes)
        return filter_nodes(self.cache.view(), pod, names)

    def prioritize(
        self, pod: Pod, names: Sequence[str] | None, nodes: Sequence[Node] | None = None
    ) -> list[tuple[str, int]]:
        """``(node, score 0-10)`` for every candidate."""
        pod, names = self._candidates(pod, names, nodes)
        scores = prioritize(self.cache.view(), pod, names, self.strategy)
        return list(zip(names, scores, strict=True))

    def preempt(
        self,
        pod: Pod,
        candidates: Mapping[str, preempt.Victims],
        given: Mapping[str, Pod] | None = None,
    ) -> dict[str, preempt.Victims]:
        """The candidate nodes (with their victims) on which preemption would let ``pod`` fit."""
        pod = self.cache.learn_pod(pod)
        return preempt.filter_candidates(self.cache.snapshot(), pod, candidates, given)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        """Bind the pod to ``node``; see ``Binder.bind``."""
        return self._binder.bind(namespace, name, uid, node)
