"""Sole pick: whether filter may answer a pod on its own with Muster's best node alone.

When filter leaves exactly one node, kube-scheduler takes it without scoring: neither its own
score plugins nor Muster's prioritize run, which saves a round trip and a scoring pass over
every candidate per pod. That is the decision scoring would have made only when kube-scheduler's
scoring has nothing to weigh against Muster's ranking (which the shipped profile already
weighs twenty times a plugin): the pod states no soft preference of its own
(``Pod.soft_preferences``) and no candidate carries a ``PreferNoSchedule`` taint the pod does
not tolerate. Otherwise filter answers every feasible node and prioritize ranks them.

Not seen from the pod and its candidates, and so not weighed when the pick stands alone:
default spreading of pods a Service selects (kube-scheduler finds those Services itself), other
pods' preferred (anti-)affinity toward this one, and image locality.
"""

from __future__ import annotations

import numpy as np

from app.core.model.values import Pod
from app.core.state.nodetable import NodeTable


def needs_scoring(pod: Pod, table: NodeTable, rows: np.ndarray) -> str | None:
    """Why kube-scheduler must score ``pod``'s candidates (``rows`` of ``table``) itself, or
    ``None`` when Muster's pick may be filter's only answer."""
    if pod.soft_preferences:
        return "the pod states soft placement preferences"
    known = rows[rows >= 0]
    if not len(table.nodes) or not len(known):
        return None
    tainted = known[table.prefer_no_schedule[known]]
    for row in np.unique(tainted).tolist():
        for taint in table.nodes[row].taints:
            if taint.effect == "PreferNoSchedule" and not any(
                t.tolerates(taint) for t in pod.tolerations
            ):
                return f"candidate {table.nodes[row].name} has a PreferNoSchedule taint"
    return None
