"""Keep ``ClusterCache`` in step with the API: one list+watch loop for nodes, one for pods.

Each loop LISTs (paged), replaces the cache's set, then WATCHes from the list's
resourceVersion and applies every event. A watch ends every few seconds (``timeout_seconds``)
and resumes from the last resourceVersion seen (bookmarks included), so ``stop()`` is noticed
promptly even on a quiet cluster; ``stop()`` also shuts the open watch socket down at once.
410 Gone (the resourceVersion left the server's window) means relist. Other errors are logged
and retried with capped exponential backoff; the threads never die of an API error.

Objects are parsed from the raw JSON (``_preload_content=False``) and handed straight to
``app.core.model.parse``: the client's model deserialisation costs far more than the conversion.
LIST pages and watch events of nodes and pods are decoded with msgspec into only the fields
Muster reads (``managedFields``, conditions, images ... are skipped, not decoded): more than
half of a pod's JSON is its ``managedFields``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from app.core.model.errors import InvalidInput
from app.core.model.parse import node_from_dict, pod_from_dict
from app.core.model.values import Node, Pod
from app.core.state.cache import ClusterCache

if TYPE_CHECKING:
    from app.k8s.groups import GroupSync

log = logging.getLogger("muster.k8s.sync")

PAGE_SIZE = 500
#: (connect, read) seconds for LIST pages.
LIST_TIMEOUT = (5.0, 60.0)
#: Extra read time beyond the watch's own ``timeout_seconds`` before the client gives up.
WATCH_READ_GRACE = 10.0
MAX_BACKOFF = 30.0

_T = TypeVar("_T")


class _Meta(msgspec.Struct):
    """The object metadata Muster reads (``Any``: ``app.core.model.parse`` validates)."""

    name: Any = None
    namespace: Any = None
    uid: Any = None
    resourceVersion: Any = None  # noqa: N815 (the API's name)
    labels: Any = None
    annotations: Any = None
    creationTimestamp: Any = None  # noqa: N815
    deletionTimestamp: Any = None  # noqa: N815


class _Condition(msgspec.Struct):
    """A pod condition's fields Muster reads."""

    type: Any = None
    status: Any = None


class _Status(msgspec.Struct):
    """Pod and node status fields Muster reads."""

    phase: Any = None
    startTime: Any = None  # noqa: N815
    conditions: list[_Condition] | None = None
    allocatable: Any = None
    capacity: Any = None


class _Item(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: Any = None
    status: _Status = msgspec.field(default_factory=_Status)


class _ListMeta(msgspec.Struct):
    resourceVersion: Any = None  # noqa: N815
    continue_: Any = msgspec.field(default=None, name="continue")


class _Page(msgspec.Struct):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[_Item] | None = None


_PAGE_DECODER = msgspec.json.Decoder(_Page)


def _slim(item: _Item) -> dict[str, Any]:
    """An ``_Item`` as the API JSON dict ``app.core.model.parse`` takes (nulls left out)."""
    meta = {f: v for f in _Meta.__struct_fields__ if (v := getattr(item.metadata, f)) is not None}
    status = {f: v for f in _Status.__struct_fields__ if (v := getattr(item.status, f)) is not None}
    if item.status.conditions is not None:
        status["conditions"] = [
            {"type": c.type, "status": c.status} for c in item.status.conditions
        ]
    return {"metadata": meta, "spec": item.spec, "status": status}


def decode_page(data: bytes) -> dict[str, Any]:
    """A LIST page of nodes or pods with only the fields Muster reads; ``json.loads`` when the
    page does not have the expected shape (``parse`` then names the odd field)."""
    try:
        page = _PAGE_DECODER.decode(data)
    except msgspec.ValidationError:
        body: dict[str, Any] = json.loads(data)
        return body
    meta = {"resourceVersion": page.metadata.resourceVersion, "continue": page.metadata.continue_}
    return {"metadata": meta, "items": [_slim(item) for item in page.items or ()]}


class _Event(msgspec.Struct):
    type: Any
    object: msgspec.Raw


_EVENT_DECODER = msgspec.json.Decoder(_Event)
_ITEM_DECODER = msgspec.json.Decoder(_Item)
#: Watch events whose object is a node or pod (a BOOKMARK's carries its resourceVersion only).
_OBJECT_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})


def decode_event(line: str) -> dict[str, Any]:
    """A watch event of a node or pod with only the fields Muster reads in its object, as
    ``decode_page`` reads a LIST page; ``json.loads`` for any other shape (an ERROR's
    ``Status``, an odd object: ``parse`` then names the odd field, a bad line raises as
    ``json.loads`` does)."""
    try:
        event = _EVENT_DECODER.decode(line)
        if event.type in _OBJECT_EVENTS:
            return {"type": event.type, "object": _slim(_ITEM_DECODER.decode(event.object))}
    except msgspec.DecodeError:
        pass
    body: dict[str, Any] = json.loads(line)
    return body


class _Gone(Exception):
    """The API answered 410 Gone: the resourceVersion is too old, relist."""


