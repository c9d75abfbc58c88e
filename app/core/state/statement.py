"""What a planning cycle decided, as operations the cache applies in one step.

A cycle works on a ``Session`` (``app.core.cycle.session``) and never writes the live cache
while it runs; its decisions are recorded here and ``ClusterCache.apply`` carries them out
under the cache lock, re-checking each reservation against what changed meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from app.core.model.status import Status
from app.core.model.values import Resources


@dataclass(frozen=True, slots=True)
class Reserve:
    """Hold room for gang ``gang``'s pods: uid -> node, and the GPU devices chosen there.

    All or none. ``force`` reserves even where the room is still taken, by victims being
    evicted for this very gang, so nothing else can take what they free.
    """

    gang: str
    placements: Mapping[str, str]
    devices: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    force: bool = False


@dataclass(frozen=True, slots=True)
class Release:
    """Drop the plan reservations of ``uids`` (pods bound or binding keep their node)."""

    uids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Hold:
    """Promise room to head-of-line gang ``owner`` from ``until`` on (empty ``holds``: lift)."""

    owner: str
    holds: Mapping[str, Resources]
    until: float


Op = Reserve | Release | Hold


@dataclass(slots=True)
class Statement:
    """The operations of one session, in the order they were decided."""

    ops: list[Op] = field(default_factory=list)
    #: The cache generation the session's snapshot was taken at.
    base: int = 0

    def __bool__(self) -> bool:
        return bool(self.ops)


@dataclass(frozen=True, slots=True)
class Applied:
    """What ``ClusterCache.apply`` did with a statement."""

    #: Index in ``Statement.ops`` -> why that ``Reserve`` reserved nothing (absent: it held).
    refused: Mapping[int, Status]
    #: uid -> the GPU devices a reserved pod holds now, where they are not the ones its
    #: ``Reserve`` planned (none planned, or other ones); GPU pods only.
    devices: Mapping[str, tuple[int, ...]]
    #: Whether nothing else changed the cache between the snapshot and the end of the commit.
    clean: bool
    #: The cache generation right after the last operation was applied.
    generation: int = 0
