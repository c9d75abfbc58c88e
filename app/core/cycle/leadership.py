"""Which replica decides: the leader, and only once it has carried on from the records.

Several Muster replicas may run; every one keeps its cache warm (the watches), but only the
holder of the Lease (``app.k8s.lease``) plans, evicts, binds and nudges. When a replica wins
the Lease it first ``take_over``s: it reads the plan records on the pods and the hold on the
Lease (``app.core.cycle.records``), restores them in the planner, and only then starts
leading. When it loses the Lease it ``step_down``s: it forgets its plans (they are on the pods)
and decides nothing more.

``leading`` is checked before every decision. It also asks the lease itself (``lease_held``)
so that a replica whose renewals stall stops deciding by its renew deadline, before another
replica may take the Lease over.

A single replica (no election) takes over by itself the first time it is asked once its cache
has synced: restarted after a crash, it carries on from the records just the same.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from app.core.cycle.planner import Planner
from app.core.cycle.records import decode_hold, plans_from
from app.core.model.labels import HOLD_RECORD
from app.core.state.cache import ClusterCache

log = logging.getLogger("muster.leadership")


class Leadership:
    """Whether this replica decides now.

    Without ``lease_held`` (one replica, standalone mode, the simulator) it leads once it has
    taken over, which it does by itself as soon as the cache has synced.
    """

    def __init__(
        self,
        planner: Planner,
        cache: ClusterCache,
        lease_held: Callable[[], bool] | None = None,
    ) -> None:
        self._planner = planner
        self._cache = cache
        self._lease_held = lease_held
        self._lock = threading.Lock()
        self._took_over = False
        self.takeovers = 0
        #: What the last takeover carried on, one line each (for /debug and the log).
        self.carried: list[str] = []

    @property
    def elected(self) -> bool:
        """Whether this replica takes part in an election at all."""
        return self._lease_held is not None

    @property
    def leading(self) -> bool:
        """Whether this replica may decide now: it holds the Lease and has taken over."""
        if self._lease_held is None:
            if not self._took_over and self._cache.synced:
                self.take_over({})
            return self._took_over
        return self._took_over and self._lease_held()

    @property
    def may_decide(self) -> bool:
        """Whether a filter call may plan on demand now: as the leader (once the cache has
        synced, a lone replica first restores the recorded plans); a lone replica still
        syncing plans as it always did."""
        return self.leading or (self._lease_held is None and not self._cache.synced)

    @property
    def role(self) -> str:
        """``leader``, ``taking-over`` or ``follower``."""
        if self.leading:
            return "leader"
        held = self._lease_held is not None and self._lease_held()
        return "taking-over" if held else "follower"

    def take_over(self, lease_annotations: Mapping[str, str]) -> list[str]:
        """The Lease was won: restore the recorded plans and hold, then lead.

        ``lease_annotations`` are the Lease's annotations as the previous leader left them.
        """
        with self._lock:
            if self._took_over and self._lease_held is None:
                return self.carried  # a single replica takes over once
            hold = decode_hold(lease_annotations.get(HOLD_RECORD, ""))
            records = plans_from(self._cache.snapshot().pods.values())
            self.carried = self._planner.restore(records, hold)
            self.takeovers += 1
            self._took_over = True
        for line in self.carried:
            log.info("took over: %s", line)
        return self.carried

    def step_down(self) -> None:
        """The Lease was lost (or given up): decide nothing more, forget the plans."""
        with self._lock:
            self._took_over = False
            self._planner.reset()