class _SyncError(Exception):
    """The API answered something unusable (an ERROR event other than 410, a bad body)."""


@dataclass(frozen=True, slots=True)
class Kind:
    """How one resource type is listed, converted and applied to the cache."""

    name: str
    list_fn: Callable[..., Any]
    #: Gets every listed item (converted by ``convert`` if given); returns how many it kept.
    replace: Callable[[list[Any]], int]
    upsert: Callable[[dict[str, Any]], object]  # what it returns is ignored
    delete: Callable[[dict[str, Any]], object]  # what it returns is ignored
    #: Converts each listed object as its page arrives (``None``: skip it), so a large LIST
    #: never holds every raw object at once; without it ``replace`` gets the raw objects.
    convert: Callable[[dict[str, Any]], Any] | None = None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _display_name(obj: Mapping[str, Any]) -> str:
    meta = _meta(obj)
    name = meta.get("name", "?")
    return f"{meta['namespace']}/{name}" if meta.get("namespace") else str(name)


def _status_text(exc: ApiException) -> str:
    """``"410 Expired: too old resource version"`` from an ApiException's Status body."""
    message = ""
    try:
        body = json.loads(exc.body or "")
        if isinstance(body, dict):
            message = str(body.get("message") or "")
    except ValueError:
        pass
    return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")


