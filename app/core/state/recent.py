"""Bounded memories that keep the most recent keys and forget the oldest past a limit.

``RecentMap`` is the one place the project keeps "at most N, oldest dropped first" entries:
the cache's deleted pods and nodes, the GPU policy's observed pods and the API client's owner
lookups (``app.k8s.owners.TTLCache``). Neither class locks: their owners hold their own locks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class RecentMap(Generic[K, V]):
    """A map of at most ``limit`` entries; storing past the limit forgets the oldest.

    An entry counts as recent from when it is stored or ``touch``-ed (least recently used
    order when the owner touches on every read; first in, first out when it never does).
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"RecentMap limit must be at least 1, got {limit}")
        self.limit = limit
        self._entries: OrderedDict[K, V] = OrderedDict()

    def put(self, key: K, value: V) -> None:
        """Store ``key`` as the newest entry, forgetting the oldest past the limit."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        if len(self._entries) > self.limit:
            self._entries.popitem(last=False)

    def get(self, key: K) -> V | None:
        """The value stored for ``key``, or ``None``; does not make it recent."""
        return self._entries.get(key)

    def touch(self, key: K) -> None:
        """Make ``key`` (which must be stored) the newest entry."""
        self._entries.move_to_end(key)

    def discard(self, key: K) -> None:
        """Forget ``key`` if stored."""
        self._entries.pop(key, None)

    def clear(self) -> None:
        """Forget everything."""
        self._entries.clear()

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)


class RecentKeys(RecentMap[K, None]):
    """A set of at most ``limit`` keys; adding past the limit forgets the oldest added."""

    def add(self, key: K) -> bool:
        """Add ``key`` as the newest; returns whether it was not there before."""
        new = key not in self
        self.put(key, None)
        return new
