"""A model of kube-scheduler's scheduling queue and loop, in simulated time.

Modelled after ``pkg/scheduler/internal/queue/scheduling_queue.go`` and ``schedule_one.go``:

* **One pod at a time.** The loop pops the head of activeQ, runs one scheduling attempt (the
  policy's filter and score) and is busy for ``attempt_cost`` seconds before the next pop.
  Binding runs asynchronously: a chosen pod is handed to the policy's ``bind`` and the loop
  moves on at once (kube-scheduler's binding goroutine).
* **activeQ** is ordered by priority, then by the pod's queue timestamp (PrioritySort). The
  timestamp is when the pod was added to the queue and is refreshed each time a failed
  attempt puts it back, as kube-scheduler does; for a new pod it is its creation time.
* **Backoff.** Each pop counts an attempt; a pod's backoff is ``initial_backoff`` doubled per
  earlier attempt, capped at ``max_backoff`` (``podInitialBackoffSeconds`` /
  ``podMaxBackoffSeconds``), counted from its queue timestamp. backoffQ is flushed into activeQ
  every ``backoff_flush`` seconds (1 s in kube-scheduler; 0 flushes at each exact expiry).
* **unschedulableQ.** A rejected pod goes there, unless a move request (cluster event) came
  while it was being scheduled, in which case it goes straight to backoffQ
  (``moveRequestCycle``). Pods leave it on a cluster event: an assigned pod deleted (a job
  finished, a bind failed and kube-scheduler forgot its assumed pod) or a node added moves
  every unschedulable pod; an update of the pod itself (Muster's nudge annotation) moves that
  pod. A moved pod goes to backoffQ while still backing off, else to activeQ. Every
  ``unschedulable_flush`` seconds (30 s) pods unschedulable for longer than
  ``max_unschedulable`` (5 minutes) are moved too.
* Updates of a pod whose bind is in flight are ignored (kube-scheduler skips updates of
  assumed pods); updates of a pod already in activeQ or backoffQ leave it where it is.
* **Scheduling gates** (only for the experimental ``muster-gated`` policy): a gated pod is
  never attempted and no event moves it; the update that removes its gate puts it in activeQ
  with its original timestamp and no backoff, as it never failed.

Simplified or left out:

* An attempt is atomic at the instant it starts: its decision and the start of its bind happen
  together; ``attempt_cost`` only delays the next pop. Events cannot arrive mid-attempt, so
  ``moveRequestCycle`` only matters for binds that fail.
* Per-plugin event filtering (QueueingHints, ``podMatchesEvent``) is not modelled: a pod
  rejected by an extender has no rejecting plugin, so every event moves it, as the real
  scheduler does; pods rejected by kube-scheduler's own plugins might be moved by fewer events.
  Assigned-pod additions and updates only move pods with inter-pod affinity, so they are no
  events here.
* No preemption (PostFilter): generated jobs share one priority, so there are no victims, and
  Muster answers gang members with unresolvable nodes anyway. No nominated nodes, no
  ``percentageOfNodesToScore`` (every node is evaluated).
* Scores: the policy's own 0-10 scores decide, ties broken at random (``selectHost``);
  kube-scheduler's plugin scores are not added to Muster's (the shipped profile's weight
  makes Muster's ranking win, and gang members get one feasible node anyway).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from app.core.model.values import Pod
from app.sim.clock import SimClock


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """kube-scheduler's queue settings (defaults are kube-scheduler's) and the attempt cost."""

    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    attempt_cost: float = 0.002
    backoff_flush: float = 1.0
    unschedulable_flush: float = 30.0
    max_unschedulable: float = 300.0

    def __post_init__(self) -> None:
        if self.initial_backoff <= 0 or self.max_backoff < self.initial_backoff:
            raise ValueError("backoff: need 0 < initial backoff <= max backoff")
        if self.attempt_cost <= 0:
            raise ValueError("attempt cost must be positive")


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one scheduling attempt: a node, or why none."""

    node: str = ""
    reason: str = ""


class SchedulingPolicy(Protocol):
    """What kube-scheduler delegates: one attempt's filter/score, and the bind."""

    def schedule(self, pod: Pod) -> Decision:
        """Choose a node for ``pod`` (filter + score), or say why none fits."""

    def bind(self, pod: Pod, node: str, done: Callable[[str, str], None]) -> None:
        """Start binding ``pod`` to ``node``; call ``done(uid, error)`` when it finishes."""

    def gated(self, pod: Pod) -> bool:
        """Whether ``pod`` is created with a scheduling gate (that a later update removes)."""


@dataclass(slots=True)
class QueuedPod:
    """kube-scheduler's ``QueuedPodInfo``: where the pod is, its attempts and timestamp."""

    uid: str
    priority: int
    timestamp: float
    attempts: int = 0
    where: str = "active"  # active | backoff | unschedulable | binding | gated
    cycle: int = 0  # the scheduling cycle of its last pop
    ticket: int = 0  # invalidates stale heap entries


