"""Durations counted into fixed buckets, readable at any time (for a metrics scrape).

The planner observes how long each cycle took; the HTTP edge turns the counts into a
Prometheus histogram when it is scraped, so core never imports a metrics library.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence
from dataclasses import dataclass

#: Upper bounds (seconds) of the cycle-duration buckets; +Inf is implied.
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True, slots=True)
class Counts:
    """A copy of the counts: ``buckets`` pairs each upper bound with how many observations
    were at most that (cumulative, ``+Inf`` last, equal to ``count``)."""

    buckets: tuple[tuple[float, int], ...]
    count: int
    total: float


class Timings:
    """Thread-safe bucket counts of observed durations."""

    def __init__(self, bounds: Sequence[float] = CYCLE_BUCKETS) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError("bucket bounds must be increasing and not empty")
        self.bounds = tuple(float(b) for b in bounds)
        self._lock = threading.Lock()
        self._counts = [0] * (len(self.bounds) + 1)
        self._sum = 0.0

    def observe(self, seconds: float) -> None:
        """Count one duration."""
        i = bisect.bisect_left(self.bounds, seconds)
        with self._lock:
            self._counts[i] += 1
            self._sum += seconds

    def counts(self) -> Counts:
        """The cumulative counts now."""
        with self._lock:
            raw, total = list(self._counts), self._sum
        cumulative, running = [], 0
        for bound, n in zip((*self.bounds, float("inf")), raw, strict=True):
            running += n
            cumulative.append((bound, running))
        return Counts(tuple(cumulative), running, total)
