"""Expected runtimes: how long a pod is expected to run (``muster.io/expected-runtime``).

Values are seconds (``"5400"``) or durations made of hours, minutes and seconds (``"1h30m"``,
``"45m"``, ``"90s"``). Used to predict when running work frees its nodes (reservations) and
whether waiting work would finish before a reservation starts (backfill).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from app.core.model import labels
from app.core.model.podfacts import PodFact
from app.core.model.values import Pod

EXPECTED_RUNTIME = "muster.io/expected-runtime"
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


@lru_cache(maxsize=4096)  # a handful of distinct values, read for every running pod
def parse_duration(text: str) -> float | None:
    """Seconds in ``text``, or ``None`` if it is not a positive duration."""
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        match = _DURATION.match(text)
        if not match or not any(match.groups()):
            return None
        h, m, s = (float(g) if g else 0.0 for g in match.groups())
        value = h * 3600 + m * 60 + s
    return value if value > 0 else None


def declared_runtime(pod: Pod) -> float | None:
    """The pod's declared expected runtime in seconds, if it declares a valid one."""
    return _DECLARED.of(pod)


def declared_runtimes(pods: Iterable[Pod]) -> set[float | None]:
    """``declared_runtime`` of each of ``pods``, each distinct value once."""
    return set(_DECLARED.of_each(pods))


def _declared_runtime(pod: Pod) -> float | None:
    raw = labels.lookup(EXPECTED_RUNTIME, pod.labels, pod.annotations)
    return parse_duration(raw) if raw else None


_DECLARED: PodFact[float | None] = PodFact(_declared_runtime, ahead=True)


def expected_end(pod: Pod, started: float, default_runtime: float) -> float:
    """When a pod that started at ``started`` is expected to finish."""
    return started + (declared_runtime(pod) or default_runtime)
