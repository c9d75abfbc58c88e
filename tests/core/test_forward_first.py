"""``forward._first`` (the first count a monotone test allows, galloping up from the low end)
gives what a plain bisection gives, for random thresholds and ranges, and probes the low end
first; ``_first_near`` (searching outwards from a guess) gives it too, whatever the guess,
and probes twice when the guess is the count."""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable, Iterator

from app.core.insight.forward import _first, _first_near


def _cases(rng: random.Random, count: int) -> Iterator[tuple[int, int, int, Callable[[int], bool]]]:
    """Random ranges ``[low, high)`` and thresholds, each with its monotone test (which
    fails the test if probed outside the range)."""
    for _ in range(count):
        high = rng.randrange(0, 200)
        low = rng.randrange(0, high + 1)
        threshold = rng.choice([low, low + 1, rng.randrange(0, high + 2), high, high + 5])

        def holds(k: int, low: int = low, high: int = high, threshold: int = threshold) -> bool:
            assert low <= k < high, (low, k, high)  # never probes outside the range
            return k >= threshold

        yield low, high, threshold, holds


def test_first_matches_bisection_on_random_thresholds() -> None:
    for low, high, threshold, holds in _cases(random.Random(13), 3000):
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


def test_first_near_matches_bisection_whatever_the_guess() -> None:
    rng = random.Random(17)
    for low, high, threshold, holds in _cases(rng, 5000):
        guess = rng.choice([None, threshold, threshold - 1, threshold + 1, low, high,
                            rng.randrange(-5, high + 5)])  # fmt: skip
        fresh = bisect.bisect_left(range(high), True, lo=low, key=holds)
        assert _first_near(holds, low, high, guess) == fresh, (low, high, threshold, guess)


def test_first_near_probes_twice_when_the_guess_is_the_count() -> None:
    probes: list[int] = []

    def holds(k: int) -> bool:
        probes.append(k)
        return k >= 145

    assert _first_near(holds, 0, 8000, 145) == 145
    assert probes == [145, 144]
