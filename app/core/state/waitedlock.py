"""A re-entrant lock that knows whether a thread waits for it (the cache's lock)."""

from __future__ import annotations

import threading
import time


class WaitedLock:
    """A re-entrant lock that knows whether a thread waits for it (``contended``): a long
    holder gives it up between steps anyway, but only steps aside for a waiter then.

    Releasing it for good while another thread waits also steps aside (``time.sleep(0)``):
    a thread that takes and gives it back in a tight loop (the watch applying a burst of
    events, plans released one after another) would otherwise take it again before the
    waiter (a filter call) is even scheduled, and keep it waiting for the whole loop.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._waiting: set[int] = set()  # thread idents (set.add/discard are atomic)

    @property
    def contended(self) -> bool:
        """Whether some thread is blocked waiting for the lock now."""
        return bool(self._waiting)

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """``RLock.acquire``."""
        if self._lock.acquire(False):
            return True
        if not blocking:
            return False
        me = threading.get_ident()
        self._waiting.add(me)
        try:
            return self._lock.acquire(True, timeout)
        finally:
            self._waiting.discard(me)

    def release(self) -> None:
        """``RLock.release``; hands the lock over to a waiting thread (see the class)."""
        self._lock.release()
        if self._waiting and not self._lock._is_owned():  # type: ignore[attr-defined]
            time.sleep(0)

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
