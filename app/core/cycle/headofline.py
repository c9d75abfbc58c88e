"""The head-of-line hold: the first gang in line that cannot start gets the soonest-freeing
room held for it, so smaller work cannot starve it (work that ends before may still backfill).

A ``topology-required`` gang gets its hold inside one domain of its level: the soonest-freeing
of the ``DOMAINS_TRIED`` biggest that could hold it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.core.actions.backfill import EndingMemo, Reservation, reserve_for
from app.core.model.gang import Gang
from app.core.model.values import Pod
from app.core.state.domains import ask_of, tree_for
from app.core.state.queueusage import demand_of
from app.core.state.view import NodeView, Snapshot

#: How many domains a ``topology-required`` gang's head-of-line hold considers.
DOMAINS_TRIED = 8


def waits_for_domain(gang: Gang) -> bool:
    """Whether ``gang`` waits only because no domain of its required level has room (a
    valid ``topology-required`` ask and no running members pinning it elsewhere)."""
    ask, problem = ask_of(gang.members)
    return ask is not None and ask.required and not problem and not gang.bound


def domains_for(
    gang: Gang, view: NodeView, topology_keys: Sequence[str]
) -> list[np.ndarray] | None:
    """Row masks of the domains a ``topology-required`` gang could be held in (the
    ``DOMAINS_TRIED`` with the most GPUs that could hold it; none for an unknown level),
    or None: the gang asks for no domain, anywhere will do."""
    ask, problem = ask_of(gang.members)
    if ask is None or not ask.required or problem:
        return None
    tree = tree_for(view.table, topology_keys)
    level = tree.level(ask.level)
    if level is None:
        return []  # an unknown level: nowhere to hold room
    need = np.asarray(demand_of(gang.pending[: gang.min_member - len(gang.bound)]))
    capacity = tree.sums(level, view.allocatable)
    big_enough = np.flatnonzero((capacity >= need).all(axis=1))
    order = big_enough[np.argsort(-capacity[big_enough, 0], kind="stable")]
    return [tree.ids[level] == d for d in order[:DOMAINS_TRIED].tolist()]


def hold_for(
    snapshot: Snapshot,
    gang: str,
    core: Sequence[Pod],
    domains: list[np.ndarray] | None,
    *,
    now: float,
    default_runtime: float,
    strategy: str,
    memo: EndingMemo | None = None,
) -> Reservation | None:
    """The soonest-freeing room for ``gang`` (inside one of ``domains`` if given).

    ``snapshot.view`` must not count holds (see ``reserve_for``). ``memo``: the running pods'
    ending entries kept from the last call (every cycle asks; few pods change in between)."""
    options = [
        reserve_for(
            snapshot,
            gang,
            core,
            now=now,
            default_runtime=default_runtime,
            strategy=strategy,
            within=mask,
            memo=memo,
        )
        for mask in (domains if domains is not None else [None])
    ]
    found = [r for r in options if r is not None]
    return min(found, key=lambda r: r.start) if found else None