class SchedulingQueue:
    """activeQ, backoffQ and unschedulableQ with kube-scheduler's moves between them."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self._pods: dict[str, QueuedPod] = {}
        self._active: list[tuple[int, float, int, int, str]] = []
        self._backoff: list[tuple[float, int, int, str]] = []
        self._unschedulable: dict[str, QueuedPod] = {}
        self._seq = 0
        self.scheduling_cycle = 0
        self.move_request_cycle = -1

    # -- sizes ---------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """How many pods are in each place."""
        out = {"active": 0, "backoff": 0, "unschedulable": 0, "binding": 0, "gated": 0}
        for qp in self._pods.values():
            out[qp.where] = out.get(qp.where, 0) + 1
        return out

    def has_active(self) -> bool:
        """Whether a pod is waiting in activeQ."""
        self._drop_stale_active()
        return bool(self._active)

    def get(self, uid: str) -> QueuedPod | None:
        """The queued pod ``uid``, if tracked."""
        return self._pods.get(uid)

    # -- backoff ---------------------------------------------------------------------------

    def backoff_duration(self, attempts: int) -> float:
        """``initial`` doubled for every attempt after the first, capped at ``max``."""
        duration = self.config.initial_backoff
        for _ in range(1, attempts):
            duration *= 2
            if duration > self.config.max_backoff:
                return self.config.max_backoff
        return duration

    def backoff_expiry(self, qp: QueuedPod) -> float:
        """When ``qp``'s backoff completes."""
        return qp.timestamp + self.backoff_duration(qp.attempts)

    # -- moves -----------------------------------------------------------------------------

    def add(self, uid: str, priority: int, now: float, *, gated: bool = False) -> None:
        """A new unscheduled pod: straight into activeQ, unless it is gated."""
        qp = self._pods[uid] = QueuedPod(uid, priority, now)
        if gated:
            qp.where = "gated"
        else:
            self._push_active(qp)

    def pop(self) -> QueuedPod | None:
        """The head of activeQ (counts an attempt and a scheduling cycle)."""
        self._drop_stale_active()
        if not self._active:
            return None
        *_, uid = heapq.heappop(self._active)
        qp = self._pods[uid]
        qp.attempts += 1
        self.scheduling_cycle += 1
        qp.cycle = self.scheduling_cycle
        qp.where = "binding"  # in flight until it is requeued or its bind finishes
        qp.ticket += 1
        return qp

    def requeue_failed(self, qp: QueuedPod, now: float) -> str:
        """A failed attempt or bind puts the pod back; returns where it went."""
        if self._pods.get(qp.uid) is not qp:
            return ""  # deleted meanwhile
        qp.timestamp = now
        if self.move_request_cycle >= qp.cycle:
            self._push_backoff(qp)
        else:
            qp.where = "unschedulable"
            self._unschedulable[qp.uid] = qp
        return qp.where

    def move_all(self, now: float) -> int:
        """A cluster event: every unschedulable pod to backoffQ or activeQ; returns how many."""
        moved = list(self._unschedulable.values())
        self._unschedulable.clear()
        for qp in moved:
            self._move(qp, now)
        self.move_request_cycle = self.scheduling_cycle
        return len(moved)

    def update(self, uid: str, now: float) -> bool:
        """The pod itself changed: an unschedulable pod moves, a gated one is ungated (the only
        update a gated pod gets here); returns whether it moved."""
        gated = self._pods.get(uid)
        if gated is not None and gated.where == "gated":
            self._push_active(gated)
            return True
        qp = self._unschedulable.pop(uid, None)
        if qp is None:
            return False
        self._move(qp, now)
        return True

    def flush_backoff(self, now: float) -> int:
        """Move every pod whose backoff has completed into activeQ."""
        moved = 0
        while self._backoff:
            expiry, _, ticket, uid = self._backoff[0]
            qp = self._pods.get(uid)
            if qp is None or qp.ticket != ticket or qp.where != "backoff":
                heapq.heappop(self._backoff)
                continue
            if expiry > now:
                break
            heapq.heappop(self._backoff)
            self._push_active(qp)
            moved += 1
        return moved

    def next_backoff_expiry(self) -> float | None:
        """The earliest backoff expiry in backoffQ (stale entries included; a hint only)."""
        return self._backoff[0][0] if self._backoff else None

    def flush_unschedulable(self, now: float) -> int:
        """Move pods unschedulable for longer than ``max_unschedulable``."""
        limit = self.config.max_unschedulable
        late = [qp for qp in self._unschedulable.values() if now - qp.timestamp > limit]
        for qp in late:
            del self._unschedulable[qp.uid]
            self._move(qp, now)
        return len(late)

    def remove(self, uid: str) -> QueuedPod | None:
        """Forget the pod (deleted, or bound for good)."""
        qp = self._pods.pop(uid, None)
        if qp is not None:
            qp.ticket += 1
            self._unschedulable.pop(uid, None)
        return qp

    # -- internals -------------------------------------------------------------------------

    def _move(self, qp: QueuedPod, now: float) -> None:
        if self.backoff_expiry(qp) > now:
            self._push_backoff(qp)
        else:
            self._push_active(qp)

    def _push_active(self, qp: QueuedPod) -> None:
        qp.ticket += 1
        qp.where = "active"
        self._seq += 1
        heapq.heappush(self._active, (-qp.priority, qp.timestamp, self._seq, qp.ticket, qp.uid))

    def _push_backoff(self, qp: QueuedPod) -> None:
        qp.ticket += 1
        qp.where = "backoff"
        self._seq += 1
        heapq.heappush(self._backoff, (self.backoff_expiry(qp), self._seq, qp.ticket, qp.uid))

    def _drop_stale_active(self) -> None:
        active = self._active
        while active:
            *_, ticket, uid = active[0]
            qp = self._pods.get(uid)
            if qp is not None and qp.ticket == ticket and qp.where == "active":
                return
            heapq.heappop(active)


