"""The kube-scheduler queue model: backoff, the unschedulable queue and what moves pods."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from app.core.model.values import Pod, Resources
from app.sim.clock import SimClock
from app.sim.kubescheduler import Decision, KubeScheduler, SchedulerConfig, SchedulingQueue


def pod(name: str, priority: int = 0) -> Pod:
    return Pod(uid=name, namespace="sim", name=name, requests=Resources(pods=1000),
               priority=priority)  # fmt: skip


class Rejecting:
    """Rejects every pod; binds nothing."""

    def schedule(self, pod: Pod) -> Decision:
        return Decision(reason="no room")

    def bind(self, pod: Pod, node: str, done: Callable[[str, str], None]) -> None:
        raise AssertionError("nothing is ever chosen")

    def gated(self, pod: Pod) -> bool:
        return pod.name.startswith("gated")


def scheduler(config: SchedulerConfig, *pods: Pod) -> tuple[SimClock, KubeScheduler]:
    clock = SimClock()
    by_uid = {p.uid: p for p in pods}
    sched = KubeScheduler(clock, Rejecting(), by_uid.get, config)
    sched.attempt_log = []
    return clock, sched


def attempts(sched: KubeScheduler, uid: str) -> list[float]:
    assert sched.attempt_log is not None
    return [round(t, 6) for t, who, _ in sched.attempt_log if who == uid]


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in zip(times, times[1:], strict=False)]


def every(clock: SimClock, period: float, action: Callable[[], None]) -> None:
    def tick() -> None:
        action()
        clock.after(period, tick)

    clock.after(period, tick)


@pytest.mark.parametrize(
    ("initial", "maximum", "expected"),
    [(1.0, 10.0, [1, 2, 4, 8, 10, 10, 10]), (1.0, 2.0, [1, 2, 2, 2, 2, 2, 2])],
)
def test_rejected_pod_backs_off_doubling_up_to_the_cap(
    initial: float, maximum: float, expected: list[float]
) -> None:
    config = SchedulerConfig(initial_backoff=initial, max_backoff=maximum, backoff_flush=0)
    clock, sched = scheduler(config, p := pod("p"))
    sched.pod_added(p)
    every(clock, 0.25, sched.cluster_event)  # events keep coming: only backoff holds it back
    clock.run(lambda: len(attempts(sched, "p")) > len(expected), limit=200)
    assert gaps(attempts(sched, "p"))[: len(expected)] == expected


def test_backoff_queue_is_flushed_once_a_second() -> None:
    clock, sched = scheduler(SchedulerConfig(), p := pod("p"))
    clock.at(0.3, sched.pod_added, p)  # fails at 0.3; backoff done at 1.3; next flush at 2
    every(clock, 0.25, sched.cluster_event)
    clock.run(lambda: len(attempts(sched, "p")) >= 3, limit=60)
    assert attempts(sched, "p") == [0.3, 2.0, 4.0]


def test_without_events_a_rejected_pod_waits_for_the_unschedulable_flush() -> None:
    clock, sched = scheduler(SchedulerConfig(), p := pod("p"))
    sched.pod_added(p)
    clock.run(lambda: len(attempts(sched, "p")) >= 2, limit=1000)
    # unschedulable for longer than 5 minutes, noticed at the next 30 s leftover flush
    assert attempts(sched, "p") == [0.0, 330.0]


def test_an_update_of_the_pod_itself_moves_only_that_pod() -> None:
    clock, sched = scheduler(SchedulerConfig(), a := pod("a"), b := pod("b"))
    sched.pod_added(a)
    sched.pod_added(b)
    clock.at(5.0, sched.pod_updated, "a")  # Muster's nudge
    clock.run(lambda: False, limit=20)
    assert attempts(sched, "a") == [0.0, 5.0]
    assert attempts(sched, "b") == [0.002]


def test_an_update_does_not_cut_a_backoff_short() -> None:
    config = SchedulerConfig(backoff_flush=0)
    clock, sched = scheduler(config, p := pod("p"))
    sched.pod_added(p)
    clock.at(0.1, sched.pod_updated, "p")  # still backing off (1 s): to backoffQ
    clock.at(0.2, sched.pod_updated, "p")  # already in backoffQ: stays there
    clock.run(lambda: len(attempts(sched, "p")) >= 2, limit=20)
    assert attempts(sched, "p") == [0.0, 1.0]


def test_active_queue_orders_by_priority_then_queue_time() -> None:
    queue = SchedulingQueue(SchedulerConfig())
    queue.add("late-low", 0, now=2.0)
    queue.add("early-low", 0, now=1.0)
    queue.add("high", 10, now=3.0)
    order = []
    while (qp := queue.pop()) is not None:
        order.append(qp.uid)
    assert order == ["high", "early-low", "late-low"]


def test_a_failed_bind_retries_everything_and_backs_the_pod_off() -> None:
    queue = SchedulingQueue(SchedulerConfig())
    queue.add("waiting", 0, now=0.0)
    queue.add("binding", 0, now=0.0)
    waiting = queue.pop()
    binding = queue.pop()
    assert waiting is not None and binding is not None
    assert queue.requeue_failed(waiting, now=0.0) == "unschedulable"
    # the bind of the other pod fails: kube-scheduler forgets it (an assigned-pod deletion)
    assert queue.move_all(now=0.5) == 1
    assert queue.requeue_failed(binding, now=0.5) == "backoff"
    assert queue.get("waiting").where == "backoff"  # type: ignore[union-attr]


def test_a_gated_pod_waits_for_its_gate_to_go_and_then_goes_first() -> None:
    clock, sched = scheduler(SchedulerConfig(), g := pod("gated"), p := pod("p"))
    sched.pod_added(g)
    clock.at(0.5, sched.pod_added, p)
    every(clock, 0.25, sched.cluster_event)  # no event moves a gated pod
    clock.at(7.1, sched.pod_updated, "gated")  # the gate is removed
    clock.run(lambda: False, limit=8)
    assert attempts(sched, "gated") == [7.1]  # never failed: no backoff
    assert attempts(sched, "p")[:3] == [0.5, 2.0, 4.0]  # meanwhile the other backs off
