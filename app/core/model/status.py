"""The one result type of Muster's decisions: a ``Status`` with a code and a reason.

The code tells the caller how to react, the reason tells a person why:

==================  ===========================================================================
code                the caller
==================  ===========================================================================
``SUCCESS``         goes ahead.
``UNSCHEDULABLE``   gives up for now; the same ask may succeed once usage changes (pods end,
                    victims are evicted, a plan expires). Evicting work could help.
``UNRESOLVABLE``    gives up; no change of usage helps (a taint, a selector, a request bigger
                    than any node, a queue that does not exist). Evicting work must not be tried.
``WAIT``            neither proceeds nor fails: it waits for others (gang members at the bind
                    barrier, victims leaving) and asks again.
``ERROR``           an unexpected failure (the API refused); retry with backoff.
==================  ===========================================================================

A ``Status`` has no truth value on purpose: ``if status:`` raises ``TypeError``, so code can never
mistake a failure for a success the way ``""``-means-success returns allowed. Ask ``status.ok``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Code(IntEnum):
    """How a caller reacts to a ``Status`` (see the module docstring)."""

    SUCCESS = 0
    UNSCHEDULABLE = 1
    UNRESOLVABLE = 2
    WAIT = 3
    ERROR = 4


@dataclass(frozen=True, slots=True)
class Status:
    """A decision's outcome: ``code`` says how to react, ``reason`` says why (empty on success)."""

    code: Code = Code.SUCCESS
    reason: str = ""

    @property
    def ok(self) -> bool:
        """Whether the caller may go ahead."""
        return self.code is Code.SUCCESS

    def __bool__(self) -> bool:
        raise TypeError("a Status has no truth value: test status.ok or status.code")

    def __str__(self) -> str:
        return self.reason or self.code.name.lower()

    def prefixed(self, prefix: str) -> Status:
        """The same code with ``prefix`` put before the reason."""
        return Status(self.code, f"{prefix}{self.reason}")

    @classmethod
    def unschedulable(cls, reason: str) -> Status:
        """Not now: usage must change first."""
        return cls(Code.UNSCHEDULABLE, reason)

    @classmethod
    def unresolvable(cls, reason: str) -> Status:
        """Never, as things are configured: no eviction helps."""
        return cls(Code.UNRESOLVABLE, reason)

    @classmethod
    def wait(cls, reason: str) -> Status:
        """Wait for others, then ask again."""
        return cls(Code.WAIT, reason)

    @classmethod
    def error(cls, reason: str) -> Status:
        """An unexpected failure."""
        return cls(Code.ERROR, reason)


#: The shared success value.
SUCCESS = Status()
