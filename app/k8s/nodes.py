"""Write a Node annotation (``muster probe-node`` records the GPU topology this way)."""

from __future__ import annotations

from kubernetes.client import ApiClient, CoreV1Api
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from app.core.model.errors import MusterError
from app.k8s.gateway import status_message

_TIMEOUT = (5.0, 10.0)


def annotation_patch(key: str, value: str | None) -> dict[str, object]:
    """A JSON merge patch setting annotation ``key`` to ``value`` (None removes it)."""
    return {"metadata": {"annotations": {key: value}}}


def patch_node_annotation(api: ApiClient, node: str, key: str, value: str | None) -> None:
    """Set annotation ``key`` of Node ``node`` to ``value`` with a JSON merge patch.

    Other annotations are left alone. Raises ``MusterError`` when the node does not exist,
    the API refuses (the message is the server's), or the server cannot be reached.
    """
    core = CoreV1Api(api)
    try:
        core.patch_node(
            node,
            annotation_patch(key, value),
            _content_type="application/merge-patch+json",
            _preload_content=False,
            _request_timeout=_TIMEOUT,
        )
    except ApiException as exc:
        if exc.status == 404:
            raise MusterError(f"node {node!r} not found") from exc
        raise MusterError(f"cannot annotate node {node!r}: {status_message(exc)}") from exc
    except (HTTPError, OSError) as exc:
        raise MusterError(f"cannot annotate node {node!r}: {exc}") from exc
