"""What the API server serves, detected at runtime (Muster supports 1.20 to current)."""

from __future__ import annotations

import logging
import re

from kubernetes.client import ApiClient, VersionApi

log = logging.getLogger("muster.k8s.features")

#: Scheduling gates (``spec.schedulingGates``): beta and on by default since 1.27, GA in 1.30.
GATES_SINCE = (1, 27)


def server_version(api: ApiClient) -> tuple[int, int] | None:
    """The API server's (major, minor), or None if it cannot be read."""
    try:
        info = VersionApi(api).get_code(_request_timeout=(2.0, 5.0))
    except Exception as exc:  # any failure: features stay off, Muster still works
        log.warning("cannot read the API server version (%s); scheduling gates stay off", exc)
        return None
    return version_of(str(info.major), str(info.minor))


def version_of(major: str, minor: str) -> tuple[int, int] | None:
    """``("1", "27+")`` -> ``(1, 27)`` (providers add suffixes); None when unreadable."""
    found = [re.match(r"\d+", part) for part in (major, minor)]
    if found[0] is None or found[1] is None:
        return None
    return int(found[0].group()), int(found[1].group())


def serves_scheduling_gates(version: tuple[int, int] | None) -> bool:
    """Whether an API server of ``version`` keeps ``spec.schedulingGates`` (older ones drop
    the unknown field, and kube-scheduler ignores it)."""
    return version is not None and version >= GATES_SINCE
