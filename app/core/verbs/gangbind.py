"""Binding with the bind barrier: a gang's members bind together or not at all.

kube-scheduler binds each pod in its own goroutine, so every member's bind call can wait. A
member's bind waits (``app.core.verbs.barrier``) until every core member of its gang's plan has
reached bind (or already holds its node); then all of them are bound at once. The wait is
bounded (``timeout``, shorter than kube-scheduler's extender ``httpTimeout``): when it runs out,
the waiting calls get an error but the members stay parked on their planned nodes, and are
bound together with the rest when it arrives (the plan itself expires after its TTL). Against
a real API server every member's bind is first tried as a dry run, so a refusal (a webhook, a
policy) rolls the gang back before any member is bound. If a bind still fails after others
succeeded, the bound members are deleted (their controller recreates them) so no partial gang
keeps GPUs.

Runs on the server's event loop (one thread), so the barrier needs no lock; the binds
themselves run in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.core.cycle.planner import Planner
from app.core.model.errors import GatewayError
from app.core.model.gang import gang_spec
from app.core.model.status import SUCCESS, Status
from app.core.state.cache import ClusterCache
from app.core.state.gateway import Gateway
from app.core.state.journal import Journal, Kind
from app.core.verbs.barrier import Barrier
from app.core.verbs.bind import Binder, BindOutcome

log = logging.getLogger("muster.gangbind")


@dataclass(frozen=True, slots=True)
class BindRequest:
    """One bind call kube-scheduler made."""

    namespace: str
    name: str
    uid: str
    node: str


@dataclass(frozen=True, slots=True)
class BindTicket:
    """What to do with a bind call, by ``status.code``.

    ``SUCCESS``: bind now, this pod alone, or (``released`` not empty) every released member
    of the gang together; ``WAIT``: wait at the barrier; ``UNSCHEDULABLE``: answer ``outcome``
    right away (no plan, or planned on another node).
    """

    status: Status
    gang: str = ""
    outcome: BindOutcome | None = None
    released: tuple[BindRequest, ...] = ()


class GangBinder:
    """Binds non-gang pods at once and gang members through the barrier.

    ``bind_gang`` and ``expire`` are the synchronous core, shared with the simulator; ``bind``
    is the async entry point the HTTP handler awaits.
    """

    def __init__(
        self,
        cache: ClusterCache,
        planner: Planner,
        binder: Binder,
        gateway: Gateway,
        barrier: Barrier[BindRequest],
        *,
        clock: Callable[[], float],
        journal: Journal | None = None,
        dry_run_wanted: Callable[[], bool] | None = None,
    ) -> None:
        """``clock`` times the barrier's waits: monotonic seconds on the server, simulated time
        in the simulator (``app.wiring`` builds both). ``journal`` (if any) records gangs
        started, rolled back and barrier waits that ran out. ``dry_run_wanted`` (if any) says
        whether a gang's Bindings are tried as dry runs first (``BindAdmission``); without it
        they always are, against a real API server."""
        self._dry_run_wanted = dry_run_wanted
        self._cache = cache
        self._journal = journal
        self._planner = planner
        self._binder = binder
        self._gateway = gateway
        self._clock = clock
        self.barrier = barrier
        self._futures: dict[str, asyncio.Future[BindOutcome]] = {}

    @property
    def single(self) -> Binder:
        """The binder of one pod (also holds a pod on kube-scheduler's choice-to-be)."""
        return self._binder

    @property
    def waiting(self) -> dict[str, int]:
        """Gang -> members waiting at the barrier now."""
        return self.barrier.waiting()

    # -- synchronous core ------------------------------------------------------------------

    def admit(self, request: BindRequest) -> BindTicket:
        """Decide what to do with a bind call (see ``BindTicket``); records barrier arrivals."""
        pod = self._cache.pod(request.uid)
        if pod is not None and pod.node_name == request.node:
            # Bound there already (a parked member Muster bound while kube-scheduler was still
            # trying it): the call's work is done. An error would make kube-scheduler 1.20 put
            # the pod back into its queue as bound, for good (``ClusterCache.learn_pod``).
            return BindTicket(SUCCESS, outcome=BindOutcome())
        spec = gang_spec(pod) if pod is not None else None
        if spec is None:
            return BindTicket(SUCCESS)
        plan = self._planner.plan(spec.key)
        who = f"{request.namespace}/{request.name}"
        if plan is None or request.uid not in plan.members:
            if plan is None:
                self.barrier.take(spec.key)
            why = f"gang {spec.key}: {who} has no plan (released or expired); it is planned again"
            return BindTicket(Status.unschedulable(why), spec.key, BindOutcome(why, "NoPlan"))
        planned = plan.members[request.uid]
        if planned != request.node:
            why = f"gang {spec.key}: {who} is planned on {planned}, not {request.node}"
            outcome = BindOutcome(why, "NotPlanned")
            return BindTicket(Status.unschedulable(why), spec.key, outcome)
        if plan.released:
            return BindTicket(SUCCESS, spec.key)
        snapshot = self._cache.snapshot()

        def holds(uid: str) -> bool:
            member = snapshot.pods.get(uid)
            return member is not None and snapshot.holds_node(member)

        ready = self.barrier.arrive(plan, request.uid, request, self._clock(), holds)
        if ready is None:
            return BindTicket(Status.wait(f"gang {spec.key}: waiting for members"), spec.key)
        self._planner.mark_released(spec.key)
        return BindTicket(SUCCESS, spec.key, released=tuple(ready))

    def bind_one(self, request: BindRequest) -> BindOutcome:
        """Bind one pod now."""
        return self._binder.bind(request.namespace, request.name, request.uid, request.node)

    def finish_gang(
        self, gang: str, requests: Sequence[BindRequest], outcomes: Sequence[BindOutcome]
    ) -> list[BindOutcome]:
        """After binding a released gang: roll back if any bind failed; the final answers."""
        failed = [(r, o) for r, o in zip(requests, outcomes, strict=True) if o.error]
        plan = self._planner.plan(gang)
        queue = plan.queue if plan is not None else None
        if not failed:
            if self._journal is not None:
                nodes = sorted({r.node for r in requests})
                self._journal.record(
                    Kind.GANG_STARTED,
                    gang,
                    queue=queue,
                    nodes=nodes,
                    message=f"{len(requests)} members bound together on {', '.join(nodes)}",
                )
            return list(outcomes)
        first, why = next(((r, o) for r, o in failed if o.reason != "NotTried"), failed[0])
        reason = (
            f"gang {gang} rolled back: {first.namespace}/{first.name} failed to bind ({why.error})"
        )
        log.warning("%s", reason)
        for request, outcome in zip(requests, outcomes, strict=True):
            if not outcome.error:
                self._roll_back(request, reason)
        self._planner.release(gang, reason)
        if self._journal is not None:
            bound = sorted({r.node for r, o in zip(requests, outcomes, strict=True) if not o.error})
            self._journal.record(Kind.ROLLBACK, gang, queue=queue, message=reason, nodes=bound)
        return [BindOutcome(reason, "RolledBack") for _ in requests]

    def expire(self, now: float | None = None) -> list[tuple[BindRequest, BindOutcome]]:
        """Answer every bind call whose barrier wait ran out by ``now`` (default: the clock);
        the members stay planned and parked, and are bound with the rest of their gang once it
        arrives. Rooms of gangs that lost their plan are dropped."""
        for gang in self.barrier.gangs():
            if self._planner.plan(gang) is None:
                self.barrier.take(gang)
        answers: list[tuple[BindRequest, BindOutcome]] = []
        arrived = self.barrier.waiting()
        for gang, items in self.barrier.expire(self._clock() if now is None else now):
            plan = self._planner.plan(gang)
            need = len(plan.core) if plan else "?"
            reason = (
                f"gang {gang}: {arrived.get(gang, len(items))} of {need} members reached bind "
                f"within {self.barrier.timeout:g}s; they keep their planned nodes and are bound "
                "together with the rest"
            )
            answers.extend((r, BindOutcome(reason, "BarrierTimeout")) for r in items)
            if self._journal is not None:
                queue = plan.queue if plan is not None else None
                self._journal.record(Kind.BARRIER_TIMEOUT, gang, queue=queue, message=reason)
        return answers

    def _roll_back(self, request: BindRequest, reason: str) -> None:
        try:
            self._gateway.delete_pod(request.namespace, request.name, request.uid)
            self._gateway.event(
                request.namespace, request.name, request.uid, "GangRolledBack", reason, "Warning"
            )
        except GatewayError as exc:
            log.error("rolling back %s/%s failed: %s", request.namespace, request.name, exc)

    # -- async entry point -----------------------------------------------------------------

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        """Bind one pod; for a gang member, only together with its gang."""
        request = BindRequest(namespace, name, uid, node)
        ticket = self.admit(request)
        if ticket.outcome is not None:
            return ticket.outcome
        if ticket.status.ok and not ticket.released:
            if not self._gateway.blocking:
                return self.bind_one(request)  # in-memory: no I/O, no thread hop
            return await asyncio.to_thread(self.bind_one, request)
        future: asyncio.Future[BindOutcome] = asyncio.get_running_loop().create_future()
        replaced = self._futures.pop(uid, None)
        if replaced is not None and not replaced.done():
            replaced.set_result(BindOutcome("superseded by a newer bind call", "Superseded"))
        self._futures[uid] = future
        if ticket.status.ok:
            requests = list(ticket.released)
            outcomes = await self._dry_run(requests)
            refused = next((o for o in outcomes if o.error), None)
            if refused is None:
                outcomes = await asyncio.gather(
                    *(asyncio.to_thread(self.bind_one, r) for r in requests)
                )
            else:  # nobody was bound: every member fails (nothing to delete)
                skipped = BindOutcome(f"not bound: {refused.error}", "NotTried")
                outcomes = [o if o.error else skipped for o in outcomes]
            answers = self.finish_gang(ticket.gang, requests, outcomes)
            for done, answer in zip(requests, answers, strict=True):
                self._answer(done.uid, answer)
        else:
            deadline = self.barrier.deadline(ticket.gang) or self._clock()
            try:
                await asyncio.wait_for(asyncio.shield(future), max(deadline - self._clock(), 0))
            except TimeoutError:
                # The loop's timer may fire a hair before the clock reaches the deadline:
                # expire as of the deadline waited for, or this call is never answered.
                for late, answer in self.expire(max(self._clock(), deadline)):
                    self._answer(late.uid, answer)
                if not future.done():  # its room went with its plan: nothing else answers it
                    why = (
                        f"gang {ticket.gang}: its plan was released while this member waited at "
                        "the bind barrier; it is planned again"
                    )
                    self._answer(uid, BindOutcome(why, "PlanReleased"))
        return await future

    async def _dry_run(self, requests: Sequence[BindRequest]) -> list[BindOutcome]:
        """Ask the API server about every member's bind before binding any (real clusters
        where admission may see Bindings): a refusal that holds for the dry run too (a webhook,
        a policy) then rolls the gang back with no member bound, instead of binding some and
        deleting them."""
        wanted = self._dry_run_wanted is None or self._dry_run_wanted()
        if not (self._gateway.blocking and wanted):
            return [BindOutcome() for _ in requests]
        checks = (
            asyncio.to_thread(self._binder.check, r.namespace, r.name, r.uid, r.node)
            for r in requests
        )
        return list(await asyncio.gather(*checks))

    def _answer(self, uid: str, outcome: BindOutcome) -> None:
        future = self._futures.pop(uid, None)
        if future is not None and not future.done():
            future.set_result(outcome)
