"""The side effects Muster has on a cluster, behind one small interface.

``app.k8s.gateway.KubeGateway`` talks to the Kubernetes API; ``InMemoryGateway`` here is the
standalone mode's cluster (and the fake for tests): it applies each action to the cache the way
the watch would report it, so both modes run the same code path.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from app.core.model.errors import GatewayError
from app.core.model.labels import GPU_IDS
from app.core.model.parse import gpu_ids
from app.core.model.values import GroupObject, Pod
from app.core.state.cache import ClusterCache


@runtime_checkable
class Gateway(Protocol):
    """Actions on the cluster. Every method raises ``GatewayError`` when the API refuses.

    ``blocking`` says whether the actions do I/O: when true, async callers run them in a worker
    thread; when false (the in-memory cluster), they may call them on the event loop.
    """

    blocking: bool

    def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """Create the pod's Binding to ``node`` (pods/binding subresource); ``annotations``
        are set on the pod in the same call (the API server copies a Binding's annotations
        onto the pod), e.g. ``muster.io/gpu-ids``."""

    def check_bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Ask whether ``bind`` would be accepted, changing nothing (a dry run: the API
        server's admission, webhooks included, and its checks run; nothing is stored)."""

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool = False) -> None:
        """Evict the pod through the Eviction API (PodDisruptionBudgets apply; a refusal is
        ``GatewayError("TooManyRequests")``). ``dry_run`` only asks whether it would work."""

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete the pod at once if it still has ``uid`` (rolling a gang back, or removing a
        victim whose eviction was refused halfway through its gang)."""

    def annotate_pod(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> None:
        """Merge-patch the pod's annotations (``None`` removes a key)."""

    def ungate(self, namespace: str, name: str, uid: str, gates: Sequence[str], gate: str) -> None:
        """Remove scheduling gate ``gate`` from the pod, whose gates are ``gates`` now (the
        update fails with ``Conflict`` or ``Invalid`` if they changed meanwhile)."""

    def event(
        self, namespace: str, name: str, uid: str, reason: str, message: str, kind: str = "Normal"
    ) -> None:
        """Record an Event about the pod."""

    def object_event(
        self, obj: GroupObject, reason: str, message: str, kind: str = "Normal"
    ) -> None:
        """Record an Event about a group object (a PodGroup, a Workload)."""


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """An event the in-memory gateway was asked to record."""

    namespace: str
    name: str
    reason: str
    message: str
    kind: str
    #: ``Pod``, or the group object's kind (``PodGroup``, ``Workload``).
    about: str = "Pod"


def bound_pod(pod: Pod, node: str, annotations: Mapping[str, str]) -> Pod:
    """``pod`` as the API server stores it after a Binding to ``node`` with ``annotations``."""
    merged = {**pod.annotations, **annotations}
    ids = gpu_ids(merged.get(GPU_IDS, ""))
    return replace(pod, node_name=node, annotations=merged, gpu_ids=ids)


class InMemoryGateway:
    """A cluster without an API server: actions go straight into the cache.

    ``fail`` maps an action and pod (``("bind", "ns/name")``) to a ``GatewayError`` to raise
    once, so tests can script API failures.
    """

    #: Actions return at once (no I/O): callers need not move them off the event loop.
    blocking = False

    def __init__(self, cache: ClusterCache) -> None:
        self._cache = cache
        self._lock = threading.Lock()
        self.bindings: list[tuple[str, str]] = []
        self.evictions: list[str] = []
        self.deletions: list[str] = []
        self.events: list[RecordedEvent] = []
        self.ungated: list[str] = []
        self.fail: dict[tuple[str, str], GatewayError] = {}

    def _scripted_failure(self, action: str, namespace: str, name: str) -> None:
        with self._lock:
            error = self.fail.pop((action, f"{namespace}/{name}"), None)
        if error is not None:
            raise error

    def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        self._scripted_failure("bind", namespace, name)
        pod = self._bindable(namespace, name, uid, node)
        if annotations:
            bound = bound_pod(pod, node, annotations)
            self._cache.upsert_pod(bound)
        else:
            self._cache.confirm(uid, node)
        with self._lock:
            self.bindings.append((f"{namespace}/{name}", node))

    def check_bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self._bindable(namespace, name, uid, node)

    def _bindable(self, namespace: str, name: str, uid: str, node: str) -> Pod:
        """The pod, if the API server would bind it to ``node`` (as its checks do)."""
        pod = self._cache.pod(uid)
        if pod is None:
            raise GatewayError("NotFound", f'pods "{name}" not found')
        if pod.node_name and pod.node_name != node:
            raise GatewayError(
                "Conflict", f'pod {namespace}/{name} is already assigned to node "{pod.node_name}"'
            )
        return pod

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool = False) -> None:
        self._scripted_failure("evict", namespace, name)
        if dry_run:
            return
        self._cache.delete_pod(uid)
        with self._lock:
            self.evictions.append(f"{namespace}/{name}")

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        self._scripted_failure("delete", namespace, name)
        if self._cache.pod(uid) is None:
            raise GatewayError("NotFound", f'pods "{name}" not found')
        self._cache.delete_pod(uid)
        with self._lock:
            self.deletions.append(f"{namespace}/{name}")

    def annotate_pod(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> None:
        self._scripted_failure("annotate", namespace, name)
        snapshot = self._cache.snapshot()
        for pod in snapshot.pods.values():
            if pod.namespace == namespace and pod.name == name:
                merged = {**pod.annotations, **annotations}
                clean = {k: v for k, v in merged.items() if v is not None}
                self._cache.upsert_pod(replace(pod, annotations=clean))
                return
        raise GatewayError("NotFound", f'pods "{name}" not found')

    def ungate(self, namespace: str, name: str, uid: str, gates: Sequence[str], gate: str) -> None:
        self._scripted_failure("ungate", namespace, name)
        pod = self._cache.pod(uid)
        if pod is None:
            raise GatewayError("NotFound", f'pods "{name}" not found')
        if pod.gates != tuple(gates):
            raise GatewayError("Conflict", f"pod {namespace}/{name} has gates {pod.gates}")
        self._cache.upsert_pod(replace(pod, gates=tuple(g for g in gates if g != gate)))
        with self._lock:
            self.ungated.append(f"{namespace}/{name}")

    def event(
        self, namespace: str, name: str, uid: str, reason: str, message: str, kind: str = "Normal"
    ) -> None:
        with self._lock:
            self.events.append(RecordedEvent(namespace, name, reason, message, kind))

    def object_event(
        self, obj: GroupObject, reason: str, message: str, kind: str = "Normal"
    ) -> None:
        with self._lock:
            self.events.append(
                RecordedEvent(obj.namespace, obj.object_name, reason, message, kind, obj.kind)
            )
