"""The decision journal: a bounded record of what the scheduler decided, newest last.

The planner, the gang binder and the planner loop write an ``Entry`` at the moment a decision
takes effect: a plan made, a plan expired or released, room made by evicting whole units
(preemption or reclaim, with the GPU-seconds of running work each victim loses), a gang bind
rolled back, a bind barrier that ran out, a gang started. Each entry gets a sequence number
that only grows (a reader asks for what came after the last one it saw) and the wall-clock
time. The ring keeps the last ``capacity`` entries; counters by kind, victims and GPU-seconds
lost are cumulative since start, for metrics.

One journal is built by the composition root (``app.wiring``) and handed to whoever writes
it; it is thread-safe (the planner loop and the server's event loop both write).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum


class Kind(StrEnum):
    """Every kind of entry, in the order a gang usually meets them (the value is what
    ``/debug/events`` and the metrics show)."""

    PLAN = "plan"  # a gang got a plan: member -> node
    PREEMPTION = "preemption"  # lower-priority units evicted to make room for a gang
    RECLAIM = "reclaim"  # a queue below its guarantee took back borrowed room
    BARRIER_TIMEOUT = "barrier-timeout"  # bind calls waited for the rest and ran out
    ROLLBACK = "rollback"  # a bind failed after others succeeded: bound members deleted
    GANG_STARTED = "gang-started"  # every core member bound
    PLAN_EXPIRED = "plan-expired"  # the gang did not start within its plan's lifetime
    PLAN_RELEASED = "plan-released"  # a plan dropped for another reason (member deleted ...)


KINDS: tuple[Kind, ...] = tuple(Kind)
#: Kinds that evict running work.
EVICTING: tuple[Kind, ...] = (Kind.PREEMPTION, Kind.RECLAIM)
DEFAULT_CAPACITY = 2048


@dataclass(frozen=True, slots=True)
class Victim:
    """One unit of running work evicted whole: ``key`` names its gang (or ``pod:ns/name``);
    ``gpu_seconds`` is the GPU time it had run, lost by the eviction."""

    key: str
    queue: str | None
    pods: int
    gpus: float
    gpu_seconds: float


@dataclass(frozen=True, slots=True)
class Entry:
    """One decision. ``seq`` grows by one per entry; ``time`` is wall-clock seconds."""

    seq: int
    time: float
    kind: Kind
    gang: str
    queue: str | None = None
    message: str = ""
    nodes: tuple[str, ...] = ()
    victims: tuple[Victim, ...] = ()

    @property
    def gpu_seconds_lost(self) -> float:
        """GPU-seconds of work the victims lost (0 for entries that evict nothing)."""
        return sum(v.gpu_seconds for v in self.victims)


@dataclass(frozen=True, slots=True)
class Page:
    """What ``Journal.read`` returns: ``entries`` after the asked sequence number, oldest
    first; ``latest`` is the newest sequence number written (0: none yet); ``missed`` counts
    entries after the asked one that the ring no longer holds."""

    entries: tuple[Entry, ...]
    latest: int
    missed: int


@dataclass(frozen=True, slots=True)
class Totals:
    """Cumulative counters since start: entries by kind, and for the evicting kinds the
    units evicted and GPU-seconds lost."""

    by_kind: dict[Kind, int]
    victims: dict[Kind, int]
    gpu_seconds_lost: dict[Kind, float]


@dataclass(slots=True)
class _Counts:
    by_kind: dict[Kind, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    victims: dict[Kind, int] = field(default_factory=lambda: dict.fromkeys(EVICTING, 0))
    lost: dict[Kind, float] = field(default_factory=lambda: dict.fromkeys(EVICTING, 0.0))


class Journal:
    """The ring of recent decisions plus cumulative counters (see the module docstring)."""

    def __init__(
        self, capacity: int = DEFAULT_CAPACITY, *, wall: Callable[[], float] = time.time
    ) -> None:
        if capacity < 1:
            raise ValueError("a journal holds at least one entry")
        self.capacity = capacity
        self._wall = wall
        self._lock = threading.Lock()
        self._ring: deque[Entry] = deque(maxlen=capacity)
        self._seq = 0
        self._counts = _Counts()

    def record(
        self,
        kind: Kind,
        gang: str,
        *,
        queue: str | None = None,
        message: str = "",
        nodes: Sequence[str] = (),
        victims: Sequence[Victim] = (),
    ) -> Entry:
        """Append one decision of ``kind`` and count it."""
        if kind not in KINDS:
            raise ValueError(f"unknown journal kind {kind!r}; one of {', '.join(KINDS)}")
        with self._lock:
            self._seq += 1
            entry = Entry(
                self._seq,
                self._wall(),
                Kind(kind),
                gang,
                queue,
                message,
                tuple(nodes),
                tuple(victims),
            )
            self._ring.append(entry)
            self._counts.by_kind[kind] += 1
            if kind in EVICTING:
                self._counts.victims[kind] += len(entry.victims)
                self._counts.lost[kind] += entry.gpu_seconds_lost
            return entry

    def read(self, since: int | None = None, limit: int = 100) -> Page:
        """Up to ``limit`` entries with ``seq > since``, oldest first; without ``since``, the
        newest ``limit`` entries."""
        with self._lock:
            entries = list(self._ring)
            latest = self._seq
        if since is None:
            chosen = entries[-limit:] if limit else []
            return Page(tuple(chosen), latest, 0)
        seqs = [e.seq for e in entries]
        start = bisect.bisect_right(seqs, since)
        oldest = seqs[0] if seqs else latest + 1
        missed = max(min(oldest - 1, latest) - since, 0)
        return Page(tuple(entries[start : start + limit]), latest, missed)

    def totals(self) -> Totals:
        """The cumulative counters (a copy)."""
        with self._lock:
            c = self._counts
            return Totals(dict(c.by_kind), dict(c.victims), dict(c.lost))

    @property
    def latest(self) -> int:
        """The newest sequence number written (0: none yet)."""
        with self._lock:
            return self._seq
