"""The extender service: the four kube-scheduler verbs over the cluster cache and the planner.

HTTP handlers translate wire JSON into model values and call this; it owns no I/O except
through the ``Gateway`` that binds use. Its collaborators are injected; ``app.wiring`` builds
them for the server and the simulator alike.

Gang members are served from the planner's plans: filter offers exactly the planned node and
rejects every other candidate as *unresolvable* (FailedAndUnresolvableNodes) — on purpose:
kube-scheduler's own preemption works pod by pod and must never evict pods on behalf of one
member of a gang; freeing room for whole gangs is the planner's job. For the same reason
preempt vetoes every candidate for a gang member, and never offers part of a gang as victims.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import NamedTuple

import numpy as np

from app.core.cycle.planner import Planner
from app.core.model.gang import gang_spec
from app.core.model.values import Node, Pod
from app.core.policies import solepick
from app.core.policies.gpuplacement import GpuPlacement
from app.core.policies.interfaces import MAX_NODE_SCORE
from app.core.state.cache import ClusterCache
from app.core.state.view import NodeView
from app.core.verbs import victimcheck
from app.core.verbs.bind import BindOutcome
from app.core.verbs.filter import FilterMemo, FilterResult
from app.core.verbs.gangbind import GangBinder
from app.core.verbs.prioritize import STRATEGIES, Ranking, rank

log = logging.getLogger("muster.extender")


class Extender:
    """filter / prioritize / preempt / bind for one cluster cache.

    Its collaborators are built by the composition root (``app.wiring``): the ``planner``
    whose plans it serves, the ``binder`` that binds through the barrier, and ``gpu``, the
    live GPU placement policy (``None``: GPU-blind ``strategy`` scoring only).
    """

    def __init__(
        self,
        cache: ClusterCache,
        planner: Planner,
        binder: GangBinder,
        *,
        strategy: str = "binpack",
        gpu: GpuPlacement | None = None,
        headline: Callable[[Pod], str | None] | None = None,
        sole_pick: bool = False,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {strategy!r}; choose one of {sorted(STRATEGIES)}")
        self.cache = cache
        self.strategy = strategy
        self.planner = planner
        self.gpu = gpu
        self.binder = binder
        #: ``category: summary`` of a waiting gang member (``app.core.insight``), if wired.
        self._headline = headline
        #: Filter answers a pod on its own with Muster's pick alone when scoring would weigh
        #: nothing else (``app.core.policies.solepick``).
        self.sole_pick = sole_pick
        self._filter = FilterMemo()
        #: The last pod answered on its own and its candidates (``prepare_next``).
        self._last_single: tuple[Pod, list[str]] | None = None

    def _candidates(
        self, pod: Pod, names: Sequence[str] | None, nodes: Sequence[Node] | None
    ) -> _Call:
        """Learn the pod (and full nodes, when kube-scheduler sends them); the candidate names.
        The pod is ``None`` when it is no pending pod to place (``ClusterCache.learn_pod``)."""
        if nodes is not None:
            self.cache.learn_nodes(nodes)
            names = [n.name for n in nodes]
        known = self.cache.learn_pod(pod)
        stale = ""
        if known is None:
            stale = _not_pending(pod)
            log.warning("%s; not learned", stale)
        return _Call(known, list(names or ()), stale)

    def filter(
        self, pod: Pod, names: Sequence[str] | None, nodes: Sequence[Node] | None = None
    ) -> FilterResult:
        """Which candidates may take ``pod`` (``nodes`` also refresh the cache). A gang member
        gets its planned node alone; a pod on its own, with ``sole_pick``, Muster's best node
        alone (held) when nothing else would weigh in kube-scheduler's scoring. The answer
        may be shared with other calls (``FilterMemo``): do not change it."""
        known, names, stale = self._candidates(pod, names, nodes)
        if known is None:
            return FilterResult(unresolvable=dict.fromkeys(names, stale))
        pod = known
        if self.gpu is not None:
            self.gpu.observe(pod)
        verdict = self.planner.verdict(pod)
        if not verdict.gang:
            self.binder.single.drop_hold(pod.uid)
            quota = self.planner.quota_check(pod)
            if not quota.ok:
                return FilterResult(unresolvable=dict.fromkeys(names, quota.reason))
            backfill = self.planner.backfill_ok(pod)
            view = self.cache.backfill_view() if backfill else self.cache.view()
            result = self._filter.filter(view, pod, names)
            self._last_single = None if backfill else (pod, names)
            if len(result.feasible) == 1:  # kube-scheduler skips prioritize: this is its pick
                self.binder.single.hold(pod.uid, result.feasible[0])
            elif len(result.feasible) > 1 and self.sole_pick:
                return self._sole_pick(pod, result)
            return result
        self._last_single = None
        if verdict.node and verdict.node not in names:
            verdict = self.planner.replan_member(pod, names)
        if not verdict.node:
            why = (self._headline(pod) if self._headline else None) or verdict.reason
            return FilterResult(unresolvable=dict.fromkeys(names, why))
        elsewhere = f"gang {verdict.gang}: this member is planned on {verdict.node}"
        return FilterResult(
            feasible=[verdict.node],
            unresolvable={n: elsewhere for n in names if n != verdict.node},
        )

    def prepare_next(self) -> None:
        """Decide ahead, on the cache's current view, what the last pod answered on its own
        was decided on: its candidates' fit and, with ``sole_pick``, the GPU policy's cost of
        each. The next pod of its shape (kube-scheduler sends a workload's pods one after
        another) then finds both remembered (``FilterMemo``, ``GpuPlacement.rank``) instead
        of deciding them again on its call, which kube-scheduler's one-pod loop waits for.
        Call it after answering, off that path; it changes nothing the answers depend on."""
        last = self._last_single
        if last is None:
            return
        pod, names = last
        view = self.cache.view()
        result = self._filter.filter(view, pod, names)
        gpu = self.gpu
        if self.sole_pick and len(result.feasible) > 1 and gpu is not None and gpu.applies(view):
            gpu.rank(view, pod)

    def _sole_pick(self, pod: Pod, result: FilterResult) -> FilterResult:
        """``result`` narrowed to Muster's best feasible node (held for the pod), when nothing
        else would weigh in kube-scheduler's scoring; else ``result`` as it is."""
        view = self.cache.view()
        rows = view.table.rows(result.feasible)
        if solepick.needs_scoring(pod, view.table, rows) is not None:
            return result
        best = self._cheapest(pod, result.feasible, rows, view)
        if best is None:
            return result
        return FilterResult(
            feasible=[result.feasible[best]],
            failed=result.failed,
            unresolvable=result.unresolvable,
            passed_over=len(result.feasible) - 1,
        )

    def _cheapest(
        self, pod: Pod, names: list[str], rows: np.ndarray, view: NodeView
    ) -> int | None:
        """The index in ``names`` (at ``rows`` of ``view``) of the candidate prioritize would
        score highest, held for ``pod``; ``None``: none known. With the GPU policy that is the
        cheapest candidate by its cost (first among equals, as ``GpuPlacement.scores`` gives
        it the top score), read without scoring every candidate."""
        gpu = self.gpu if self.gpu is not None and self.gpu.applies(view) else None
        if gpu is None:
            return self._best(pod, self._rank(pod, names, view))
        known = rows >= 0
        if not known.any():
            return None
        cost = np.where(known, gpu.rank(view, pod).cost[rows], np.inf)
        finite = np.isfinite(cost)
        best = int(np.argmin(cost)) if finite.any() else int(np.argmax(known))
        self.binder.single.hold(pod.uid, names[best])
        return best

    def _rank(self, pod: Pod, names: list[str], view: NodeView | None = None) -> Ranking:
        view = view if view is not None else self.cache.view()
        gpu = self.gpu if self.gpu is not None and self.gpu.applies(view) else None
        score = None if gpu is None else partial(gpu.scores, view, pod)
        return rank(view, pod, names, self.strategy, score)

    def prioritize(
        self, pod: Pod, names: Sequence[str] | None, nodes: Sequence[Node] | None = None
    ) -> Ranking:
        """A 0-10 score for every candidate; a gang member's planned node scores 10 (a pod
        that is no pending pod to place, 0 everywhere)."""
        known, names, _ = self._candidates(pod, names, nodes)
        ranking = self._rank(pod, names)
        if known is None:
            return replace(ranking, scores=np.zeros_like(ranking.scores))
        pod = known
        spec = gang_spec(pod)
        plan = self.planner.plan(spec.key) if spec else None
        planned = plan.node_of(pod.uid) if plan else None
        if planned:
            row = ranking.table.index.get(planned, -2)
            capped = np.minimum(ranking.scores, MAX_NODE_SCORE - 1)
            scores = np.where(ranking.rows == row, MAX_NODE_SCORE, capped)
            ranking = replace(ranking, scores=scores)
        elif spec is None:
            ranking = self._pick(pod, ranking)
        return ranking

    def _pick(self, pod: Pod, ranking: Ranking) -> Ranking:
        """For a pod on its own: Muster's best candidate alone keeps the top score (so
        kube-scheduler, weighing Muster's score far above its own, picks it), and it is held
        for the pod until the bind comes (``Binder.hold``), so the next pods kube-scheduler
        places in the meantime see its GPUs taken."""
        best = self._best(pod, ranking)
        if best is None:
            return ranking
        top = max(int(ranking.scores[best]), 1)
        scores = np.where(ranking.rows >= 0, np.minimum(ranking.scores, top - 1), 0)
        scores[best] = top
        return replace(ranking, scores=scores)

    def _best(self, pod: Pod, ranking: Ranking) -> int | None:
        """The index of Muster's best known candidate, held for ``pod``; ``None``: none known."""
        known = ranking.rows >= 0
        if not known.any():
            return None
        best = int(np.argmax(np.where(known, ranking.scores, -1)))
        self.binder.single.hold(pod.uid, ranking.names[best])
        return best

    def preempt(
        self,
        pod: Pod,
        candidates: Mapping[str, victimcheck.Victims],
        given: Mapping[str, Pod] | None = None,
    ) -> dict[str, victimcheck.Victims]:
        """The candidate nodes (with their victims) on which preemption would let ``pod`` fit."""
        known = self._candidates(pod, (), None).pod
        if known is None or gang_spec(known) is not None:
            return {}
        pod = known
        return victimcheck.filter_candidates(
            self.cache.snapshot(), pod, candidates, given, protected_for=self.planner.protected_for
        )

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> BindOutcome:
        """Bind the pod to ``node``; gang members through the barrier (see ``gangbind``)."""
        return await self.binder.bind(namespace, name, uid, node)


class _Call(NamedTuple):
    """What an extender call is about: the cached pod (``None``: no pending pod to place, see
    ``stale``), the candidate node names, and why the pod is refused (empty when known)."""

    pod: Pod | None
    names: list[str]
    stale: str


def _not_pending(pod: Pod) -> str:
    """Why a call about a pod that is no pending pod to place gets no node."""
    bound = f", or bound to {pod.node_name}" if pod.node_name else ""
    return f"pod {pod.key} is no pending pod Muster knows (deleted{bound}): a stale copy"
