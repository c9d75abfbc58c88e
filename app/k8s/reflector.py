"""One list+watch loop for one resource type (``Reflector``), and the slim decoders it reads
the API's answers with.

A ``Reflector`` LISTs (paged), hands the whole set over, then WATCHes from the list's
resourceVersion and applies every event. A watch ends every few seconds (``timeout_seconds``)
and resumes from the last resourceVersion seen (bookmarks included), so ``interrupt()`` and the
stop flag are noticed promptly even on a quiet cluster. 410 Gone (the resourceVersion left the
server's window) means relist. Other errors are logged and retried with capped exponential
backoff; the thread never dies of an API error.

Objects are read from the raw JSON (``_preload_content=False``): the client's model
deserialisation costs far more than the conversion. LIST pages and watch events of nodes and
pods are decoded with msgspec into only the fields Muster reads (``managedFields``, conditions,
images ... are skipped, not decoded): more than half of a pod's JSON is its ``managedFields``.
``app.k8s.sync`` runs one for nodes and one for pods, ``app.k8s.groups`` one per group kind.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from app.core.model.errors import InvalidInput

# The watch loops log as they did before they left app.k8s.sync (log filters name it).
log = logging.getLogger("muster.k8s.sync")

PAGE_SIZE = 500
#: (connect, read) seconds for LIST pages.
LIST_TIMEOUT = (5.0, 60.0)
#: Extra read time beyond the watch's own ``timeout_seconds`` before the client gives up.
WATCH_READ_GRACE = 10.0
MAX_BACKOFF = 30.0


class _Meta(msgspec.Struct):
    """The object metadata Muster reads (``Any``: ``app.core.model.parse`` validates)."""

    name: Any = None
    namespace: Any = None
    uid: Any = None
    resourceVersion: Any = None  # noqa: N815 (the API's name)
    labels: Any = None
    annotations: Any = None
    #: A ReplicaSet's or StatefulSet's pods get kube-scheduler's default spreading
    #: (``Pod.soft_preferences``).
    ownerReferences: Any = None  # noqa: N815
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


def meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """An object's ``metadata`` (empty when it has none, or none that is an object)."""
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def display_name(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` of an object (``name`` alone for a cluster-scoped one), for logs."""
    meta = meta_of(obj)
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
                meta = meta_of(body)
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
        resource_version = meta_of(obj).get("resourceVersion")
        if resource_version:
            self.resource_version = str(resource_version)

    def _apply(self, action: Callable[[dict[str, Any]], object], obj: dict[str, Any]) -> None:
        try:
            action(obj)
        except InvalidInput as exc:
            self.skipped += 1
            log.warning("%s: skipping %s: %s", self.kind.name, display_name(obj), exc)
        except Exception:
            # One odd object must not stall the stream (it would recur on every resume).
            self.skipped += 1
            log.exception("%s: skipping %s", self.kind.name, display_name(obj))
        else:
            self.events += 1