class Reflector:
    """One list+watch loop; runs in its own thread until ``stop`` is set."""

    def __init__(
        self,
        kind: Kind,
        stop: threading.Event,
        on_listed: Callable[[], None],
        backoff: float,
        watch_timeout: int,
    ) -> None:
        self.kind = kind
        self._stop = stop
        self._on_listed = on_listed
        self._initial_backoff = backoff
        self._watch_timeout = watch_timeout
        #: Where the next watch starts; ``None`` means list first.
        self.resource_version: str | None = None
        self.events = 0
        self.lists = 0
        self.relists = 0
        self.skipped = 0
        self.last_error: str | None = None
        self._backoff = backoff
        self._response_lock = threading.Lock()
        self._response: Any = None

    # -- loop ---------------------------------------------------------------------------

    def run(self) -> None:
        gone_in_a_row = 0
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self.resource_version = self._list()
                self._watch(self.resource_version)
                gone_in_a_row = 0
            except _Gone as exc:
                if self._stop.is_set():
                    break
                log.info("%s: %s; relisting", self.kind.name, exc)
                self.resource_version = None
                self.relists += 1
                gone_in_a_row += 1
                # A relist should cure 410 at once; if it does not, do not hammer the API.
                if gone_in_a_row > 1:
                    self._pause()
            except Exception as exc:
                if self._stop.is_set():
                    break
                text = _status_text(exc) if isinstance(exc, ApiException) else repr(exc)
                self.last_error = text
                log.warning(
                    "%s: list/watch failed (%s); retrying in %.2fs",
                    self.kind.name,
                    text,
                    self._backoff,
                )
                self._pause()

    def _pause(self) -> None:
        self._stop.wait(self._backoff)
        self._backoff = min(self._backoff * 2, MAX_BACKOFF)

    def _healthy(self) -> None:
        self.last_error = None
        self._backoff = self._initial_backoff

    @property
    def watching(self) -> bool:
        """Whether a watch stream is open right now."""
        return self._response is not None

    def interrupt(self) -> None:
        """Unblock a watch read in progress (used by ``stop()``)."""
        with self._response_lock:
            response = self._response
        connection = getattr(response, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            # socket.socket.shutdown, not SSLSocket's: that one drops its SSL object under
            # the feet of the reading thread.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    # -- list ---------------------------------------------------------------------------

    def _list(self) -> str:
        """LIST every object (paged), replace the cache's set; return the resourceVersion.

        The next page is fetched in a helper thread while this one is converted, so the API
        server's work on a page overlaps Muster's.
        """
        items: list[Any] = []
        listed = 0
        resource_version = ""
        with concurrent.futures.ThreadPoolExecutor(1, f"muster-list-{self.kind.name}") as pool:
            pending = pool.submit(self._page, None)
            while True:
                body = pending.result()
                meta = _meta(body)
                resource_version = str(meta.get("resourceVersion") or "")
                token = meta.get("continue") or None
                if token:
                    pending = pool.submit(self._page, str(token))
                page = [x for x in body.get("items") or () if isinstance(x, dict)]
                del body  # let the raw page go before the next one is read
                listed += len(page)
                convert = self.kind.convert
                if convert is not None:
                    items.extend(y for y in map(convert, page) if y is not None)
                else:
                    items.extend(page)
                del page
                if not token:
                    break
        if not resource_version:
            raise _SyncError(f"{self.kind.name}: LIST answered without a resourceVersion")
        started = time.perf_counter()
        count = self.kind.replace(items)
        self.skipped += listed - count
        self.lists += 1
        self._healthy()
        log.info(
            "%s: listed %d at resourceVersion %s (applied in %.3fs)",
            self.kind.name,
            count,
            resource_version,
            time.perf_counter() - started,
        )
        self._on_listed()
        return resource_version

    def _page(self, token: str | None) -> dict[str, Any]:
        """One LIST page (the first when ``token`` is ``None``)."""
        kwargs: dict[str, Any] = {"limit": PAGE_SIZE}
        if token:
            kwargs["_continue"] = token
        try:
            return self._get_json(**kwargs)
        except ApiException as exc:
            if exc.status == 410:  # the continue token expired
                raise _Gone(_status_text(exc)) from exc
            raise

    def _get_json(self, **kwargs: Any) -> dict[str, Any]:
        response = self.kind.list_fn(
            _preload_content=False, _request_timeout=LIST_TIMEOUT, **kwargs
        )
        try:
            data = response.data
        finally:
            response.release_conn()
        body = decode_page(data) if self.kind.convert is not None else json.loads(data)
        if not isinstance(body, dict):
            raise _SyncError(f"{self.kind.name}: LIST answered {type(body).__name__}")
        return body

    # -- watch --------------------------------------------------------------------------

    def _watch(self, resource_version: str) -> None:
        """Watch from ``resource_version`` until the server ends the stream (or ``stop``)."""
        try:
            response = self.kind.list_fn(
                watch=True,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self._watch_timeout,
                _preload_content=False,
                _request_timeout=(LIST_TIMEOUT[0], self._watch_timeout + WATCH_READ_GRACE),
            )
        except ApiException as exc:
            if exc.status == 410:  # some servers refuse an expired watch with a plain 410
                raise _Gone(_status_text(exc)) from exc
            raise
        with self._response_lock:
            self._response = response
        try:
            if self._stop.is_set():  # stop() may have come before the response was published
                return
            self._healthy()
            # kubernetes' iter_resp_lines is unannotated; it yields decoded lines.
            lines: Iterator[str] = iter_resp_lines(response)  # type: ignore[no-untyped-call]
            for line in lines:
                if line:
                    self._handle(line)
                if self._stop.is_set():
                    return
        finally:
            with self._response_lock:
                self._response = None
            response.close()
            response.release_conn()

    def _handle(self, line: str) -> None:
        event = decode_event(line) if self.kind.convert is not None else json.loads(line)
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise _SyncError(f"{self.kind.name}: watch event without an object: {line[:200]}")
        if kind == "ERROR":
            # A Status object: 410 is "too old resource version" (Expired / Gone).
            text = f"{obj.get('code')} {obj.get('reason')}: {obj.get('message')}"
            if obj.get("code") == 410:
                raise _Gone(text)
            raise _SyncError(f"{self.kind.name}: watch error {text}")
        if kind in ("ADDED", "MODIFIED"):
            self._apply(self.kind.upsert, obj)
        elif kind == "DELETED":
            self._apply(self.kind.delete, obj)
        elif kind != "BOOKMARK":
            log.warning("%s: ignoring watch event of type %r", self.kind.name, kind)
        resource_version = _meta(obj).get("resourceVersion")
        if resource_version:
            self.resource_version = str(resource_version)

    def _apply(self, action: Callable[[dict[str, Any]], object], obj: dict[str, Any]) -> None:
        try:
            action(obj)
        except InvalidInput as exc:
            self.skipped += 1
            log.warning("%s: skipping %s: %s", self.kind.name, _display_name(obj), exc)
        except Exception:
            # One odd object must not stall the stream (it would recur on every resume).
            self.skipped += 1
            log.exception("%s: skipping %s", self.kind.name, _display_name(obj))
        else:
            self.events += 1


class ClusterSync:
    """Feeds a ``ClusterCache`` from the Kubernetes API with two daemon threads.

    ``api`` is an ``ApiClient`` (or a ``CoreV1Api``-like object, which is how tests inject a
    fake). ``resync_backoff`` is the first retry delay after an error; it doubles up to 30 s.
    ``watch_timeout`` is the server-side watch duration, which bounds how long a loop can go
    without looking at the stop flag. ``groups`` (``app.k8s.groups``) also keeps the group
    objects (PodGroups ...) in step; the cache counts as synced once they are listed too.
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
        on_synced: Callable[[], None] | None = None,
    ) -> None:
        """``on_synced`` (if any) runs once, in the watch thread, when the initial lists are in
        the cache."""
        self._cache = cache
        self._groups = groups
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
                lambda obj: cache.delete_node(str(_meta(obj).get("name", ""))),
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

    def stop(self, timeout: float = 5.0) -> None:
        """Stop both loops and wait up to ``timeout`` seconds for their threads to end."""
        self._stop.set()
        for reflector in (self._nodes, self._pods):
            reflector.interrupt()
        deadline = time.monotonic() + timeout
        if self._groups is not None:
            self._groups.stop(timeout)
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
        meta = _meta(obj)
        uid = meta.get("uid") or f"{meta.get('namespace') or 'default'}/{meta.get('name')}"
        self._cache.delete_pod(str(uid))


def _convert(convert: Callable[[Any], _T], kind: str, obj: dict[str, Any]) -> _T | None:
    try:
        return convert(obj)
    except InvalidInput as exc:
        log.warning("%s: skipping %s: %s", kind, _display_name(obj), exc)
        return None
