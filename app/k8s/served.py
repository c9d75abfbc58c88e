"""List+watch loops for API kinds that a cluster may or may not serve, found by discovery.

Which kinds are served is found by discovery (``GET /apis/GROUP/VERSION``) for every kind a
``ServedKinds`` is given, at start and every ``rediscover`` seconds, so a CRD or an API
version turned on (or off) later is picked up (or dropped) without a restart. Each served
kind gets a list+watch loop (``app.k8s.reflector.Reflector``: paged LIST, WATCH from its
resourceVersion, relist on 410 Gone) whose objects go to the subclass's ``_replace`` /
``_upsert`` / ``_delete``; a kind no longer served has its loop stopped and ``_dropped``
called. Users: ``app.k8s.groups`` (PodGroups, Workloads) and ``app.k8s.admission`` (what
admission sees of Bindings).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypedDict, TypeVar, Unpack

from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from app.k8s.reflector import LIST_TIMEOUT, Kind, Reflector

log = logging.getLogger("muster.k8s.served")


class GroupApi(Protocol):
    """Discovery and listing of an API group's kinds; the real one is ``KubeGroupApi``."""

    def served(self, group: str, version: str) -> frozenset[str] | None:
        """The resource names served at ``group/version``; ``None``: not served (404)."""
        ...

    def lister(self, group: str, version: str, plural: str) -> Callable[..., Any]:
        """A list function for the resource, called like ``CoreV1Api.list_node`` (``limit``,
        ``_continue``, ``watch``, ``resource_version``, ``_preload_content``...)."""
        ...


class KubeGroupApi:
    """``GroupApi`` over the Kubernetes client's ``CustomObjectsApi`` (which serves any API
    group's discovery and cluster-wide lists, built-in groups such as ``scheduling.k8s.io``
    and ``admissionregistration.k8s.io`` included)."""

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
        body = response_json(response)
        resources = body.get("resources") if isinstance(body, dict) else None
        return frozenset(
            str(r.get("name")) for r in resources or () if isinstance(r, dict) and r.get("name")
        )

    def lister(self, group: str, version: str, plural: str) -> Callable[..., Any]:
        return functools.partial(self._custom.list_cluster_custom_object, group, version, plural)


class ServedKind(Protocol):
    """What discovery needs of a kind: ``versions`` in order of preference (the first one the
    API server serves is read); ``source`` names it among its ``ServedKinds``."""

    @property
    def source(self) -> str: ...
    @property
    def group(self) -> str: ...
    @property
    def versions(self) -> tuple[str, ...]: ...
    @property
    def plural(self) -> str: ...
    @property
    def kind(self) -> str: ...


K = TypeVar("K", bound=ServedKind)


@dataclass(slots=True)
class _Served:
    """A kind being watched: at which version, by which loop."""

    version: str
    reflector: Reflector
    stop: threading.Event
    thread: threading.Thread


class LoopOptions(TypedDict, total=False):
    """How ``ServedKinds`` paces its loops: seconds between discovery rounds (default 30),
    the first retry delay after an error (1 s, doubling), the server-side watch duration (5 s,
    which bounds how long a loop goes without looking at its stop flag)."""

    rediscover: float
    resync_backoff: float
    watch_timeout: int


class ServedKinds(Generic[K]):
    """Discovery and one list+watch loop per served kind of ``kinds`` (see the module).

    ``options`` pace the loops (``LoopOptions``). ``ready`` is set once the first
    round is done and every kind it found has been listed once; ``on_ready`` (if set) is called
    then. ``name`` names the threads (``muster-sync-NAME``); ``what`` names the objects in the
    logs (``WHAT synced``, ``WHAT discovery failed``).
    """

    #: Whether a discovery round that could not ask about every kind (the API unreachable)
    #: counts towards ``ready``; if not, ``ready`` waits for a round that asked about all.
    READY_DESPITE_ERRORS = True

    def __init__(
        self,
        api: GroupApi,
        kinds: Iterable[K],
        *,
        name: str,
        what: str,
        **options: Unpack[LoopOptions],
    ) -> None:
        self._api = api
        self._kinds = tuple(kinds)
        self._name = name
        self._what = what
        self._rediscover = options.get("rediscover", 30.0)
        self._backoff = options.get("resync_backoff", 1.0)
        self._watch_timeout = options.get("watch_timeout", 5)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._served: dict[str, _Served] = {}
        self._first_round = False
        self._thread: threading.Thread | None = None
        self.ready = threading.Event()
        self.on_ready: Callable[[], None] | None = None
        self.discovery_error: str | None = None

    # -- what a subclass does with the objects ---------------------------------------------

    def _replace(self, kind: K, api_version: str, items: list[dict[str, Any]]) -> int:
        """Every object of ``kind`` listed; returns how many were used."""
        raise NotImplementedError

    def _upsert(self, kind: K, api_version: str, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    def _delete(self, kind: K, api_version: str, obj: dict[str, Any]) -> None:
        raise NotImplementedError

    def _dropped(self, kind: K) -> None:
        """``kind`` is no longer served: forget its objects."""
        raise NotImplementedError

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the discovery loop (a daemon thread), which starts the watches."""
        if self._thread is not None:
            raise RuntimeError(f"{type(self).__name__} already started")
        self._thread = threading.Thread(
            target=self._run, name=f"muster-sync-{self._name}", daemon=True
        )
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
                self._dropped(kind)
            if version is not None and not self._stop.is_set():
                log.info("%s %s/%s served: watching it", kind.kind, kind.group, version)
                self._watch(kind, version)
        self.discovery_error = "; ".join(errors) or None
        if errors:
            log.warning("%s discovery failed: %s", self._what, self.discovery_error)
        if self.READY_DESPITE_ERRORS or not errors:
            self._first_round = True
        self._check_ready()

    def _version(self, kind: K) -> str | None:
        for version in kind.versions:
            resources = self._api.served(kind.group, version)
            if resources is not None and kind.plural in resources:
                return version
        return None

    def _watch(self, kind: K, version: str) -> None:
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
            log.info("%s synced (%s)", self._what, ", ".join(self.served) or "none served")
            if self.on_ready is not None:
                self.on_ready()

    # -- status ---------------------------------------------------------------------------

    def healthy(self) -> bool:
        """Whether the last discovery round asked about every kind and no loop is failing."""
        with self._lock:
            entries = list(self._served.values())
        return self.discovery_error is None and all(e.reflector.last_error is None
                                                    for e in entries)  # fmt: skip

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


def response_json(response: Any) -> Any:
    """The body of a raw (``_preload_content=False``) response."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()
