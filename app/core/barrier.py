"""The bind barrier's bookkeeping, as a pure state machine (no I/O, no asyncio).

Members of a planned gang *arrive* at bind one by one. The room of a gang opens (everything
in it is released for binding together) once every core member of the plan has arrived or
already holds its node. A room that stays shut past its deadline *expires*: every member in it
must be answered with an error and the plan released. The server drives this with real time
(``app.core.gangbind``); the simulator drives it with simulated time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from app.core.planner import Plan

T = TypeVar("T")


@dataclass(slots=True)
class Room(Generic[T]):
    """Members of one gang waiting to bind; ``deadline`` counts from the first arrival."""

    gang: str
    deadline: float
    arrivals: dict[str, T] = field(default_factory=dict)


class Barrier(Generic[T]):
    """Waiting rooms per gang. ``T`` is whatever the caller needs to finish a bind later."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._rooms: dict[str, Room[T]] = {}

    def arrive(
        self, plan: Plan, uid: str, item: T, now: float, holds_node: Callable[[str], bool]
    ) -> list[T] | None:
        """Record member ``uid``; return every waiting item if the gang may bind now.

        ``holds_node(uid)`` tells whether a member is already bound (it need not arrive).
        A member arriving twice replaces its earlier item.
        """
        room = self._rooms.get(plan.gang)
        if room is None:
            room = self._rooms[plan.gang] = Room(plan.gang, now + self.timeout)
        room.arrivals[uid] = item
        if all(m in room.arrivals or holds_node(m) for m in plan.core):
            del self._rooms[plan.gang]
            return list(room.arrivals.values())
        return None

    def deadline(self, gang: str) -> float | None:
        """When the gang's room expires, if it is waiting."""
        room = self._rooms.get(gang)
        return room.deadline if room else None

    def expire(self, now: float) -> list[Room[T]]:
        """Remove and return every room whose deadline has passed."""
        late = [room for room in self._rooms.values() if room.deadline <= now]
        for room in late:
            del self._rooms[room.gang]
        return late

    def take(self, gang: str) -> Room[T] | None:
        """Remove and return a gang's room (to fail it early)."""
        return self._rooms.pop(gang, None)

    def waiting(self) -> dict[str, int]:
        """Gang -> members waiting now."""
        return {gang: len(room.arrivals) for gang, room in self._rooms.items()}
