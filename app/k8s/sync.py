"""Keep ``ClusterCache`` in step with the API: one list+watch loop for nodes, one for pods
(``app.k8s.reflector.Reflector``), and the group objects' loops (``app.k8s.groups``).

Each loop LISTs (paged), replaces the cache's set, then WATCHes from the list's
resourceVersion and applies every event; ``stop()`` shuts the open watch sockets down at once.
Objects are handed straight to ``app.core.model.parse``. The cache counts as synced once every
loop has listed once.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes.client import ApiClient, CoreV1Api

from app.core.model.errors import InvalidInput
from app.core.model.parse import node_from_dict, pod_from_dict
from app.core.model.values import Node, Pod
from app.core.state.cache import ClusterCache
from app.k8s.admission import AdmissionSync
from app.k8s.groups import GroupSync
from app.k8s.reflector import Kind, Reflector, display_name, meta_of

log = logging.getLogger("muster.k8s.sync")

_T = TypeVar("_T")


class ClusterSync:
    """Feeds a ``ClusterCache`` from the Kubernetes API with two daemon threads.

    ``api`` is an ``ApiClient`` (or a ``CoreV1Api``-like object, which is how tests inject a
    fake). ``resync_backoff`` is the first retry delay after an error; it doubles up to 30 s.
    ``watch_timeout`` is the server-side watch duration, which bounds how long a loop can go
    without looking at the stop flag. ``groups`` (``app.k8s.groups``) also keeps the group
    objects (PodGroups ...) in step; the cache counts as synced once they are listed too.
    ``admission`` (``app.k8s.admission``) keeps what admission may see of Bindings; it starts
    and stops with the rest, and the cache's sync does not wait for it.
    Call ``start()`` once and ``stop()`` once.
    """

    def __init__(
        self,
        cache: ClusterCache,
        api: ApiClient | CoreV1Api,
        *,
        resync_backoff: float = 1.0,
        watch_timeout: int = 5,
        groups: GroupSync | None = None,
        admission: AdmissionSync | None = None,
        on_synced: Callable[[], None] | None = None,
    ) -> None:
        """``on_synced`` (if any) runs once, in the watch thread, when the initial lists are in
        the cache."""
        self._cache = cache
        self._groups = groups
        self._admission = admission
        self._on_synced = on_synced
        if groups is not None:
            groups.on_ready = self._listed
        core = CoreV1Api(api) if isinstance(api, ApiClient) else api
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._threads: list[threading.Thread] = []
        self._nodes = Reflector(
            Kind(
                "nodes",
                core.list_node,
                self._replace_nodes,
                lambda obj: cache.upsert_node(node_from_dict(obj)),
                lambda obj: cache.delete_node(str(meta_of(obj).get("name", ""))),
                functools.partial(_convert, node_from_dict, "nodes"),
            ),
            self._stop,
            self._listed,
            resync_backoff,
            watch_timeout,
        )
        self._pods = Reflector(
            Kind(
                "pods",
                core.list_pod_for_all_namespaces,
                self._replace_pods,
                lambda obj: cache.upsert_pod(pod_from_dict(obj)),
                self._delete_pod,
                functools.partial(_convert, pod_from_dict, "pods"),
            ),
            self._stop,
            self._listed,
            resync_backoff,
            watch_timeout,
        )

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the node and pod loops (daemon threads)."""
        if self._threads:
            raise RuntimeError("ClusterSync already started")
        for reflector in (self._nodes, self._pods):
            thread = threading.Thread(
                target=reflector.run, name=f"muster-sync-{reflector.kind.name}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        if self._groups is not None:
            self._groups.start()
        if self._admission is not None:
            self._admission.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop both loops and wait up to ``timeout`` seconds for their threads to end."""
        self._stop.set()
        for reflector in (self._nodes, self._pods):
            reflector.interrupt()
        deadline = time.monotonic() + timeout
        if self._groups is not None:
            self._groups.stop(timeout)
        if self._admission is not None:
            self._admission.stop(timeout)
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.warning("%s did not stop within %.1fs", thread.name, timeout)

    def wait_synced(self, timeout: float) -> bool:
        """Wait until nodes and pods have both been listed once; returns whether they have."""
        return self._synced.wait(timeout)

    # -- status -------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """Whether both initial lists have completed (the cache is then marked synced)."""
        return self._synced.is_set()

    @property
    def last_error(self) -> str | None:
        """The latest unrecovered list/watch error (``"pods: ..."``), if any."""
        for reflector in (self._nodes, self._pods):
            if reflector.last_error:
                return f"{reflector.kind.name}: {reflector.last_error}"
        return None

    @property
    def watching(self) -> bool:
        """Whether both loops have a watch stream open right now (connected and current)."""
        return self._nodes.watching and self._pods.watching

    @property
    def node_events(self) -> int:
        """Node watch events applied to the cache."""
        return self._nodes.events

    @property
    def pod_events(self) -> int:
        """Pod watch events applied to the cache."""
        return self._pods.events

    @property
    def relists(self) -> int:
        """Relists caused by 410 Gone, nodes and pods together."""
        return self._nodes.relists + self._pods.relists

    @property
    def skipped(self) -> int:
        """Objects that could not be converted and were left out of the cache."""
        return self._nodes.skipped + self._pods.skipped

    def stats(self) -> dict[str, Any]:
        """Every status figure in one dict (for a status endpoint or logs)."""
        return {
            "synced": self.synced,
            "watching": self.watching,
            "last_error": self.last_error,
            "node_events": self.node_events,
            "pod_events": self.pod_events,
            "node_lists": self._nodes.lists,
            "pod_lists": self._pods.lists,
            "relists": self.relists,
            "skipped": self.skipped,
            **({"groups": self._groups.stats()} if self._groups is not None else {}),
            **({"admission": self._admission.stats()} if self._admission is not None else {}),
        }

    # -- cache plumbing -----------------------------------------------------------------

    def _listed(self) -> None:
        groups_ready = self._groups is None or self._groups.ready.is_set()
        if self._nodes.lists and self._pods.lists and groups_ready and not self._synced.is_set():
            self._cache.mark_synced()
            self._synced.set()
            log.info("initial sync complete")
            if self._on_synced is not None:
                self._on_synced()

    def _replace_nodes(self, nodes: list[Node]) -> int:
        self._cache.replace_nodes(nodes)
        return len(nodes)

    def _replace_pods(self, pods: list[Pod]) -> int:
        self._cache.replace_pods(pods)
        return len(pods)

    def _delete_pod(self, obj: dict[str, Any]) -> None:
        meta = meta_of(obj)
        uid = meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        self._cache.delete_pod(str(uid))


def _convert(convert: Callable[[Any], _T], kind: str, obj: dict[str, Any]) -> _T | None:
    try:
        return convert(obj)
    except InvalidInput as exc:
        log.warning("%s: skipping %s: %s", kind, display_name(obj), exc)
        return None
