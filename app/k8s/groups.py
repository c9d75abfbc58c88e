"""Keep the cache's group objects (PodGroups, Workloads) in step with the API, for the kinds
the API server serves.

Which kinds are served is found by discovery (``GET /apis/GROUP/VERSION``) for every
``app.core.model.groupobjects.GROUP_KINDS`` entry, at start and every ``rediscover`` seconds,
so a CRD installed (or removed) later is picked up (or dropped) without a restart. Each served
kind gets a list+watch loop (``app.k8s.reflector.Reflector``: paged LIST, WATCH from its
resourceVersion, relist on 410 Gone) whose objects the core parsers turn into ``GroupObject``
values for ``ClusterCache.replace_groups`` / ``upsert_groups`` / ``delete_groups``. A kind no
longer served has its loop stopped and its objects removed from the cache.

A group object naming a ``priorityClassName`` without a ``priority`` value gets the class's
value (``PriorityClasses``: one GET per class, cached).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from kubernetes.client import ApiClient, CustomObjectsApi, SchedulingV1Api
from kubernetes.client.exceptions import ApiException

from app.core.model.errors import InvalidInput
from app.core.model.groupobjects import GROUP_KINDS, GroupKind
from app.core.model.values import WORKLOAD, GroupObject, GroupRef
from app.core.state.cache import ClusterCache
from app.k8s.reflector import LIST_TIMEOUT, Kind, Reflector

log = logging.getLogger("muster.k8s.groups")


class GroupApi(Protocol):
    """Discovery and listing of group objects; the real one is ``KubeGroupApi``."""

    def served(self, group: str, version: str) -> frozenset[str] | None:
        """The resource names served at ``group/version``; ``None``: not served (404)."""
        ...

    def lister(self, group: str, version: str, plural: str) -> Callable[..., Any]:
        """A list function for the resource, called like ``CoreV1Api.list_node`` (``limit``,
        ``_continue``, ``watch``, ``resource_version``, ``_preload_content``...)."""
        ...


class KubeGroupApi:
    """``GroupApi`` over the Kubernetes client's ``CustomObjectsApi`` (which serves any API
    group's discovery and cluster-wide lists, built-in ``scheduling.k8s.io`` included)."""

    def __init__(self, api: ApiClient) -> None:
        self._custom = CustomObjectsApi(api)

    def served(self, group: str, version: str) -> frozenset[str] | None:
        try:
            response = self._custom.get_api_resources(
                group, version, _preload_content=False, _request_timeout=LIST_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        body = _json(response)
        resources = body.get("resources") if isinstance(body, dict) else None
        return frozenset(
            str(r.get("name")) for r in resources or () if isinstance(r, dict) and r.get("name")
        )

    def lister(self, group: str, version: str, plural: str) -> Callable[..., Any]:
        return functools.partial(self._custom.list_cluster_custom_object, group, version, plural)


class PriorityClasses:
    """A PriorityClass's value by name (``None``: no such class), one GET per ``ttl`` seconds."""

    def __init__(self, api: ApiClient, ttl: float = 60.0) -> None:
        self._api = SchedulingV1Api(api)
        self._ttl = ttl
        self._lock = threading.Lock()
        self._known: dict[str, tuple[int | None, float]] = {}

    def __call__(self, name: str) -> int | None:
        now = time.monotonic()
        with self._lock:
            known = self._known.get(name)
        if known is not None and now - known[1] < self._ttl:
            return known[0]
        value: int | None = None
        try:
            response = self._api.read_priority_class(
                name, _preload_content=False, _request_timeout=LIST_TIMEOUT
            )
            body = _json(response)
            raw = body.get("value") if isinstance(body, dict) else None
            value = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
        except ApiException as exc:
            if exc.status != 404:
                log.warning("priority class %s unreadable: %s", name, exc.reason)
                return known[0] if known else None
        with self._lock:
            self._known[name] = (value, now)
        return value


@dataclass(slots=True)
class _Served:
    """A kind being watched: at which version, by which loop."""

    version: str
    reflector: Reflector
    stop: threading.Event
    thread: threading.Thread


class GroupSync:
    """List+watch loops for the group kinds the API serves, found by discovery.

    ``priority_of`` resolves a priority class name (``None``: leave priorities unresolved).
    ``rediscover`` is the seconds between discovery rounds. ``ready`` is set once the first
    round is done and every kind it found has been listed once; ``on_ready`` (if set) is called
    then.
    """

    def __init__(
        self,
        cache: ClusterCache,
        api: GroupApi,
        *,
        kinds: Iterable[GroupKind] = GROUP_KINDS,
        priority_of: Callable[[str], int | None] | None = None,
        rediscover: float = 30.0,
        resync_backoff: float = 1.0,
        watch_timeout: int = 5,
    ) -> None:
        self._cache = cache
        self._api = api
        self._kinds = tuple(kinds)
        self._priority_of = priority_of
        self._rediscover = rediscover
        self._backoff = resync_backoff
        self._watch_timeout = watch_timeout
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._served: dict[str, _Served] = {}
        self._first_round = False
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()
        self.on_ready: Callable[[], None] | None = None
        self.discovery_error: str | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the discovery loop (a daemon thread), which starts the watches."""
        if self._thread is not None:
            raise RuntimeError("GroupSync already started")
        self._thread = threading.Thread(target=self._run, name="muster-sync-groups", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop discovery and every watch; wait up to ``timeout`` seconds for the threads."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            served = list(self._served.values())
        for entry in served:
            self._halt(entry, deadline)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.discover()
            self._stop.wait(self._rediscover)

    # -- discovery ------------------------------------------------------------------------

    def discover(self) -> None:
        """One discovery round: start loops for newly served kinds, stop those gone."""
        errors = []
        for kind in self._kinds:
            try:
                version = self._version(kind)
            except Exception as exc:  # the API is unreachable: keep what runs, retry later
                errors.append(f"{kind.kind}.{kind.group}: {exc!r}")
                continue
            with self._lock:
                current = self._served.get(kind.source)
            if current is not None and current.version == version:
                continue
            if current is not None:
                log.info("%s %s/%s no longer served", kind.kind, kind.group, current.version)
                self._halt(current, time.monotonic() + 5.0)
                with self._lock:
                    self._served.pop(kind.source, None)
                self._cache.replace_groups([kind.source], [])
            if version is not None and not self._stop.is_set():
                log.info("%s %s/%s served: watching it", kind.kind, kind.group, version)
                self._watch(kind, version)
        self.discovery_error = "; ".join(errors) or None
        if errors:
            log.warning("group discovery failed: %s", self.discovery_error)
        self._first_round = True
        self._check_ready()

    def _version(self, kind: GroupKind) -> str | None:
        for version in kind.versions:
            resources = self._api.served(kind.group, version)
            if resources is not None and kind.plural in resources:
                return version
        return None

    def _watch(self, kind: GroupKind, version: str) -> None:
        api_version = f"{kind.group}/{version}"
        stop = threading.Event()
        reflector = Reflector(
            Kind(
                f"{kind.plural}.{kind.group}",
                self._api.lister(kind.group, version, kind.plural),
                functools.partial(self._replace, kind, api_version),
                functools.partial(self._upsert, kind, api_version),
                functools.partial(self._delete, kind, api_version),
            ),
            stop,
            self._check_ready,
            self._backoff,
            self._watch_timeout,
        )
        thread = threading.Thread(
            target=reflector.run, name=f"muster-sync-{kind.source}", daemon=True
        )
        with self._lock:
            self._served[kind.source] = _Served(version, reflector, stop, thread)
        thread.start()

    @staticmethod
    def _halt(entry: _Served, deadline: float) -> None:
        entry.stop.set()
        entry.reflector.interrupt()
        entry.thread.join(max(0.0, deadline - time.monotonic()))
        if entry.thread.is_alive():
            log.warning("%s did not stop in time", entry.thread.name)

    def _check_ready(self) -> None:
        if self.ready.is_set() or not self._first_round:
            return
        with self._lock:
            listed = all(e.reflector.lists for e in self._served.values())
        if listed:
            self.ready.set()
            log.info("group objects synced (%s)", ", ".join(self.served) or "none served")
            if self.on_ready is not None:
                self.on_ready()

    # -- status ---------------------------------------------------------------------------

    @property
    def served(self) -> list[str]:
        """The kinds being watched: ``podgroups.scheduling.volcano.sh/v1beta1`` ..."""
        with self._lock:
            entries = dict(self._served)
        by_source = {k.source: k for k in self._kinds}
        return sorted(
            f"{by_source[s].plural}.{by_source[s].group}/{e.version}" for s, e in entries.items()
        )

    def stats(self) -> dict[str, Any]:
        """What is watched, events applied, objects skipped, the last error."""
        with self._lock:
            entries = list(self._served.values())
        errors = [f"{e.reflector.kind.name}: {e.reflector.last_error}" for e in entries
                  if e.reflector.last_error]  # fmt: skip
        if self.discovery_error:
            errors.insert(0, f"discovery: {self.discovery_error}")
        return {
            "served": self.served,
            "ready": self.ready.is_set(),
            "events": sum(e.reflector.events for e in entries),
            "skipped": sum(e.reflector.skipped for e in entries),
            "last_error": "; ".join(errors) or None,
        }

    # -- cache plumbing -------------------------------------------------------------------

    def _parse(self, kind: GroupKind, api_version: str, obj: dict[str, Any]) -> list[GroupObject]:
        groups = kind.parse(obj, api_version)
        if self._priority_of is None:
            return groups
        return [
            replace(g, priority=self._priority_of(g.priority_class))
            if g.priority is None and g.priority_class
            else g
            for g in groups
        ]

    def _replace(self, kind: GroupKind, api_version: str, items: list[dict[str, Any]]) -> int:
        groups: list[GroupObject] = []
        used = 0
        for obj in items:
            try:
                groups.extend(self._parse(kind, api_version, obj))
                used += 1
            except InvalidInput as exc:
                log.warning("%s: skipping %s: %s", kind.kind, _display(obj), exc)
        self._cache.replace_groups([kind.source], groups)
        return used

    def _upsert(self, kind: GroupKind, api_version: str, obj: dict[str, Any]) -> None:
        groups = self._parse(kind, api_version, obj)
        if kind.source == WORKLOAD:  # groups the Workload no longer lists go
            namespace, name = _namespace_name(obj)
            kept = {g.ref for g in groups}
            self._cache.delete_groups(
                g.ref for g in self._cache.groups()
                if g.source == WORKLOAD and g.namespace == namespace and g.object_name == name
                and g.ref not in kept
            )  # fmt: skip
        self._cache.upsert_groups(groups)

    def _delete(self, kind: GroupKind, api_version: str, obj: dict[str, Any]) -> None:
        namespace, name = _namespace_name(obj)
        if kind.source == WORKLOAD:
            refs = [
                g.ref
                for g in self._cache.groups()
                if g.source == WORKLOAD and g.namespace == namespace and g.object_name == name
            ]
        else:
            refs = [GroupRef(kind.source, namespace, name)]
        self._cache.delete_groups(refs)


def _json(response: Any) -> Any:
    """The body of a raw (``_preload_content=False``) response."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def _namespace_name(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def _display(obj: dict[str, Any]) -> str:
    namespace, name = _namespace_name(obj)
    return f"{namespace}/{name}"
