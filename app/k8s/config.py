"""Build a Kubernetes ``ApiClient`` from in-cluster credentials or a kubeconfig file.

The kubernetes client's global default ``Configuration`` is never touched: every client gets
its own ``Configuration`` object, so tests and several clusters can coexist in one process.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes.client import ApiClient, Configuration
from kubernetes.config import ConfigException, load_incluster_config, load_kube_config
from kubernetes.config.incluster_config import SERVICE_HOST_ENV_NAME

from app.core.model.errors import MusterError

DEFAULT_KUBECONFIG = "~/.kube/config"
#: Connections kept open to the API server. Muster talks to it from more threads at once than
#: the client's default (5 per CPU): the watches, eight nudge workers, a gang's binds in
#: parallel, events, the lease. Past the pool's size urllib3 drops each extra connection after
#: its request ("Connection pool is full, discarding connection") and the next request pays a
#: new TLS handshake.
API_CONNECTIONS = 64


def _in_pod() -> bool:
    return bool(os.environ.get(SERVICE_HOST_ENV_NAME))


def _kubeconfig_paths(kubeconfig: str | None) -> str:
    """The kubeconfig to load: the argument, else ``$KUBECONFIG``, else ``~/.kube/config``.

    ``$KUBECONFIG`` may list several files separated by ``os.pathsep``; the client merges them.
    """
    return kubeconfig or os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG


def _any_exists(paths: str) -> bool:
    return any(Path(p).expanduser().is_file() for p in paths.split(os.pathsep) if p)


def kube_access_available(kubeconfig: str | None) -> bool:
    """Whether a cluster can be reached in principle (else Muster runs its demo cluster).

    True when running in a pod, when ``kubeconfig`` is given (even if missing, so that a
    mistyped path fails loudly in ``load_api_client`` instead of silently starting the demo),
    or when ``$KUBECONFIG`` or ``~/.kube/config`` names an existing file.
    """
    if kubeconfig:
        return True
    return _in_pod() or _any_exists(_kubeconfig_paths(None))


def load_api_client(kubeconfig: str | None = None, in_cluster: bool | None = None) -> ApiClient:
    """A new ``ApiClient`` for the cluster Muster should talk to.

    ``in_cluster=True`` uses the pod's service account, ``False`` a kubeconfig file. With
    ``None`` an explicit ``kubeconfig`` wins, then the service account when running in a pod
    (``$KUBERNETES_SERVICE_HOST`` set), then ``$KUBECONFIG``, then ``~/.kube/config``.
    Raises ``MusterError`` naming the source when the configuration cannot be loaded.
    """
    configuration = Configuration()
    # No silent urllib3 retries: a bind must answer within kube-scheduler's httpTimeout, and the
    # watch loops retry on their own terms.
    configuration.retries = 0
    configuration.connection_pool_maxsize = max(
        API_CONNECTIONS, configuration.connection_pool_maxsize
    )
    if in_cluster is None:
        in_cluster = kubeconfig is None and _in_pod()
    if in_cluster:
        try:
            load_incluster_config(  # type: ignore[no-untyped-call]  # kubernetes: unannotated
                client_configuration=configuration
            )
        except ConfigException as exc:
            raise MusterError(f"cannot load the in-cluster configuration: {exc}") from exc
        return ApiClient(configuration)
    paths = _kubeconfig_paths(kubeconfig)
    if not _any_exists(paths):
        raise MusterError(f"kubeconfig {paths} does not exist")
    try:
        load_kube_config(  # type: ignore[no-untyped-call]  # kubernetes: unannotated
            config_file=paths, client_configuration=configuration, persist_config=False
        )
    except Exception as exc:  # the loader raises YAML, OS, key and value errors alike
        raise MusterError(f"cannot load kubeconfig {paths}: {exc}") from exc
    return ApiClient(configuration)


def close_api_client(api: ApiClient) -> None:
    """Close ``api``'s connection pool and worker threads."""
    api.close()  # type: ignore[no-untyped-call]  # kubernetes: unannotated
