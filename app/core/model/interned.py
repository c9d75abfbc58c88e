"""One object per distinct value: equal values handed to an ``Interned`` come back as the very
same object, so later comparisons of them (``==`` on tuples, ``list.count``) stop at identity
instead of comparing fields. Pods of one gang mostly say the same: their gang specs, GPU asks
and member shapes are few distinct values among thousands of pods."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

H = TypeVar("H", bound=Hashable)


class Interned(Generic[H]):
    """Hands out one object per distinct value, keeping at most ``limit`` of them; past it, it
    starts over (what was handed out stays valid: only a later equal value no longer comes
    back as the object handed out before)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._kept: dict[H, H] = {}

    def __call__(self, value: H) -> H:
        """The object kept for ``value``'s value: the first one equal to it, else ``value``."""
        kept = self._kept
        found = kept.get(value)
        if found is not None:
            return found
        if len(kept) >= self.limit:
            kept.clear()
        return kept.setdefault(value, value)  # (another thread may have kept an equal one)

    def __len__(self) -> int:
        return len(self._kept)
