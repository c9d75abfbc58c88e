"""Per cache generation, which pods changed (so a memo can patch only their entries)."""

from __future__ import annotations

import bisect
import threading


class ChangeLog:
    """Per cache generation, the uids of the pods whose object, placement, reservation,
    assumed bind, bind time, gang or devices it changed, or ``None`` when that is not
    recorded (then anything may have changed). Holds the last ``size`` generations."""

    def __init__(self, size: int = 4096) -> None:
        self._lock = threading.Lock()
        self._size = size
        self._generations: list[int] = []
        self._uids: list[tuple[str, ...] | None] = []

    def record(self, generation: int, uids: tuple[str, ...] | None) -> None:
        """Generation ``generation`` (above every one recorded) changed ``uids``."""
        with self._lock:
            if len(self._generations) >= 2 * self._size:
                del self._generations[: self._size], self._uids[: self._size]
            self._generations.append(generation)
            self._uids.append(uids)

    def since(self, old: int, new: int) -> frozenset[str] | None:
        """The uids changed by generations ``old + 1`` to ``new`` (None: not known)."""
        with self._lock:
            start = bisect.bisect_right(self._generations, old)
            stop = bisect.bisect_right(self._generations, new)
            covered = self._generations[start:stop]
            if len(covered) != new - old or (covered and covered[0] != old + 1):
                return None  # some generations are no longer (or never were) recorded
            out: set[str] = set()
            for uids in self._uids[start:stop]:
                if uids is None:
                    return None
                out.update(uids)
            return frozenset(out)
