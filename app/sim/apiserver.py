"""The simulated cluster's API: Muster's ``Gateway`` plus the watch that everyone reads.

The ``ClusterCache`` holds the API's truth (pods, nodes, bindings), as in standalone mode.
Writes come from two sides: the engine (pods created and deleted by job controllers and
kubelets) and the schedulers (bindings, annotations, Muster's rollbacks) through the
``Gateway`` methods. Every write is reported to the ``Watcher`` at once, standing in for the
watch that kube-scheduler and the engine's bookkeeping see.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from app.core.model.errors import GatewayError
from app.core.model.values import Pod
from app.core.state.cache import ClusterCache
from app.core.state.gateway import InMemoryGateway


class Watcher(Protocol):
    """Receives every change to pods, as a watch would."""

    def pod_added(self, pod: Pod) -> None:
        """A pod was created."""

    def pod_bound(self, uid: str, node: str) -> None:
        """A pod got its Binding."""

    def pod_updated(self, uid: str) -> None:
        """A pod's metadata changed (an annotation)."""

    def pod_deleted(self, pod: Pod, *, by_scheduler: bool) -> None:
        """A pod is gone; ``by_scheduler`` when Muster deleted or evicted it (a gang rolled
        back, a job preempted)."""


class SimApi(InMemoryGateway):
    """``InMemoryGateway`` that reports every change to a ``Watcher``."""

    def __init__(self, cache: ClusterCache, watcher: Watcher) -> None:
        super().__init__(cache)
        self._watcher = watcher
        self.annotations = 0

    # -- the engine's side ------------------------------------------------------------------

    def create(self, pod: Pod) -> None:
        """A controller created ``pod``."""
        self._cache.upsert_pod(pod)
        self._watcher.pod_added(pod)

    def start(self, uid: str, now: float) -> None:
        """The kubelet started the bound pod: phase Running, ``status.startTime`` now."""
        pod = self._cache.pod(uid)
        if pod is not None and pod.node_name:
            self._cache.upsert_pod(replace(pod, phase="Running", started=now))

    def delete(self, uid: str) -> Pod | None:
        """The pod finished or was deleted by its owner; returns it as it was."""
        pod = self._cache.pod(uid)
        if pod is not None:
            self._cache.delete_pod(uid)
            self._watcher.pod_deleted(pod, by_scheduler=False)
        return pod

    # -- the schedulers' side (Gateway) -----------------------------------------------------

    def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        super().bind(namespace, name, uid, node, annotations)
        self._watcher.pod_bound(uid, node)

    def annotate_pod(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> None:
        # By uid (generated pods use "namespace/name"); the base class scans every pod.
        self._scripted_failure("annotate", namespace, name)
        uid = f"{namespace}/{name}"
        pod = self._cache.pod(uid)
        if pod is None:
            raise GatewayError("NotFound", f'pods "{name}" not found')
        merged = {**pod.annotations, **annotations}
        self._cache.upsert_pod(
            replace(pod, annotations={k: v for k, v in merged.items() if v is not None})
        )
        self.annotations += 1
        self._watcher.pod_updated(uid)

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        pod = self._cache.pod(uid)
        super().delete_pod(namespace, name, uid)
        if pod is not None:
            self._watcher.pod_deleted(pod, by_scheduler=True)

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool = False) -> None:
        pod = self._cache.pod(uid)
        super().evict(namespace, name, uid, dry_run=dry_run)
        if pod is not None and not dry_run:
            self._watcher.pod_deleted(pod, by_scheduler=True)
