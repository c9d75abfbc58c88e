"""Yardsticks for a workload's makespan that need no scheduler at all.

* ``lower_bound``: no schedule can finish earlier. For every resource, the work (pods x
  request x runtime) of the jobs that become ready at or after time ``t`` cannot be done
  before ``t + work / capacity``; and no job ends before it is ready plus its runtime.
* ``greedy_reference``: the makespan of an idealised first-come-first-served gang scheduler
  that starts each job, in submission order (later jobs may backfill), the instant the whole
  cluster's free capacity covers it: no placement, no fragmentation, no scheduling delay,
  but also no knowledge of runtimes. With identical jobs submitted together this is the
  classic list schedule, well above the lower bound when runtimes vary, since the last jobs
  started may be long ones; only a scheduler that knows runtimes could approach the bound.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import numpy as np

from app.core.model.values import Resources
from app.sim.workload import Job


def _demand(job: Job) -> np.ndarray:
    return np.asarray(job.pods[0].requests, dtype=np.int64) * job.min_member


def lower_bound(jobs: Sequence[Job], capacity: Resources) -> float:
    """The capacity/arrival lower bound on the makespan (seconds from time 0)."""
    if not jobs:
        return 0.0
    order = sorted(jobs, key=lambda j: j.ready)
    ready = np.array([j.ready for j in order])
    work = np.array([_demand(j) * j.runtime for j in order], dtype=np.float64)
    bound = float(max(j.ready + j.runtime for j in order))
    cap = np.asarray(capacity, dtype=np.float64)
    for r in np.flatnonzero(cap > 0):
        suffix = np.cumsum(work[::-1, r])[::-1] / cap[r]
        bound = max(bound, float((ready + suffix).max()))
    return bound


def greedy_reference(jobs: Sequence[Job], capacity: Resources) -> float:
    """The makespan of the idealised FCFS gang scheduler described above.

    Jobs whose deadline passes before they could start fail then (as in the simulation); a
    job larger than the cluster never starts.
    """
    free = list(capacity)
    order = sorted(jobs, key=lambda j: j.ready)
    demands = [tuple(int(x) for x in _demand(j)) for j in order]
    waiting: list[int] = []
    running: list[tuple[float, int]] = []
    end, nxt = 0.0, 0

    def fits(i: int) -> bool:
        return all(d <= f for d, f in zip(demands[i], free, strict=True))

    def start(i: int, now: float) -> None:
        nonlocal end
        for r, d in enumerate(demands[i]):
            free[r] -= d
        heapq.heappush(running, (now + order[i].runtime, i))
        end = max(end, now + order[i].runtime)

    while nxt < len(order) or running:
        now = min(
            order[nxt].ready if nxt < len(order) else math.inf,
            running[0][0] if running else math.inf,
        )
        freed = False
        while running and running[0][0] <= now:
            _, i = heapq.heappop(running)
            for r, d in enumerate(demands[i]):
                free[r] += d
            freed = True
        arrived = []
        while nxt < len(order) and order[nxt].ready <= now:
            arrived.append(nxt)
            nxt += 1
        # Without freed capacity, jobs that waited before still do not fit.
        candidates = waiting + arrived if freed else arrived
        kept = waiting if not freed else []
        for i in candidates:
            if order[i].deadline < now:
                end = max(end, order[i].deadline)
            elif fits(i):
                start(i, now)
            else:
                kept.append(i)
        waiting = sorted(kept)
    for i in waiting:  # never started: they fail at their deadline
        if math.isfinite(order[i].deadline):
            end = max(end, order[i].deadline)
    return end
