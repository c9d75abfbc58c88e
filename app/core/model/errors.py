"""Muster's exception hierarchy, in one place.

Errors raised for bad input carry the path of the offending field so the HTTP layer can answer
4xx with a message that names it.
"""

from __future__ import annotations


class MusterError(Exception):
    """Base class of every error Muster raises on purpose."""


class InvalidInput(MusterError, ValueError):
    """An object or value from outside (API JSON, cluster file, config) is malformed.

    ``field`` is a dotted path such as ``Pod.spec.containers[0].resources.requests.cpu``.
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


class ClusterFileError(InvalidInput):
    """A standalone cluster file (YAML or openb CSV) cannot be loaded."""


class BindRejected(MusterError):
    """A bind cannot go ahead (the node no longer has room, the pod is unknown, ...).

    The message is what kube-scheduler receives as the bind ``Error``.
    """


class GatewayError(MusterError):
    """The Kubernetes API refused or failed an action (bind, evict, patch, event).

    ``reason`` is a short machine word: ``Conflict``, ``NotFound``, ``Forbidden``,
    ``Unavailable`` or ``Invalid``.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message
