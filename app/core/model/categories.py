"""The vocabulary of an explanation: a job's state and the first thing that blocks it.

Both are ``StrEnum``s: code compares and branches on members, while the JSON answer, the
``FailedScheduling`` text and the CLI carry the member's value unchanged (``"gang-incomplete"``).
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    """Where a gang or pod is on its way to running."""

    RUNNING = "running"
    BINDING = "binding"
    PLANNED = "planned"
    WAITING = "waiting"
    UNKNOWN = "unknown"


class Category(StrEnum):
    """The first blocker of a waiting job (``NONE`` when nothing blocks it)."""

    QUOTA = "quota"
    GANG_INCOMPLETE = "gang-incomplete"
    CAPACITY = "capacity"
    FRAGMENTATION = "fragmentation"
    TOPOLOGY = "topology"
    RESERVATION = "reservation"
    PRIORITY = "priority"
    CONSTRAINTS = "constraints"
    NONE = "none"
