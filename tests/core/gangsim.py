"""A tiny in-process stand-in for kube-scheduler, for gang scenario tests.

It does what kube-scheduler does per pod: filter over every node, prioritize the feasible
ones, pick the best, then bind in the background (binds of different pods overlap, as in
kube-scheduler's binding goroutines).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.core.model.values import Node, Pod
from app.core.state.bindadmission import BindAdmission
from app.core.state.cache import ClusterCache
from app.core.state.gateway import InMemoryGateway
from app.core.verbs.bind import BindOutcome
from app.core.verbs.extender import Extender
from app.settings import Settings
from app.wiring import Graph, build_cache, build_graph

#: ``planner_options`` keys (the Planner's parameters) -> the ``Settings`` field for each.
_SETTING_OF = {
    "min_runtime": "min_runtime_seconds",
    "plan_ttl": "plan_ttl_seconds",
    "preemption": "preemption",
    "default_runtime": "default_runtime_seconds",
    "topology_keys": "topology_keys",
}


@dataclass
class Attempt:
    """One scheduling attempt: the filter's answer and, if a node was chosen, the bind task."""

    pod: Pod
    node: str = ""
    reason: str = ""
    bind: asyncio.Task[BindOutcome] | None = None


@dataclass
class Cluster:
    """A cache, in-memory gateway, planner and extender wired like the server's."""

    nodes: list[Node]
    barrier_timeout: float = 2.0
    planner_options: dict = field(default_factory=dict)
    #: the planner's and barrier's clock, and the wall clock (epoch seconds)
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    #: what admission may see of Bindings (``None``: gangs always bind after dry runs, where
    #: the gateway blocks as a real API server does)
    bind_admission: BindAdmission | None = None
    cache: ClusterCache = field(init=False)
    gateway: InMemoryGateway = field(init=False)
    extender: Extender = field(init=False)
    graph: Graph = field(init=False)

    def __post_init__(self) -> None:
        options = dict(self.planner_options)
        queues = options.pop("queues", None)
        settings = Settings(
            strategy="binpack",
            bind_barrier_seconds=self.barrier_timeout,
            **{_SETTING_OF[k]: v for k, v in options.items()},
        )
        self.cache = build_cache(settings)
        self.cache.upsert_nodes(self.nodes)
        self.gateway = InMemoryGateway(self.cache)
        self.graph = build_graph(
            settings, self.cache, self.gateway, queues=queues, clock=self.clock, wall=self.wall,
            bind_admission=self.bind_admission,
        )  # fmt: skip
        self.extender = self.graph.extender

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def attempt(self, pod: Pod) -> Attempt:
        """Filter + prioritize + start the bind, like one kube-scheduler cycle."""
        result = self.extender.filter(pod, self.names)
        if not result.feasible:
            reasons = sorted(set(result.failed.values()) | set(result.unresolvable.values()))
            return Attempt(pod, reason="; ".join(reasons))
        scores = self.extender.prioritize(pod, result.feasible).pairs()
        node = max(scores, key=lambda s: s[1])[0]
        task = asyncio.get_running_loop().create_task(
            self.extender.bind(pod.namespace, pod.name, pod.uid, node)
        )
        return Attempt(pod, node=node, bind=task)

    def bound(self, pod: Pod) -> str:
        current = self.cache.pod(pod.uid)
        return current.node_name if current else ""
