"""``KubeGateway``: Muster's side effects (bind, evict, annotate, event) on a real cluster.

Every call carries a short request timeout, because the extender's bind must answer within
kube-scheduler's ``httpTimeout`` (5 s by default), and every API failure surfaces as
``GatewayError(reason, message)`` with the Status message of the API server.
Requests go straight to the API client's connection pool, with its authentication
(``ApiClient.update_params_for_auth``, so refreshed tokens are used) and a body encoded once:
the generated API methods' parameter validation and serialisation cost a quarter of a bind's
CPU, and binds are on the burst's busiest path. Responses are read and not decoded: nothing in
them is needed (the generated client also fails to decode a Binding response, whose ``target``
is required but absent).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from urllib3 import Timeout
from urllib3.exceptions import HTTPError

from app.core.model.errors import GatewayError
from app.core.model.values import GroupObject
from app.k8s.apitime import micro_time, whole_time

log = logging.getLogger("muster.k8s.gateway")

COMPONENT = "muster"
#: (connect, read) seconds for every call.
DEFAULT_TIMEOUT = (2.0, 4.0)

_REASONS = {
    400: "Invalid",
    401: "Forbidden",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    422: "Invalid",
    429: "TooManyRequests",
}
# Limits of core/v1 Event validation (pkg/apis/core/validation/events.go).
_MAX_MESSAGE = 1024
_MAX_REASON = 128
_MAX_INSTANCE = 128
_MAX_NAME = 253


def status_message(exc: ApiException) -> str:
    """The ``message`` of the Status body, else ``"<code> <reason>"``."""
    try:
        body = json.loads(exc.body or "")
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return f"{exc.status} {exc.reason}".strip()


def gateway_error(exc: BaseException, action: str) -> GatewayError:
    """Translate a client exception into a ``GatewayError`` (``action`` names the call)."""
    if isinstance(exc, ApiException) and exc.status:
        return GatewayError(_REASONS.get(exc.status, "Unavailable"), status_message(exc))
    if isinstance(exc, ApiException):  # status 0: TLS failure inside the client
        return GatewayError("Unavailable", f"{action}: {exc.reason}")
    return GatewayError("Unavailable", f"{action}: {exc}")


def _eviction_unsupported(exc: ApiException) -> bool:
    """Whether the server refused an Eviction because it does not know its apiVersion.

    Before 1.22 the eviction subresource only decodes ``policy/v1beta1``; a ``policy/v1``
    body gets 400 ("no kind Eviction is registered for version policy/v1") or 404/415/422.
    """
    if exc.status not in (400, 404, 415, 422):
        return False
    message = status_message(exc)
    return "policy/v1" in message and "v1beta1" not in message


def ungate_patch(uid: str, gates: Sequence[str], gate: str) -> list[dict[str, Any]]:
    """The JSON patch that removes scheduling gate ``gate`` from a pod whose gates are
    ``gates`` (``spec.schedulingGates`` may only lose entries after creation)."""
    ops: list[dict[str, Any]] = []
    if uid:
        ops.append({"op": "test", "path": "/metadata/uid", "value": uid})
    ops.append(
        {"op": "test", "path": "/spec/schedulingGates", "value": [{"name": g} for g in gates]}
    )
    rest = [{"name": g} for g in gates if g != gate]
    ops.append({"op": "replace", "path": "/spec/schedulingGates", "value": rest})
    return ops


def _truncate(text: str, limit: int) -> str:
    """At most ``limit`` UTF-8 bytes of ``text`` (the API counts bytes)."""
    data = text.encode()
    return text if len(data) <= limit else data[:limit].decode(errors="ignore")


def _pod_path(namespace: str, name: str, subresource: str = "") -> str:
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
    return f"{path}/{subresource}" if subresource else path


_JSON = "application/json"


class KubeGateway:
    """The ``app.core.state.gateway.Gateway`` protocol against the Kubernetes API.

    ``instance`` is the Event ``reportingInstance`` (default: this host's name); ``timeout``
    is the (connect, read) timeout in seconds of every call.
    """

    #: Every action is a network call: async callers run it in a worker thread.
    blocking = True

    def __init__(
        self,
        api: ApiClient,
        *,
        instance: str | None = None,
        timeout: tuple[float, float] = DEFAULT_TIMEOUT,
    ) -> None:
        self._api = api
        self._instance = (instance or f"{COMPONENT}-{socket.gethostname()}")[:_MAX_INSTANCE]
        self._timeout = Timeout(connect=timeout[0], read=timeout[1])
        self._eviction_version = "policy/v1"
        self._lock = threading.Lock()

    def _call(
        self,
        action: str,
        method: str,
        path: str,
        body: object,
        *,
        content_type: str = _JSON,
        dry_run: bool = False,
        raw_refusal: bool = False,
    ) -> None:
        """Send one request. A refusal (any status but 2xx) raises ``GatewayError`` with the
        API server's Status message (with ``raw_refusal``, the ``ApiException`` itself); a
        transport failure raises ``GatewayError("Unavailable")``."""
        api = self._api
        headers = {**api.default_headers, "Content-Type": content_type, "Accept": _JSON}
        api.update_params_for_auth(headers, [], ["BearerToken"], path, method, None)
        url = api.configuration.host + path
        if dry_run:
            url += "?" + urlencode({"dryRun": "All"})
        try:
            response = api.rest_client.pool_manager.request(
                method,
                url,
                body=json.dumps(body, separators=(",", ":")).encode(),
                headers=headers,
                timeout=self._timeout,
                preload_content=False,
            )
            try:
                data = response.read()
            finally:
                response.release_conn()
        except (HTTPError, OSError) as exc:
            raise gateway_error(exc, action) from exc
        if 200 <= response.status < 300:
            return
        refused = ApiException(
            status=response.status, reason=response.reason, body=data.decode(errors="replace")
        )
        if raw_refusal:
            raise refused
        raise gateway_error(refused, action)

    # -- Gateway ------------------------------------------------------------------------

    def bind(
        self,
        namespace: str,
        name: str,
        uid: str,
        node: str,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """Bind the pod to ``node`` (409 Conflict if it is already bound anywhere).

        ``annotations`` ride on the Binding: the API server copies them onto the pod in the
        same write, so a pod is never bound without the GPU ids Muster chose for it.
        """
        body = self._binding(namespace, name, uid, node, annotations)
        self._call("bind", "POST", _pod_path(namespace, name, "binding"), body)

    def check_bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Create the Binding with ``dryRun=All``: admission (webhooks included) and the
        API server's checks run, nothing is stored."""
        body = self._binding(namespace, name, uid, node, None)
        self._call("bind", "POST", _pod_path(namespace, name, "binding"), body, dry_run=True)

    @staticmethod
    def _binding(
        namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str] | None
    ) -> dict[str, Any]:
        metadata: dict[str, object] = {"name": name, "namespace": namespace}
        if uid:
            metadata["uid"] = uid
        if annotations:
            metadata["annotations"] = dict(annotations)
        return {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool = False) -> None:
        """Evict the pod; 429 (a PodDisruptionBudget forbids it) is ``TooManyRequests``.

        ``dry_run`` asks the API server whether the eviction would go through, changing nothing.
        """
        path = _pod_path(namespace, name, "eviction")
        with self._lock:
            version = self._eviction_version
        try:
            body = self._eviction(version, namespace, name, uid)
            self._call("evict", "POST", path, body, dry_run=dry_run, raw_refusal=True)
            return
        except ApiException as exc:
            if version == "policy/v1beta1" or not _eviction_unsupported(exc):
                raise gateway_error(exc, "evict") from exc
        log.info("the API server does not know policy/v1 Eviction; using policy/v1beta1")
        with self._lock:
            self._eviction_version = "policy/v1beta1"
        body = self._eviction("policy/v1beta1", namespace, name, uid)
        self._call("evict", "POST", path, body, dry_run=dry_run)

    @staticmethod
    def _eviction(version: str, namespace: str, name: str, uid: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": version,
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if uid:  # evict exactly this pod, not a successor with the same name
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        return body

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete the pod at once, only if it still has ``uid`` (used to roll a gang back)."""
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}} if uid else {}
        self._call("delete", "DELETE", _pod_path(namespace, name), body)

    def annotate_pod(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> None:
        """Merge-patch ``metadata.annotations`` (a ``None`` value removes the key)."""
        body = {"metadata": {"annotations": dict(annotations)}}
        self._call(
            "annotate",
            "PATCH",
            _pod_path(namespace, name),
            body,
            content_type="application/merge-patch+json",
        )

    def ungate(self, namespace: str, name: str, uid: str, gates: Sequence[str], gate: str) -> None:
        """Remove scheduling gate ``gate``: a JSON patch that first tests the pod's uid and
        its gates as Muster saw them (a pod whose gates changed fails with 422 ``Invalid``),
        then sets the rest (an empty list lets kube-scheduler take the pod)."""
        body = ungate_patch(uid, gates, gate)
        self._call(
            "ungate",
            "PATCH",
            _pod_path(namespace, name),
            body,
            content_type="application/json-patch+json",
        )

    def event(
        self, namespace: str, name: str, uid: str, reason: str, message: str, kind: str = "Normal"
    ) -> None:
        """Create a core/v1 Event about the pod, reported by ``muster``."""
        involved = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name}
        self._event(namespace, name, {**involved, **({"uid": uid} if uid else {})},
                    reason, message, kind)  # fmt: skip

    def object_event(
        self, obj: GroupObject, reason: str, message: str, kind: str = "Normal"
    ) -> None:
        """Create a core/v1 Event about a group object (a PodGroup, a Workload)."""
        involved = {
            "apiVersion": obj.api_version,
            "kind": obj.kind,
            "namespace": obj.namespace,
            "name": obj.object_name,
            **({"uid": obj.uid} if obj.uid else {}),
        }
        self._event(obj.namespace, obj.object_name, involved, reason, message, kind)

    def _event(
        self,
        namespace: str,
        name: str,
        involved: dict[str, str],
        reason: str,
        message: str,
        kind: str,
    ) -> None:
        now = datetime.now(UTC)
        suffix = f".{time.time_ns():x}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name[: _MAX_NAME - len(suffix)] + suffix, "namespace": namespace},
            "involvedObject": involved,
            "type": kind,
            "reason": _truncate(reason, _MAX_REASON),
            "message": _truncate(message, _MAX_MESSAGE),
            "action": "Scheduling",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._instance,
            "eventTime": micro_time(now),
            "firstTimestamp": whole_time(now),
            "lastTimestamp": whole_time(now),
            "count": 1,
        }
        self._call("event", "POST", f"/api/v1/namespaces/{quote(namespace, safe='')}/events", body)
