"""Cached readers for the admission webhook: workload objects (pod owners) and namespaces.

The webhook must answer within its ``timeoutSeconds`` (2 s in deploy/), so every read is one
GET with a short timeout, and answers are cached:

* found objects for ``ttl`` (30 s; a Job's size rarely changes while its pods are created),
* "not found" for ``missing_ttl`` (5 s), a kind the API server does not serve (its CRD is not
  installed) for ``unserved_ttl`` (60 s), and any other failure for ``error_ttl`` (2 s), so a
  burst of pods does not hammer a struggling API server;
* concurrent misses for one key share a single GET: the 64 pods of a Job are admitted in
  parallel, and the Job is read once.

Failures never raise: they come back as ``Fetched(None, problem)`` (``NamespaceMeta.problem``)
with a sentence for the pod's admission warning. Objects are kept as API JSON (camelCase dicts),
the form ``app.core.admission.workloads`` reads.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError
from urllib3.exceptions import TimeoutError as Urllib3Timeout

from app.core.admission.pods import Fetched, NamespaceMeta
from app.core.admission.workloads import JOB, WorkloadKind
from app.core.state.recent import RecentMap

log = logging.getLogger("muster.k8s.owners")

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: (connect, read) seconds per GET: two reads (namespace, owner) fit in the webhook's 2 s.
DEFAULT_TIMEOUT = (0.3, 0.6)


class Reader(Protocol):
    """The raw GETs (``ApiException`` or urllib3 errors on failure); faked in tests."""

    def owner(self, kind: WorkloadKind, namespace: str, name: str) -> dict[str, Any]: ...
    def namespace(self, name: str) -> dict[str, Any]: ...


class KubeReader:
    """``Reader`` over the Kubernetes client: BatchV1Api for Jobs, CustomObjectsApi for CRDs."""

    def __init__(self, api: ApiClient, timeout: tuple[float, float] = DEFAULT_TIMEOUT) -> None:
        self._batch = BatchV1Api(api)
        self._custom = CustomObjectsApi(api)
        self._core = CoreV1Api(api)
        self._timeout = timeout

    def _json(self, response: Any) -> dict[str, Any]:
        try:
            body = json.loads(response.data)
        finally:
            response.release_conn()
        if not isinstance(body, dict):
            raise ValueError(f"the API answered {type(body).__name__}, not an object")
        return body

    def owner(self, kind: WorkloadKind, namespace: str, name: str) -> dict[str, Any]:
        """GET one workload object as API JSON."""
        common: dict[str, Any] = {"_preload_content": False, "_request_timeout": self._timeout}
        if kind == JOB:
            return self._json(self._batch.read_namespaced_job(name, namespace, **common))
        return self._json(
            self._custom.get_namespaced_custom_object(
                kind.group, kind.version, namespace, kind.plural, name, **common
            )
        )

    def namespace(self, name: str) -> dict[str, Any]:
        """GET one Namespace as API JSON."""
        response = self._core.read_namespace(
            name, _preload_content=False, _request_timeout=self._timeout
        )
        return self._json(response)


@dataclass(slots=True)
class _Entry(Generic[V]):
    value: V
    expires: float


class TTLCache(Generic[K, V]):
    """A bounded map whose entries expire; concurrent misses of one key share one load.

    ``load()`` returns ``(value, ttl)``; it must not raise. Thread-safe.
    """

    def __init__(
        self, max_entries: int = 4096, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._lock = threading.Lock()
        self._entries: RecentMap[K, _Entry[V]] = RecentMap(max_entries)
        self._loading: dict[K, threading.Event] = {}
        self._clock = clock
        self.loads = 0

    def get(self, key: K, load: Callable[[], tuple[V, float]], wait: float) -> V:
        """The cached value of ``key``, loading it when absent or expired.

        When another thread is loading ``key``, wait up to ``wait`` seconds for its result,
        then load independently.
        """
        with self._lock:
            value = self._fresh(key)
            if value is not None:
                return value.value
            event = self._loading.get(key)
            leader = event is None
            if leader:
                event = self._loading[key] = threading.Event()
        assert event is not None
        if not leader:
            event.wait(wait)
            with self._lock:
                value = self._fresh(key)
            if value is not None:
                return value.value
        try:
            result, ttl = load()
            with self._lock:
                self.loads += 1
                self._entries.put(key, _Entry(result, self._clock() + ttl))
            return result
        finally:
            if leader:
                with self._lock:
                    self._loading.pop(key, None)
                event.set()

    def peek(self, key: K) -> V | None:
        """The cached value of ``key`` if fresh, else ``None`` (never loads)."""
        with self._lock:
            entry = self._fresh(key)
        return None if entry is None else entry.value

    def _fresh(self, key: K) -> _Entry[V] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires <= self._clock():
            self._entries.discard(key)
            return None
        self._entries.touch(key)
        return entry

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


def _status(exc: ApiException) -> dict[str, Any]:
    try:
        body = json.loads(exc.body or "")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def _failure(exc: BaseException, timeout: tuple[float, float]) -> str:
    """A sentence for a failed GET that is neither 404 nor 403."""
    if isinstance(exc, ApiException) and exc.status:
        message = _status(exc).get("message") or exc.reason or ""
        return f"the API server answered {exc.status}: {message}"
    if isinstance(exc, Urllib3Timeout) or "timed out" in str(exc).lower():
        return f"the API server did not answer within {sum(timeout):.1f}s"
    return f"the API server is unreachable ({exc})"


def _reader(
    api: ApiClient | None, reader: Reader | None, timeout: tuple[float, float], who: str
) -> Reader:
    """The given reader, else one over ``api``."""
    if reader is not None:
        return reader
    if api is None:
        raise ValueError(f"{who} needs an ApiClient or a reader")
    return KubeReader(api, timeout)


class OwnerLister:
    """Reads workload objects for the webhook (an ``app.core.admission.pods.OwnerFetch``)."""

    def __init__(
        self,
        api: ApiClient | None = None,
        *,
        reader: Reader | None = None,
        ttl: float = 30.0,
        missing_ttl: float = 5.0,
        unserved_ttl: float = 60.0,
        error_ttl: float = 2.0,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reader = _reader(api, reader, timeout, "OwnerLister")
        self._ttl, self._missing_ttl = ttl, missing_ttl
        self._unserved_ttl, self._error_ttl = unserved_ttl, error_ttl
        self._timeout = timeout
        self.cache: TTLCache[tuple[WorkloadKind, str, str], Fetched] = TTLCache(clock=clock)

    def __call__(self, kind: WorkloadKind, namespace: str, name: str) -> Fetched:
        """The object ``kind`` ``namespace/name``, or why it cannot be read."""
        return self.cache.get(
            (kind, namespace, name), lambda: self._load(kind, namespace, name), sum(self._timeout)
        )

    def peek(self, kind: WorkloadKind, namespace: str, name: str) -> Fetched | None:
        """The cached answer for the object, if any (never reads the API)."""
        return self.cache.peek((kind, namespace, name))

    def _load(self, kind: WorkloadKind, namespace: str, name: str) -> tuple[Fetched, float]:
        what = f"{kind.kind} {namespace}/{name}"
        try:
            return Fetched(self._reader.owner(kind, namespace, name)), self._ttl
        except ApiException as exc:
            status = _status(exc)
            if exc.status == 404:
                if (status.get("details") or {}).get("name") == name:
                    return Fetched(None, str(status.get("message") or "not found")), (
                        self._missing_ttl
                    )
                # No object named in the Status: the resource itself is unknown.
                problem = (
                    f"the API server does not serve {kind.resource}/{kind.version} "
                    f"(CRD not installed?)"
                )
                return Fetched(None, problem), self._unserved_ttl
            if exc.status == 403:
                problem = f"forbidden: Muster's service account needs get on {kind.resource}"
                log.warning("cannot read %s: %s", what, status.get("message") or exc.reason)
                return Fetched(None, problem), self._error_ttl
            problem = _failure(exc, self._timeout)
        except (HTTPError, OSError, ValueError) as exc:
            problem = _failure(exc, self._timeout)
        log.warning("cannot read %s: %s", what, problem)
        return Fetched(None, problem), self._error_ttl


class NamespaceLister:
    """Reads namespaces' labels and annotations for the webhook, cached for ``ttl`` seconds.

    The TTL bounds how long labelling a namespace ``muster.io/managed=true`` (or changing its
    default queue) takes to reach new pods.
    """

    def __init__(
        self,
        api: ApiClient | None = None,
        *,
        reader: Reader | None = None,
        ttl: float = 10.0,
        error_ttl: float = 2.0,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reader = _reader(api, reader, timeout, "NamespaceLister")
        self._ttl, self._error_ttl = ttl, error_ttl
        self._timeout = timeout
        self.cache: TTLCache[str, NamespaceMeta] = TTLCache(clock=clock)

    def __call__(self, name: str) -> NamespaceMeta:
        """Labels and annotations of namespace ``name`` (empty, with a problem, on failure)."""
        return self.cache.get(name, lambda: self._load(name), sum(self._timeout))

    def peek(self, name: str) -> NamespaceMeta | None:
        """The cached answer for namespace ``name``, if any (never reads the API)."""
        return self.cache.peek(name)

    def _load(self, name: str) -> tuple[NamespaceMeta, float]:
        try:
            meta = self._reader.namespace(name).get("metadata") or {}
        except ApiException as exc:
            if exc.status == 404:
                return NamespaceMeta(problem=f"namespace {name} not found"), self._error_ttl
            problem = _failure(exc, self._timeout)
        except (HTTPError, OSError, ValueError) as exc:
            problem = _failure(exc, self._timeout)
        else:
            labels = meta.get("labels") or {}
            annotations = meta.get("annotations") or {}
            return NamespaceMeta(dict(labels), dict(annotations)), self._ttl
        log.warning("cannot read namespace %s: %s", name, problem)
        return NamespaceMeta(problem=problem), self._error_ttl
