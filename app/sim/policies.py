"""What kube-scheduler runs per attempt and per bind, under each simulated policy.

* ``muster``: kube-scheduler with Muster as its extender. Each attempt calls the real
  ``Extender.filter`` (and ``prioritize`` when more than one node is feasible, as
  kube-scheduler skips it otherwise); the real ``Planner`` plans gangs, on demand from filter
  and in a background loop that polls for cache changes every ``planner_poll`` seconds and
  nudges newly planned members (``PlannerLoop.run_once``: the annotation is a pod update
  that kube-scheduler's queue reacts to). Binds go through ``GangBinder``'s synchronous core
  on the simulated clock: members wait at the barrier in simulated time, and ``expire()``
  runs at each barrier deadline. All of it is the server's graph, built by the same
  composition root (``app.wiring.build_graph``) with the simulated clock.
* ``default``: plain kube-scheduler. Resource fit only (``filter_nodes`` on the same cache),
  the spreading score (kube-scheduler's default ``LeastAllocated``; ``policies.spread``),
  every pod assumed and bound on its own, no gang semantics.
* ``muster-gated`` (an experiment, not how Muster works today): ``muster`` with every gang
  member created behind a scheduling gate (``spec.schedulingGates``, which the admission
  webhook would add), and the planner loop's nudge removing the gate instead of setting an
  annotation. kube-scheduler then never tries a member before its gang is planned.

All pick at random among the best-scored nodes, as kube-scheduler's ``selectHost`` does.
kube-scheduler's own filters are not run under ``muster``: Muster's cache counts everything
kube-scheduler's would (bound and assumed pods) plus the plans' reservations, so Muster's
answer is never less strict.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from app.core.model.errors import BindRejected, GatewayError
from app.core.model.gang import gang_spec
from app.core.model.queues import OPEN, QueueConfig
from app.core.model.values import Pod
from app.core.state.cache import ClusterCache
from app.core.state.queuefile import QueueFile
from app.core.verbs.filter import FilterResult, filter_nodes
from app.core.verbs.gangbind import BindRequest
from app.core.verbs.prioritize import prioritize
from app.settings import Settings
from app.sim.apiserver import SimApi
from app.sim.clock import SimClock
from app.sim.kubescheduler import Decision
from app.wiring import build_graph

BindDone = Callable[[str, str], None]
POLICIES = ("muster", "default", "muster-gated")


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Knobs of the scheduler side that are not kube-scheduler's queue."""

    bind_latency: float = 0.005  # decision -> Binding created (API round trip)
    strategy: str = "binpack"  # Muster's packing strategy
    barrier_timeout: float = 4.0
    plan_ttl: float = 60.0
    planner_poll: float = 0.05
    seed: int = 0  # tie-breaking among equally scored nodes
    #: Muster's queue tree (``--queues FILE`` or a preset's); the open queue by default.
    queues: QueueConfig = field(default=OPEN)
    #: Muster's ``--min-runtime``: running gangs younger than this are never preempted.
    min_runtime: float = 0.0
    preemption: bool = True
    #: Muster's ``--default-runtime``: expected runtime of pods that declare none.
    default_runtime: float = 3600.0
    #: Muster's ``--gang-order`` and ``--longest-first-window``.
    gang_order: str = "longest-first"
    longest_first_window: float = 600.0


def settings_of(config: PolicyConfig) -> Settings:
    """The server settings that ``config``'s knobs stand for."""
    return Settings(
        strategy=config.strategy,
        bind_barrier_seconds=config.barrier_timeout,
        plan_ttl_seconds=config.plan_ttl,
        planner_poll_seconds=config.planner_poll,
        min_runtime_seconds=config.min_runtime,
        preemption=config.preemption,
        default_runtime_seconds=config.default_runtime,
        gang_order=config.gang_order,
        longest_first_window_seconds=config.longest_first_window,
    )


class StaticQueues(QueueFile):
    """A ``QueueFile`` holding one fixed configuration (no file to reload)."""

    def __init__(self, config: QueueConfig) -> None:
        super().__init__(None)
        self._fixed = config

    @property
    def config(self) -> QueueConfig:
        """The configuration given."""
        return self._fixed


def select_host(scores: Sequence[tuple[str, int]], rng: random.Random) -> str:
    """A uniformly random node among the highest scored (kube-scheduler's ``selectHost``)."""
    best = max(score for _, score in scores)
    top = [name for name, score in scores if score == best]
    return top[0] if len(top) == 1 else top[rng.randrange(len(top))]


def _reason(result: FilterResult) -> str:
    for reasons in (result.unresolvable, result.failed):
        for why in reasons.values():
            return why
    return "no nodes"


