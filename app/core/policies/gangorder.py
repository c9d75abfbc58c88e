"""Gang order within one queue: which waiting gang the planner tries next.

Queues take turns by fair share (``drf``); inside a queue, gangs go by priority, then by this
policy. Two policies:

* ``fifo``: oldest first (the first member's creation time), then by name.
* ``longest-first`` (the default): among gangs of equal priority, a gang that declares its
  runtime (``muster.io/expected-runtime``; the longest of its members) counts as created that
  much earlier, at most ``window`` seconds. Of gangs submitted close together the longest
  start first, so the short ones fill in at the end instead of a long one starting last and
  finishing alone (the classic longest-processing-time rule for the time to finish a batch).
  No gang is overtaken by one created more than ``window`` seconds after it. A gang that
  declares nothing counts as running ``default_runtime`` (the planner's ``--default-runtime``,
  as for reservations): with the defaults (3600 s against a 600 s window) it gets the whole
  credit, so gangs that declare nothing keep their age order among themselves and are never
  overtaken by a declared one, and a head of the line stays the head whatever arrives later.

Declaring a runtime thus never moves a gang ahead of work that declares none; it orders the
declared ones among themselves, and decides whether the work may backfill held room
(``actions.backfill``), where declaring too much loses the chance.
"""

from __future__ import annotations

from app.core.model.gang import Gang
from app.core.model.runtime import declared_runtimes

#: Default ``longest-first`` window: how much earlier a declared runtime may make a gang count.
DEFAULT_WINDOW = 600.0
#: The planner's default expected runtime of work that declares none (``--default-runtime``).
DEFAULT_RUNTIME = 3600.0


class Fifo:
    """A ``GangOrder``: higher priority first, then the oldest, then by name."""

    name = "fifo"

    def key(self, gang: Gang) -> tuple[float, float, str]:
        """``(-priority, created, key)``: the lowest goes first."""
        return (-gang.priority, gang.created, gang.key)


class LongestFirst:
    """A ``GangOrder``: higher priority first, then the oldest once each gang's declared runtime
    (capped at ``window`` seconds) is counted as extra age (see the module)."""

    name = "longest-first"

    def __init__(
        self, window: float = DEFAULT_WINDOW, default_runtime: float = DEFAULT_RUNTIME
    ) -> None:
        if window < 0 or default_runtime < 0:
            raise ValueError(
                f"longest-first window and default runtime must not be negative, got "
                f"{window} and {default_runtime}"
            )
        self.window = window
        self.default_runtime = default_runtime

    def key(self, gang: Gang) -> tuple[float, float, str]:
        """``(-priority, created - min(runtime, window), key)``: the lowest goes first."""
        credit = min(runtime(gang, self.default_runtime), self.window)
        return (-gang.priority, gang.created - credit, gang.key)


def runtime(gang: Gang, default: float) -> float:
    """How long ``gang`` is expected to run: its longest member's declared runtime, and
    ``default`` for a member that declares none."""
    # Each distinct declared runtime once (a gang's members mostly declare the same).
    return max((r or default for r in declared_runtimes(gang.members)), default=default)


GANG_ORDERS = ("longest-first", "fifo")


def gang_order(
    name: str, window: float = DEFAULT_WINDOW, default_runtime: float = DEFAULT_RUNTIME
) -> Fifo | LongestFirst:
    """The gang order called ``name`` (one of ``GANG_ORDERS``)."""
    if name == "fifo":
        return Fifo()
    if name == "longest-first":
        return LongestFirst(window, default_runtime)
    raise ValueError(f"unknown gang order {name!r}; choose one of {', '.join(GANG_ORDERS)}")
