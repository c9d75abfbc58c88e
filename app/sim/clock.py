"""Simulated time: a clock that only moves when the next event runs.

Events are callables kept in a heap ordered by (time, insertion order), so two events at the
same instant run in the order they were scheduled and every run is deterministic. The clock
object itself is callable (``clock()`` is the current simulated time), so it can be injected
wherever Muster's core takes a ``clock``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(order=True, slots=True)
class Event:
    """A scheduled call; ``cancel()`` makes it a no-op."""

    time: float
    seq: int
    action: Callable[..., Any] | None = field(compare=False)
    args: tuple[Any, ...] = field(default=(), compare=False)

    def cancel(self) -> None:
        """Do not run this event."""
        self.action = None


class SimClock:
    """An event heap with a current time."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._heap: list[Event] = []
        self._seq = 0
        self.events_run = 0
        self._after_each: list[Callable[[], None]] = []

    def __call__(self) -> float:
        return self.now

    def at(self, time: float, action: Callable[..., Any], *args: Any) -> Event:
        """Run ``action(*args)`` at ``time`` (never earlier than now)."""
        self._seq += 1
        event = Event(max(time, self.now), self._seq, action, args)
        heapq.heappush(self._heap, event)
        return event

    def after(self, delay: float, action: Callable[..., Any], *args: Any) -> Event:
        """Run ``action(*args)`` ``delay`` seconds from now."""
        return self.at(self.now + delay, action, *args)

    def after_each(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` after every event (invariant checks in tests)."""
        self._after_each.append(hook)

    def run(self, until: Callable[[], bool], *, limit: float = float("inf")) -> None:
        """Run events in order until ``until()`` holds, none are left or time passes ``limit``."""
        heap = self._heap
        while heap and not until():
            event = heapq.heappop(heap)
            if event.action is None:
                continue
            if event.time > limit:
                heapq.heappush(heap, event)
                return
            self.now = event.time
            event.action(*event.args)
            self.events_run += 1
            for hook in self._after_each:
                hook()
