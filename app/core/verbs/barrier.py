"""The bind barrier's bookkeeping, as a pure state machine (no I/O, no asyncio).

Members of a planned gang *arrive* at bind one by one. The room of a gang opens (everything
in it is released for binding together) once every core member of the plan has arrived or
already holds its node. Waiting bind calls are bounded: when a room's deadline passes, the
calls waiting in it *expire* (the caller answers them with an error so kube-scheduler's request
does not time out), but the members stay *parked* in the room, still planned. Members that
arrive later therefore complete the gang instead of starting over, so two halves of a gang
that reach bind at different times cannot keep failing each other. Parked members are bound
together with the rest when the room opens. The server drives this with real time
(``app.core.verbs.gangbind``); the simulator drives it with simulated time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from app.core.cycle.planner import Plan

T = TypeVar("T")


@dataclass(slots=True)
class Room(Generic[T]):
    """One gang at the barrier: calls ``waiting`` until ``deadline`` and ``parked`` members
    whose calls already expired."""

    gang: str
    deadline: float
    waiting: dict[str, T] = field(default_factory=dict)
    parked: dict[str, T] = field(default_factory=dict)

    @property
    def arrivals(self) -> dict[str, T]:
        """Every member that reached bind, waiting or parked."""
        return {**self.parked, **self.waiting}


class Barrier(Generic[T]):
    """Rooms per gang. ``T`` is whatever the caller needs to finish a bind later."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._rooms: dict[str, Room[T]] = {}

    def arrive(
        self, plan: Plan, uid: str, item: T, now: float, holds_node: Callable[[str], bool]
    ) -> list[T] | None:
        """Record member ``uid``; return every item (waiting and parked) if the gang may bind.

        ``holds_node(uid)`` tells whether a member is already bound (it need not arrive).
        A member arriving again replaces its earlier (waiting or parked) item.
        """
        room = self._rooms.get(plan.gang)
        if room is None:
            room = self._rooms[plan.gang] = Room(plan.gang, now + self.timeout)
        elif not room.waiting:
            room.deadline = now + self.timeout  # the first call waiting since the last expiry
        room.parked.pop(uid, None)
        room.waiting[uid] = item
        arrived = room.arrivals
        if all(m in arrived or holds_node(m) for m in plan.core):
            del self._rooms[plan.gang]
            return list(arrived.values())
        return None

    def deadline(self, gang: str) -> float | None:
        """When the calls waiting in the gang's room expire, if any wait."""
        room = self._rooms.get(gang)
        return room.deadline if room and room.waiting else None

    def expire(self, now: float) -> list[tuple[str, list[T]]]:
        """``(gang, expired items)`` for every room whose waiting calls ran out of time; those
        members stay parked."""
        out = []
        for room in self._rooms.values():
            if room.waiting and room.deadline <= now:
                items = list(room.waiting.values())
                room.parked.update(room.waiting)
                room.waiting.clear()
                out.append((room.gang, items))
        return out

    def take(self, gang: str) -> Room[T] | None:
        """Remove and return a gang's room (its plan is gone)."""
        return self._rooms.pop(gang, None)

    def gangs(self) -> list[str]:
        """Gangs with a room."""
        return list(self._rooms)

    def waiting(self) -> dict[str, int]:
        """Gang -> members that reached bind (waiting or parked)."""
        return {gang: len(room.arrivals) for gang, room in self._rooms.items()}
