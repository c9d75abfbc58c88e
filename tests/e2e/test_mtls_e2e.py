"""A real kube-scheduler 1.20 reaches Muster's extender over mutual TLS (its extender
``tlsConfig``: ``certFile``/``keyFile``/``caFile``, ``enableHTTPS: true``), with the client
certificate ``muster certs`` issues, and schedules a gang through it. Muster runs the listeners
deploy/ runs: the extender requiring client certificates, the webhook, and the ops listener
(health, metrics, debug) on its own address.

Then kube-scheduler is restarted with the CA but without the client certificate: Muster refuses
its calls, and the pod it tries waits with kube-scheduler's error in its FailedScheduling event.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import kubernetes.client
import pytest
import yaml
from controlplane import ControlPlane, create_gpu_node, wait_for
from harness import (
    SCHEDULER_CONFIG,
    BindingWatch,
    binds_by_muster,
    gpu_pod,
    make_namespace,
    scheduling_failures,
    wait_nodes,
)

from app import certs
from app.main import create_app
from app.server import plan_listeners
from app.settings import Settings
from tests.conftest import free_port
from tests.https import LOOPBACK, running_server


def scheduler_config(url: str, tls: dict[str, str]) -> str:
    """harness.SCHEDULER_CONFIG with Muster at ``url`` over HTTPS with ``tls``."""
    config = yaml.safe_load(SCHEDULER_CONFIG)
    (extender,) = config["extenders"]
    extender.update(urlPrefix=url, enableHTTPS=True, tlsConfig=tls)
    return yaml.safe_dump(config, sort_keys=False)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pki = tmp_path_factory.mktemp("pki")
    ca = certs.make_ca()
    serving = certs.issue(ca, certs.service_names("muster", "muster-system"), [LOOPBACK])
    certs.write(pki, ca, serving, certs.issue_client(ca))
    cp = ControlPlane()
    try:
        cp.start()
        api = cp.api_client()
        core = kubernetes.client.CoreV1Api(api)
        port, ops_port = free_port(), free_port()
        settings = Settings(
            mode="cluster",
            mirror_unresolvable=True,  # kube-scheduler 1.20
            tls_cert=pki / "tls.crt",
            tls_key=pki / "tls.key",
            client_ca=pki / "ca.crt",
            webhook_port=free_port(),
            ops_listen=f"{LOOPBACK}:{ops_port}",
        )
        app = create_app(settings, api_client=cp.api_client())
        listeners = plan_listeners(settings, LOOPBACK, port)
        with (
            running_server(app, listeners),
            httpx.Client(base_url=f"http://{LOOPBACK}:{ops_port}", timeout=10) as ops,
        ):
            wait_for(lambda: ops.get("/readyz").status_code == 200, 30, "Muster to sync")
            yield cp, core, ops, f"https://{LOOPBACK}:{port}/", pki
            cp.stop_scheduler()
        api.close()
    finally:
        cp.stop()


def test_kube_scheduler_with_the_client_certificate_schedules_a_gang(secured: Any) -> None:
    cp, core, ops, url, pki = secured
    tls = {"certFile": str(pki / "client.crt"), "keyFile": str(pki / "client.key"),
           "caFile": str(pki / "ca.crt")}  # fmt: skip
    cp.start_scheduler(scheduler_config(url, tls))
    ns = make_namespace(core, "mtls")
    create_gpu_node(core, "mtls-0", gpus=4, labels={"e2e": "mtls"})
    create_gpu_node(core, "mtls-1", gpus=4, labels={"e2e": "mtls"})
    wait_nodes(ops, ["mtls-0", "mtls-1"])
    before = binds_by_muster(ops)
    labels = {"muster.io/pod-group": "train", "muster.io/min-member": "3"}
    with BindingWatch(core, ns) as seen:
        for i in range(3):
            core.create_namespaced_pod(ns, gpu_pod(f"train-{i}", 2, ns, "mtls", labels))
        wait_for(lambda: len(seen.current) == 3 or None, 60, "the gang to be bound whole")
        assert max(seen.max_gpus.values()) <= 4
    # Muster made every Binding (its bind verb, reached over mutual TLS), counted on /metrics.
    assert binds_by_muster(ops) - before == 3
    ok_filter = 'muster_extender_requests_total{code="200",verb="filter"}'
    filters = [line for line in ops.get("/metrics").text.splitlines() if line.startswith(ok_filter)]
    assert filters and float(filters[0].rsplit(" ", 1)[1]) >= 3
    cp.stop_scheduler()


def test_kube_scheduler_without_a_client_certificate_is_refused(secured: Any) -> None:
    cp, core, ops, url, pki = secured
    cp.start_scheduler(scheduler_config(url, {"caFile": str(pki / "ca.crt")}))
    ns = make_namespace(core, "anonymous")
    create_gpu_node(core, "anonymous-0", gpus=4, labels={"e2e": "anonymous"})
    wait_nodes(ops, ["anonymous-0"])
    before = binds_by_muster(ops)
    core.create_namespaced_pod(ns, gpu_pod("lone", 1, ns, "anonymous"))

    # kube-scheduler's event names the call that failed: `Post "https://.../filter": EOF`
    # (Muster closes the connection at the handshake; no HTTP answer, no Muster reason).
    call = f'Post "{url}filter"'

    def refused() -> str | None:
        return next((m for m in scheduling_failures(core, ns) if call in m), None)

    message = wait_for(refused, 60, "kube-scheduler to report the refused extender call")
    assert "gang" not in message and "GPU" not in message, message
    pod = core.read_namespaced_pod("lone", ns)
    assert not pod.spec.node_name, "bound although Muster refused the scheduler"
    assert binds_by_muster(ops) == before
    cp.stop_scheduler()
