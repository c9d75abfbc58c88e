"""The planner's background loop: cycle when the cluster changes, and nudge planned members.

A pod kube-scheduler rejected waits in its unschedulable queue until something about the
cluster or the pod changes, then backs off. When a cycle plans a gang whose members were
rejected earlier, the loop annotates each of them (``muster.io/planned``) so kube-scheduler
retries them now instead of after a long backoff or the 5-minute flush. A member created
behind Muster's scheduling gate (``muster.io/gang``, Kubernetes 1.27+) has never been tried:
the loop removes the gate instead, and kube-scheduler takes the pod for the first time.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from app.core.cycle.planner import Eviction, Planner
from app.core.model.errors import GatewayError
from app.core.model.labels import GANG_GATE, PLAN_RECORD, PLANNED_NUDGE
from app.core.model.values import Pod
from app.core.state.gateway import Gateway
from app.core.state.journal import Journal, Victim
from app.core.state.queuefile import QueueFile

log = logging.getLogger("muster.planner")
T = TypeVar("T")
#: The Event reason for a waiting gang member's story (``category: summary (gang KEY)``).
WAITING_REASON = "GangWaiting"
#: The Event reason for a gang whose own keys and group object (PodGroup ...) disagree.
CONFLICT_REASON = "GangSourceConflict"
#: Parallel annotation patches per cycle (a gang's members are nudged together).
NUDGE_WORKERS = 8
#: Seconds a waiting member's story is held before its ``GangWaiting`` Event is created (see
#: ``PlannerLoop.tell``).
TELL_AFTER = 5.0


class PlannerLoop:
    """Runs ``planner.cycle()`` on cache changes (checked every ``poll`` s) and every
    ``interval`` s, then nudges newly planned members through the gateway; reloads the queue
    file (if any) every ``interval`` s."""

    def __init__(
        self,
        planner: Planner,
        gateway: Gateway,
        *,
        poll: float = 0.05,
        interval: float = 1.0,
        queues: QueueFile | None = None,
        news: Callable[[], list[tuple[Pod, str]]] | None = None,
        journal: Journal | None = None,
        wall: Callable[[], float] = time.time,
        active: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        tell_after: float = TELL_AFTER,
    ) -> None:
        """``journal`` (if any) records each preemption or reclaim carried out, with the
        GPU-seconds its victims had run (by ``wall``, epoch seconds). ``active`` says whether
        this replica may decide now (it leads); default: always. A waiting member's story
        becomes an Event ``tell_after`` seconds of ``clock`` after it was first told."""
        self._clock = clock
        self._tell_after = tell_after
        self._active = active
        self._planner = planner
        self._journal = journal
        self._wall = wall
        self._news = news
        self._queues = queues
        self._gateway = gateway
        self._poll = poll
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.nudges = 0
        self.evictions = 0
        self.records = 0
        self._pool: ThreadPoolExecutor | None = None
        self._told = threading.Condition()
        #: Stories not told yet, by pod uid: (pod, latest text, when first held).
        self._untold: dict[str, tuple[Pod, str, float]] = {}
        self._teller: threading.Thread | None = None
        self._forced_at = -math.inf  # when the last forced cycle ran (``poll_once``)

    @property
    def interval(self) -> float:
        """Seconds between forced cycles (and queue file reloads)."""
        return self._interval

    def start(self) -> None:
        """Start the loop thread."""
        self._thread = threading.Thread(target=self._run, name="muster-planner", daemon=True)
        self._planner.driven = True
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop and wait for its thread."""
        self._stop.set()
        self._planner.driven = False
        with self._told:
            self._told.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._teller is not None:
            self._teller.join(timeout)
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def run_once(self, *, force: bool = False) -> None:
        """One cycle, the evictions and the nudges it calls for (also used by tests)."""
        self._planner.cycle(force=force)
        self.record()
        self.evict()
        self.nudge()
        self.tell()
        self.report()

    def record(self) -> None:
        """Write each plan on its members (``muster.io/plan``) before anything is evicted for
        it, so that the next leader carries it on (``app.core.cycle.records``). Against a
        real API server the patches of one cycle go out in parallel (all done before this
        returns)."""
        self.records += self._each(self._record_one, self._planner.to_record())

    def _record_one(self, item: tuple[Pod, str]) -> bool:
        pod, text = item
        try:
            self._gateway.annotate_pod(pod.namespace, pod.name, {PLAN_RECORD: text})
        except GatewayError as exc:
            if exc.reason != "NotFound":
                self._planner.unrecorded(pod)
            log.info("could not record the plan on %s: %s", pod.key, exc)
            return False
        return True

    def evict(self) -> None:
        """Carry out the planner's evictions, whole units only.

        Every pod of every unit is first evicted as a dry run; if the API refuses any (a
        PodDisruptionBudget), nothing is evicted and the planner chooses other victims. Should
        a real eviction still be refused halfway through a gang, the rest of that gang is
        deleted: a partial gang would keep its GPUs and do no work.
        """
        taken = self._planner.take_evictions()
        for eviction in self._planner.recorded_first(taken):
            refused = self._dry_run(eviction)
            if refused is not None:
                self._planner.eviction_refused(eviction, *refused)
                continue
            self._record(eviction)
            for unit in eviction.units:
                for pod in unit.pods:
                    self._evict_pod(pod, unit.key, eviction)
            log.info("evicted %s: %s", ", ".join(u.key for u in eviction.units), eviction.why)

    def _record(self, eviction: Eviction) -> None:
        if self._journal is None:
            return
        now = self._wall()
        victims = [
            Victim(
                u.key,
                u.queue,
                len(u.pods),
                u.gpus / 1000,
                u.gpus / 1000 * max(now - u.started, 0.0),
            )
            for u in eviction.units
        ]
        self._journal.record(
            eviction.kind,
            eviction.preemptor,
            queue=eviction.queue,
            message=eviction.why,
            victims=victims,
        )

    def _dry_run(self, eviction: Eviction) -> tuple[str, str] | None:
        for unit in eviction.units:
            for pod in unit.pods:
                try:
                    self._gateway.evict(pod.namespace, pod.name, pod.uid, dry_run=True)
                except GatewayError as exc:
                    if exc.reason != "NotFound":
                        return unit.key, str(exc)
        return None

    def _evict_pod(self, pod: Pod, unit: str, eviction: Eviction) -> None:
        try:
            self._gateway.evict(pod.namespace, pod.name, pod.uid)
        except GatewayError as exc:
            if exc.reason == "NotFound":
                return
            log.warning("eviction of %s (%s) refused (%s); deleting it", pod.key, unit, exc)
            try:
                self._gateway.delete_pod(pod.namespace, pod.name, pod.uid)
            except GatewayError as again:
                log.error("could not delete %s either: %s", pod.key, again)
                return
        self.evictions += 1
        try:
            self._gateway.event(
                pod.namespace,
                pod.name,
                pod.uid,
                "Preempted",
                f"{eviction.why}; {unit} evicted whole",
                "Warning",
            )
        except GatewayError as exc:
            log.info("no Preempted event for %s: %s", pod.key, exc)

    def nudge(self) -> None:
        """Annotate planned members kube-scheduler has not retried since they were planned.

        Against a real API server the patches of one cycle go out in parallel: a gang's
        members then come back to kube-scheduler's queue together, and their binds meet at
        the barrier sooner.
        """
        self.nudges += self._each(self._nudge_one, self._planner.to_nudge())

    def _nudge_one(self, item: tuple[str, Pod]) -> bool:
        """Annotate the member, or remove Muster's scheduling gate from it (it has one where
        the webhook put it there); a failed ungating is tried again next cycle."""
        gang, pod = item
        try:
            if GANG_GATE in pod.gates:
                self._gateway.ungate(pod.namespace, pod.name, pod.uid, pod.gates, GANG_GATE)
            else:
                self._gateway.annotate_pod(
                    pod.namespace, pod.name, {PLANNED_NUDGE: f"{gang}@{time.time():.3f}"}
                )
        except GatewayError as exc:
            log.info("could not nudge %s: %s", pod.key, exc)
            if GANG_GATE in pod.gates and exc.reason != "NotFound":
                self._planner.renudge(gang, pod.uid)
            return False
        return True

    def _each(self, action: Callable[[T], bool], items: list[T]) -> int:
        """``action`` on every item (in parallel against a real API server, all done on
        return); how many succeeded."""
        if self._gateway.blocking and len(items) > 1:
            return sum(self._workers().map(action, items))
        return sum(action(item) for item in items)

    def _workers(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(NUDGE_WORKERS, thread_name_prefix="muster-nudge")
        return self._pool

    def tell(self) -> None:
        """Record a ``GangWaiting`` Event on each waiting member whose story changed, as filter
        last told kube-scheduler (``news``): it starts with the category and the summary.

        A story is held ``tell_after`` seconds first, then told in its latest words if the
        member still waits (no plan, no node). kube-scheduler's own ``FailedScheduling``
        Event already carries the story at once; the hold keeps hundreds of Events off the
        API server while a burst of gangs is being created and planned (in the shuffled
        sixty-gang benchmark, 256 of the first fill's 556 Events), and a member planned
        meanwhile gets none. Against a real API server the Events are created by a thread of
        their own, so they never hold up the next cycle and its nudges.
        """
        if self._news is None:
            return
        news = self._news()
        now = self._clock()
        with self._told:
            for pod, text in news:
                held = self._untold.get(pod.uid)
                self._untold[pod.uid] = (pod, text, now if held is None else held[2])
            if self._gateway.blocking:
                if self._untold:
                    self._told.notify()
                if self._teller is None:
                    self._teller = threading.Thread(
                        target=self._tell_loop, name="muster-events", daemon=True
                    )
                    self._teller.start()
                return
            due, _ = self._take_due(now)
        self._tell_all(due)

    def _take_due(self, now: float) -> tuple[list[tuple[Pod, str]], float | None]:
        """Remove and return the stories held long enough, and how long until the next one
        is (``None``: nothing held). Called with ``_told`` held."""
        due: list[tuple[Pod, str]] = []
        wait: float | None = None
        for uid, (pod, text, since) in list(self._untold.items()):
            left = since + self._tell_after - now
            if left <= 0:
                del self._untold[uid]
                due.append((pod, text))
            elif wait is None or left < wait:
                wait = left
        return due, wait

    def _tell_all(self, due: list[tuple[Pod, str]]) -> None:
        for pod, text in due:
            if self._planner.waiting(pod):
                self._tell_one(pod, text)

    def _tell_one(self, pod: Pod, text: str) -> None:
        try:
            self._gateway.event(pod.namespace, pod.name, pod.uid, WAITING_REASON, text, "Normal")
        except GatewayError as exc:
            log.info("no %s event for %s: %s", WAITING_REASON, pod.key, exc)

    def _tell_loop(self) -> None:
        while True:
            with self._told:
                while True:
                    if self._stop.is_set():
                        return
                    due, wait = self._take_due(self._clock())
                    if due:
                        break
                    self._told.wait(wait)
            self._tell_all(due)

    def report(self) -> None:
        """Record a ``GangSourceConflict`` Warning on each member and group object of a gang
        whose own keys and group object disagree (once per text while it lasts)."""
        for conflict in self._planner.take_conflicts():
            text = f"gang {conflict.gang}: {conflict.text}"
            for pod in conflict.pods:
                try:
                    self._gateway.event(
                        pod.namespace, pod.name, pod.uid, CONFLICT_REASON, text, "Warning"
                    )
                except GatewayError as exc:
                    log.info("no %s event for %s: %s", CONFLICT_REASON, pod.key, exc)
            for obj in conflict.objects:
                try:
                    self._gateway.object_event(obj, CONFLICT_REASON, text, "Warning")
                except GatewayError as exc:
                    log.info("no %s event for %s: %s", CONFLICT_REASON, obj.display, exc)

    def poll_once(self, now: float) -> None:
        """One poll at ``now`` (seconds on any steady clock): a cycle, forced (and the queue
        file reloaded) when the last forced one is ``interval`` old (``run_once``)."""
        force = now - self._forced_at >= self._interval
        if force and self._queues is not None:
            self._queues.refresh()
        self.run_once(force=force)
        if force:
            self._forced_at = now

    def _run(self) -> None:
        while not self._stop.wait(self._poll):
            if self._active is not None and not self._active():
                continue  # a follower decides nothing
            try:
                self.poll_once(time.monotonic())
            except Exception:  # the loop must survive anything one cycle does
                log.exception("planner cycle failed")
