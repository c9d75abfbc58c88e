"""Keep the cache's group objects (PodGroups, Workloads) in step with the API, for the kinds
the API server serves.

Discovery and the list+watch loops are ``app.k8s.served.ServedKinds``'s, over every
``app.core.model.groupobjects.GROUP_KINDS`` entry; the objects the loops bring are turned by
the core parsers into ``GroupObject`` values for ``ClusterCache.replace_groups`` /
``upsert_groups`` / ``delete_groups``. A kind no longer served has its objects removed from
the cache.

A group object naming a ``priorityClassName`` without a ``priority`` value gets the class's
value (``PriorityClasses``: one GET per class, cached).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Unpack

from kubernetes.client import ApiClient, SchedulingV1Api
from kubernetes.client.exceptions import ApiException

from app.core.model.errors import InvalidInput
from app.core.model.groupobjects import GROUP_KINDS, GroupKind
from app.core.model.values import WORKLOAD, GroupObject, GroupRef
from app.core.state.cache import ClusterCache
from app.k8s.reflector import LIST_TIMEOUT
from app.k8s.served import GroupApi, LoopOptions, ServedKinds, response_json

log = logging.getLogger("muster.k8s.groups")


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
            body = response_json(response)
            raw = body.get("value") if isinstance(body, dict) else None
            value = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
        except ApiException as exc:
            if exc.status != 404:
                log.warning("priority class %s unreadable: %s", name, exc.reason)
                return known[0] if known else None
        with self._lock:
            self._known[name] = (value, now)
        return value


class GroupSync(ServedKinds[GroupKind]):
    """List+watch loops for the group kinds the API serves, found by discovery.

    ``priority_of`` resolves a priority class name (``None``: leave priorities unresolved);
    ``options`` pace the loops (``app.k8s.served.LoopOptions``). ``ready`` is set once the
    first round is done and every kind it found has been listed once; ``on_ready`` (if set)
    is called then.
    """

    def __init__(
        self,
        cache: ClusterCache,
        api: GroupApi,
        *,
        kinds: Iterable[GroupKind] = GROUP_KINDS,
        priority_of: Callable[[str], int | None] | None = None,
        **options: Unpack[LoopOptions],
    ) -> None:
        super().__init__(api, kinds, name="groups", what="group objects", **options)
        self._cache = cache
        self._priority_of = priority_of

    # -- cache plumbing -------------------------------------------------------------------

    def _dropped(self, kind: GroupKind) -> None:
        self._cache.replace_groups([kind.source], [])

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


def _namespace_name(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def _display(obj: dict[str, Any]) -> str:
    namespace, name = _namespace_name(obj)
    return f"{namespace}/{name}"