class DefaultPolicy:
    """Plain kube-scheduler: fit, spread, bind each pod on its own."""

    name = "default"

    def __init__(
        self, clock: SimClock, cache: ClusterCache, api: SimApi, config: PolicyConfig
    ) -> None:
        self._clock = clock
        self._cache = cache
        self._api = api
        self._config = config
        self._rng = random.Random(config.seed)
        self._names = [n.name for n in cache.view().nodes]

    def schedule(self, pod: Pod) -> Decision:
        view = self._cache.view()
        result = filter_nodes(view, pod, self._names)
        if not result.feasible:
            return Decision(reason=_reason(result))
        if len(result.feasible) == 1:
            return Decision(result.feasible[0])
        scores = prioritize(view, pod, result.feasible, "spread")
        return Decision(select_host(list(zip(result.feasible, scores, strict=True)), self._rng))

    def bind(self, pod: Pod, node: str, done: BindDone) -> None:
        try:
            self._cache.assume(pod.uid, node)  # kube-scheduler's own assume
        except BindRejected as exc:
            done(pod.uid, str(exc))
            return
        self._clock.after(self._config.bind_latency, self._bind, pod, node, done)

    def _bind(self, pod: Pod, node: str, done: BindDone) -> None:
        try:
            self._api.bind(pod.namespace, pod.name, pod.uid, node)
        except GatewayError as exc:
            self._cache.forget(pod.uid)
            done(pod.uid, str(exc))
            return
        done(pod.uid, "")

    def gated(self, pod: Pod) -> bool:
        return False


class MusterPolicy:
    """kube-scheduler with Muster's extender, planner loop and bind barrier."""

    name = "muster"

    def __init__(
        self,
        clock: SimClock,
        cache: ClusterCache,
        api: SimApi,
        config: PolicyConfig,
        *,
        gates: bool = False,
    ) -> None:
        self._clock = clock
        self._config = config
        self._gates = gates
        self._rng = random.Random(config.seed)
        # The server's graph (``app.wiring``), on the simulated clock.
        self.graph = build_graph(
            settings_of(config),
            cache,
            api,
            clock=clock,
            wall=clock,
            queues=StaticQueues(config.queues),
        )
        self.planner = self.graph.planner
        self.extender = self.graph.extender
        self.binder = self.graph.gang_binder
        self.loop = self.graph.loop
        self._names = [n.name for n in cache.view().nodes]
        self._waiting: dict[str, tuple[BindRequest, BindDone]] = {}
        self._expiry_checks: set[float] = set()
        self.barrier_timeouts = 0  # member binds failed because the barrier ran out
        self.rollbacks = 0  # gangs rolled back after a failed bind
        clock.after(config.planner_poll, self._poll)

    def schedule(self, pod: Pod) -> Decision:
        result = self.extender.filter(pod, self._names)
        if not result.feasible:
            return Decision(reason=_reason(result))
        if len(result.feasible) == 1:
            return Decision(result.feasible[0])
        scores = list(self.extender.prioritize(pod, result.feasible))
        return Decision(select_host(scores, self._rng))

    def gated(self, pod: Pod) -> bool:
        return self._gates and gang_spec(pod) is not None

    def bind(self, pod: Pod, node: str, done: BindDone) -> None:
        request = BindRequest(pod.namespace, pod.name, pod.uid, node)
        self._clock.after(self._config.bind_latency, self._bind, request, done)

    def _bind(self, request: BindRequest, done: BindDone) -> None:
        ticket = self.binder.admit(request)
        if ticket.outcome is not None:
            done(request.uid, ticket.outcome.error)
            return
        if ticket.status.ok and not ticket.released:
            done(request.uid, self.binder.bind_one(request).error)
            return
        replaced = self._waiting.pop(request.uid, None)
        if replaced is not None:
            replaced[1](request.uid, "superseded by a newer bind call")
        self._waiting[request.uid] = (request, done)
        if not ticket.status.ok:
            deadline = self.binder.barrier.deadline(ticket.gang)
            if deadline is not None and deadline not in self._expiry_checks:
                self._expiry_checks.add(deadline)
                self._clock.at(deadline, self._expire, deadline)
            return
        requests = list(ticket.released)
        outcomes = [self.binder.bind_one(r) for r in requests]
        answers = self.binder.finish_gang(ticket.gang, requests, outcomes)
        if any(a.reason == "RolledBack" for a in answers):
            self.rollbacks += 1
        for released, answer in zip(requests, answers, strict=True):
            waiting = self._waiting.pop(released.uid, None)
            if waiting is not None:
                waiting[1](released.uid, answer.error)

    def _expire(self, deadline: float) -> None:
        self._expiry_checks.discard(deadline)
        late = self.binder.expire()
        self.barrier_timeouts += len(late)
        for request, outcome in late:
            waiting = self._waiting.pop(request.uid, None)
            if waiting is not None:
                waiting[1](request.uid, outcome.error)

    def _poll(self) -> None:
        # A cycle, then the evictions it chose (whole gangs, through the SimApi's Eviction
        # API: the engine restarts the victims' jobs), then the nudges; forced once per
        # interval, as in the server.
        self.loop.poll_once(self._clock.now)
        self._clock.after(self._config.planner_poll, self._poll)


def make_policy(
    name: str, clock: SimClock, cache: ClusterCache, api: SimApi, config: PolicyConfig
) -> MusterPolicy | DefaultPolicy:
    """The policy called ``name`` (one of ``POLICIES``)."""
    if name in ("muster", "muster-gated"):
        return MusterPolicy(clock, cache, api, config, gates=name == "muster-gated")
    if name == "default":
        return DefaultPolicy(clock, cache, api, config)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