class KubeScheduler:
    """The scheduling loop over a ``SchedulingQueue``, fed by watch events.

    ``pods(uid)`` reads the current pod (the scheduler's informer view). The engine reports
    cluster events through ``pod_added`` / ``pod_updated`` / ``pod_deleted`` / ``node_added``.
    """

    def __init__(
        self,
        clock: SimClock,
        policy: SchedulingPolicy,
        pods: Callable[[str], Pod | None],
        config: SchedulerConfig | None = None,
    ) -> None:
        self.clock = clock
        self.policy = policy
        self.config = config or SchedulerConfig()
        self.queue = SchedulingQueue(self.config)
        self._pods = pods
        self._busy = False
        self.attempts = 0
        self.bind_failures = 0
        self.attempt_log: list[tuple[float, str, str]] | None = None  # (time, uid, node or "")
        self._backoff_flush_at: float | None = None
        if self.config.backoff_flush > 0:
            clock.after(self.config.backoff_flush, self._periodic_backoff_flush)
        clock.after(self.config.unschedulable_flush, self._periodic_unschedulable_flush)

    # -- watch events ----------------------------------------------------------------------

    def pod_added(self, pod: Pod) -> None:
        """A new unscheduled pod."""
        self.queue.add(pod.uid, pod.priority, self.clock.now, gated=self.policy.gated(pod))
        self._kick()

    def pod_updated(self, uid: str) -> None:
        """The pod was updated (e.g. annotated): an unschedulable pod is retried."""
        if self.queue.update(uid, self.clock.now):
            self._after_move()

    def pod_deleted(self, uid: str, *, assigned: bool) -> None:
        """The pod is gone; an assigned pod's deletion frees room, so everything is retried."""
        self.queue.remove(uid)
        if assigned:
            self.cluster_event()

    def node_added(self) -> None:
        """A node joined: everything unschedulable is retried."""
        self.cluster_event()

    def cluster_event(self) -> None:
        """``MoveAllToActiveOrBackoffQueue``."""
        self.queue.move_all(self.clock.now)
        self._after_move()

    # -- the loop --------------------------------------------------------------------------

    def _kick(self) -> None:
        if not self._busy and self.queue.has_active():
            self._busy = True
            self.clock.after(0.0, self._attempt)

    def _attempt(self) -> None:
        qp = self.queue.pop()
        if qp is None:
            self._busy = False
            return
        pod = self._pods(qp.uid)
        if pod is None or pod.node_name:
            self.queue.remove(qp.uid)
            self.clock.after(0.0, self._attempt)
            return
        self.attempts += 1
        decision = self.policy.schedule(pod)
        if self.attempt_log is not None:
            self.attempt_log.append((self.clock.now, qp.uid, decision.node))
        if decision.node:
            self.policy.bind(pod, decision.node, self._bind_done)
        else:
            self.queue.requeue_failed(qp, self.clock.now)
            self._after_move()
        self.clock.after(self.config.attempt_cost, self._attempt)

    def _bind_done(self, uid: str, error: str) -> None:
        if not error:
            self.queue.remove(uid)
            return
        # kube-scheduler forgets the assumed pod and treats that as an assigned-pod deletion.
        self.bind_failures += 1
        self.queue.move_all(self.clock.now)
        qp = self.queue.get(uid)
        if qp is not None:
            self.queue.requeue_failed(qp, self.clock.now)
        self._after_move()

    def _after_move(self) -> None:
        if self.config.backoff_flush <= 0:
            self._schedule_exact_flush()
        self._kick()

    # -- timers ----------------------------------------------------------------------------

    def _periodic_backoff_flush(self) -> None:
        if self.queue.flush_backoff(self.clock.now):
            self._kick()
        self.clock.after(self.config.backoff_flush, self._periodic_backoff_flush)

    def _schedule_exact_flush(self) -> None:
        expiry = self.queue.next_backoff_expiry()
        if expiry is None or (
            self._backoff_flush_at is not None and self._backoff_flush_at <= expiry
        ):
            return
        self._backoff_flush_at = expiry
        self.clock.at(expiry, self._exact_flush)

    def _exact_flush(self) -> None:
        self._backoff_flush_at = None
        if self.queue.flush_backoff(self.clock.now):
            self._kick()
        self._schedule_exact_flush()

    def _periodic_unschedulable_flush(self) -> None:
        if self.queue.flush_unschedulable(self.clock.now):
            self._after_move()
        self.clock.after(self.config.unschedulable_flush, self._periodic_unschedulable_flush)
