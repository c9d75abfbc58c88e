"""``forward._first`` (the first count a monotone test allows, galloping up from the low end)
gives what a plain bisection gives, for random thresholds and ranges, and probes the low end
first."""

from __future__ import annotations

import bisect
import random

from app.core.insight.forward import _first


def test_first_matches_bisection_on_random_thresholds() -> None:
    rng = random.Random(13)
    for _ in range(3000):
        high = rng.randrange(0, 200)
        low = rng.randrange(0, high + 1)
        threshold = rng.choice([low, low + 1, rng.randrange(0, high + 2), high, high + 5])

        def holds(k: int, low: int = low, high: int = high, threshold: int = threshold) -> bool:
            assert low <= k < high, (low, k, high)  # never probes outside the range
            return k >= threshold

        fresh = bisect.bisect_left(range(high), True, lo=low, key=holds)
        assert _first(holds, low, high) == fresh, (low, high, threshold)


def test_first_probes_once_when_the_low_end_holds() -> None:
    probes: list[int] = []

    def holds(k: int) -> bool:
        probes.append(k)
        return True

    assert _first(holds, 7, 8000) == 7
    assert probes == [7]


def test_first_with_an_empty_range_is_its_end() -> None:
    assert _first(lambda k: False, 5, 5) == 5
