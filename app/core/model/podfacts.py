"""Values derived from a pod object alone, remembered per pod uid while that very object is
asked about (pods are immutable: an update is a new object, so identity says unchanged).

A cycle asks for every member's gang, queue and GPU ask several times (grouping, placing,
reserving, committing), and explain and what-if read facts of every running pod after each
cache change: with this, each is a lookup instead of a parse. Keyed by uid, a pod's newer
version takes its older one's entry, so the memo holds one object per pod (live ones, and
deleted ones until past ``LIMIT`` the older half goes) whatever the cluster's churn.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar

from app.core.model.values import Pod

T = TypeVar("T")


class PodFact(Generic[T]):
    """One value derived from a pod object alone, kept per uid while the cache hands out that
    very object (pods are immutable: an update is a new object, so identity says unchanged).
    Explain and what-if read it for every running pod after each cache change; this makes
    that pass a lookup instead of a parse."""

    #: Entries kept at most; past it the older half goes (uids of gone pods pile up).
    LIMIT = 1 << 17

    def __init__(
        self,
        derive: Callable[[Pod], T],
        *,
        ahead: bool = False,
        only: Callable[[Pod], bool] | None = None,
    ) -> None:
        """``ahead``: derived for every pod as the cache stores it (``derive_ahead``), for the
        facts every cycle reads of every pending pod; ``only``: ahead for the pods it says
        yes to alone (a gang member's fact, say: derived on demand for any other)."""
        self._derive = derive
        self._kept: dict[str, tuple[Pod, T]] = {}
        self.only = only
        if ahead:
            _AHEAD.append(self)

    def of(self, pod: Pod) -> T:
        """``derive(pod)``, from the memo when ``pod`` is the object it was derived from."""
        hit = self._kept.get(pod.uid)
        if hit is not None and hit[0] is pod:
            return hit[1]
        value = self._derive(pod)
        kept = self._kept
        # A newer version of a known pod counts as derived now (the newest entry); past
        # ``LIMIT`` the older half goes (uids derived longest ago: mostly deleted pods), not
        # all: a cluster of more pods than that derives only those again, not every pod at
        # once. (``list`` of a dict's items is one step other threads cannot interleave.)
        if kept.pop(pod.uid, None) is None and len(kept) >= self.LIMIT:
            entries = list(kept.items())
            self._kept = kept = dict(entries[len(entries) // 2 :])
        kept[pod.uid] = (pod, value)
        return value

    def lookup(self) -> Callable[[str], tuple[Pod, T] | None]:
        """The memo's entry by uid, to read it in line in a loop over many pods: a hit
        ``(pod, value)`` answers for that very pod only (``hit[0] is pod``)."""
        return self._kept.get

    def of_each(self, pods: Iterable[Pod]) -> list[T]:
        """``of`` of each of ``pods`` (the memo read in line: a cycle asks for every member)."""
        out: list[T] = []
        kept = self._kept
        for pod in pods:
            hit = kept.get(pod.uid)
            out.append(hit[1] if hit is not None and hit[0] is pod else self.of(pod))
        return out


#: The facts made with ``ahead`` (module-level ones, made once at import).
_AHEAD: list[PodFact[Any]] = []


def derive_ahead(pods: Sequence[Pod]) -> None:
    """Derive the ``ahead`` facts of ``pods`` now: as the cache stores them, off the planner's
    cycle (kube-scheduler likewise reads a pod's affinity terms once, as the pod enters its
    queue). A cycle then finds each new pod's facts remembered; without this call it derives
    them itself, to the same values."""
    for fact in _AHEAD:
        only = fact.only
        try:
            fact.of_each(pods if only is None else [p for p in pods if only(p)])
        except Exception:  # noqa: BLE001 - the cycle derives it again and meets the error there
            continue
