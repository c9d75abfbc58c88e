"""The extender listener with client certificates (kube-scheduler's extender ``tlsConfig``) and
the listeners' routes, over real TLS connections on loopback.

A client without a certificate, with one from another CA, or with a serverAuth-only
certificate fails its handshake; kube-scheduler's certificate from ``muster certs`` is
let in. A rotated client CA is picked up without a restart. Each route is served only on the
listeners of its role (``app.api.listeners``).
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID

from app import certs
from app.api.listeners import EXTENDER, OPS, ROLES, WEBHOOK, role_of
from app.cli import main
from app.core.model.errors import MusterError
from app.main import create_app
from app.server import plan_listeners
from app.settings import Settings
from tests.conftest import free_port
from tests.https import LOOPBACK, running_server

FILTER_BODY = {"Pod": {"metadata": {"name": "p", "namespace": "default"}}, "NodeNames": []}


@dataclass
class Pki:
    dir: Path
    ca: certs.Pair
    serving: certs.Pair
    client: certs.Pair

    def file(self, name: str) -> Path:
        return self.dir / name

    def client_context(self, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.file("ca.crt")))
        if cert is not None:
            context.load_cert_chain(str(cert), str(key))
        return context


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = certs.make_ca()
    serving = certs.issue(ca, certs.service_names("muster", "muster-system"), [LOOPBACK])
    client = certs.issue_client(ca)
    certs.write(tmp_path, ca, serving, client)
    return Pki(tmp_path, ca, serving, client)


def foreign_client(directory: Path) -> tuple[Path, Path]:
    """A kube-scheduler client certificate from a CA Muster does not trust."""
    other = certs.make_ca()
    pair = certs.issue_client(other)
    directory.mkdir(exist_ok=True)
    (directory / "client.crt").write_bytes(pair.cert_pem())
    (directory / "client.key").write_bytes(pair.key_pem())
    return directory / "client.crt", directory / "client.key"


def handshake_refused(port: int, context: ssl.SSLContext) -> str:
    """How a request over a new connection with ``context`` fails ('' if it is answered).

    Under TLS 1.2 the server's check of the client certificate is part of the handshake, so a
    refused client's handshake itself fails. Under TLS 1.3 the client's side of the handshake
    completes first and the refusal shows on the first read: the connection ends with no HTTP
    answer. Both are tried; a refused client must fail both ways."""
    outcomes = tried(port, context)
    if all(outcomes):
        assert outcomes[0].startswith("TLSv1_2 handshake"), outcomes
        return "; ".join(outcomes)
    assert not any(outcomes), f"answered under one TLS version only: {outcomes}"
    return ""


def tried(port: int, context: ssl.SSLContext) -> list[str]:
    """A request under TLS 1.2, then under TLS 1.3: how each failed ('' if answered)."""
    outcomes = []
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        context.maximum_version = version
        context.minimum_version = version
        stage = "handshake"
        try:
            with (
                socket.create_connection((LOOPBACK, port), timeout=5) as raw,
                context.wrap_socket(raw, server_hostname=LOOPBACK) as tls,
            ):
                stage = "first read"
                tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: muster\r\nConnection: close\r\n\r\n")
                answer = tls.recv(4096)
        except (ssl.SSLError, ConnectionResetError) as exc:
            outcomes.append(f"{version.name} {stage}: {type(exc).__name__} {exc}")
            continue
        if answer.startswith(b"HTTP/1.1 "):
            outcomes.append("")
        else:
            outcomes.append(f"{version.name} {stage}: closed without an answer")
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.maximum_version = ssl.TLSVersion.MAXIMUM_SUPPORTED
    return outcomes


@dataclass
class Ports:
    extender: int
    webhook: int
    ops: int


@pytest.fixture
def secured(pki: Pki) -> Iterator[Ports]:
    """Muster on the demo cluster with the three listeners of deploy/: mTLS extender, webhook,
    ops."""
    ports = Ports(free_port(), free_port(), free_port())
    settings = Settings(
        demo=True,
        tls_cert=pki.file("tls.crt"),
        tls_key=pki.file("tls.key"),
        client_ca=pki.file("ca.crt"),
        webhook_port=ports.webhook,
        ops_listen=f"{LOOPBACK}:{ports.ops}",
    )
    listeners = plan_listeners(settings, LOOPBACK, ports.extender)
    with running_server(create_app(settings), listeners):
        yield ports


def test_extender_refuses_clients_without_a_certificate_from_its_ca(
    pki: Pki, secured: Ports, tmp_path: Path
) -> None:
    port = secured.extender
    # No client certificate at all.
    assert handshake_refused(port, pki.client_context()), "answered without a certificate"
    # A client certificate from another CA.
    other = handshake_refused(port, pki.client_context(*foreign_client(tmp_path / "other")))
    assert other, "a client with a foreign certificate was answered"
    # A certificate from the right CA without clientAuth is not a client certificate.
    server_only = certs._leaf(pki.ca, "x", (ExtendedKeyUsageOID.SERVER_AUTH,), (), 1)
    (tmp_path / "so").mkdir()
    (tmp_path / "so" / "c.crt").write_bytes(server_only.cert_pem())
    (tmp_path / "so" / "c.key").write_bytes(server_only.key_pem())
    serving = handshake_refused(port, pki.client_context(tmp_path / "so" / "c.crt",
                                                         tmp_path / "so" / "c.key"))  # fmt: skip
    assert serving, "a serverAuth-only certificate was accepted as a client certificate"
    # httpx (what a user's script would use) fails too, and never sees an HTTP status.
    with httpx.Client(verify=pki.client_context()) as anonymous, pytest.raises(httpx.HTTPError):
        anonymous.post(f"https://{LOOPBACK}:{port}/filter", json=FILTER_BODY)
    # kube-scheduler's certificate from `muster certs` is let in.
    assert handshake_refused(port, pki.client_context(pki.file("client.crt"),
                                                     pki.file("client.key"))) == ""  # fmt: skip
    scheduler = pki.client_context(pki.file("client.crt"), pki.file("client.key"))
    with httpx.Client(verify=scheduler) as client:
        answer = client.post(f"https://{LOOPBACK}:{port}/filter", json=FILTER_BODY)
    assert answer.status_code == 200, answer.text
    assert answer.json()["NodeNames"] == []


def test_each_route_is_served_only_on_the_listeners_of_its_role(pki: Pki, secured: Ports) -> None:
    scheduler = pki.client_context(pki.file("client.crt"), pki.file("client.key"))
    extender = httpx.Client(base_url=f"https://{LOOPBACK}:{secured.extender}", verify=scheduler)
    webhook = httpx.Client(base_url=f"https://{LOOPBACK}:{secured.webhook}",
                           verify=pki.client_context())  # fmt: skip
    ops = httpx.Client(base_url=f"http://{LOOPBACK}:{secured.ops}")
    with extender, webhook, ops:
        assert extender.post("/filter", json=FILTER_BODY).status_code == 200
        assert extender.post("/mutate", content="{}").status_code == 400  # served: bad body
        for path in ("/metrics", "/debug/nodes", "/readyz", "/openapi.json"):
            refused = extender.get(path)
            assert refused.status_code == 404, path
            assert refused.json()["field"] == "path"
            assert "ops" in refused.json()["error"]
        # The webhook port checks no client certificate: it must not bind pods.
        assert webhook.post("/mutate", content="{}").status_code == 400
        bind = {"PodName": "p", "PodNamespace": "d", "PodUID": "u", "Node": "n"}
        assert webhook.post("/bind", json=bind).status_code == 404
        assert webhook.post("/filter", json=FILTER_BODY).status_code == 404
        assert webhook.get("/metrics").status_code == 404
        # The ops listener: health, metrics, debug, explain, the API description.
        assert ops.get("/readyz").status_code == 200
        assert ops.get("/healthz").json() == {"status": "ok"}
        assert "muster_extender_requests" in ops.get("/metrics").text
        assert ops.get("/debug/nodes").json()["count"] > 0
        assert ops.get("/openapi.json").status_code == 200
        assert ops.post("/filter", json=FILTER_BODY).status_code == 404
        assert ops.post("/mutate", content="{}").status_code == 404
        # The extender call made above is counted where Prometheus scrapes.
        assert (
            'muster_extender_requests_total{code="200",verb="filter"}' in ops.get("/metrics").text
        )


def test_a_rotated_client_ca_is_picked_up_without_a_restart(pki: Pki, tmp_path: Path) -> None:
    port = free_port()
    client_ca = tmp_path / "client-ca.crt"
    client_ca.write_bytes(pki.ca.cert_pem())
    settings = Settings(demo=True, tls_cert=pki.file("tls.crt"), tls_key=pki.file("tls.key"),
                        client_ca=client_ca, webhook_port=free_port())  # fmt: skip
    old = pki.client_context(pki.file("client.crt"), pki.file("client.key"))
    new_ca = certs.make_ca()
    new_client = certs.issue_client(new_ca)
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "client.crt").write_bytes(new_client.cert_pem())
    (tmp_path / "new" / "client.key").write_bytes(new_client.key_pem())
    new = pki.client_context(tmp_path / "new" / "client.crt", tmp_path / "new" / "client.key")
    with running_server(create_app(settings), plan_listeners(settings, LOOPBACK, port)) as server:
        assert handshake_refused(port, old) == ""
        assert handshake_refused(port, new) != ""
        # Rotation: trust the new CA (a bundle may hold both during the switch; here: only it).
        client_ca.write_bytes(new_ca.cert_pem())
        deadline = time.monotonic() + 10
        # (The switch may fall between the two tries of one round: wait for both.)
        while any(tried(port, new)):
            assert time.monotonic() < deadline, "the new client CA was not picked up"
            time.sleep(0.02)
        assert handshake_refused(port, old) != ""
        extender = next(r for r in server.reloaders if r.client_ca == client_ca)
        assert extender.reloads == 1


def test_listener_plan() -> None:
    tls = {"tls_cert": Path("t.crt"), "tls_key": Path("t.key")}
    # Plain demo: one listener serving everything (unchanged behaviour).
    (only,) = plan_listeners(Settings(demo=True), LOOPBACK, 8888)
    assert only.roles == ROLES and only.certfile is None
    # TLS without a client CA: HTTP extender + HTTPS webhook, both serving everything.
    plain, https = plan_listeners(Settings(**tls), LOOPBACK, 8888)
    assert (plain.roles, https.roles, https.port) == (ROLES, ROLES, 8443)
    # deploy/: mTLS extender, webhook without extender verbs, ops apart.
    secure = Settings(**tls, client_ca=Path("ca.crt"), ops_listen="0.0.0.0:9090")
    ext, hook, ops = plan_listeners(secure, "0.0.0.0", 8888)
    assert (ext.client_ca, ext.certfile, ext.roles) == (Path("ca.crt"), Path("t.crt"),
                                                        {EXTENDER, WEBHOOK})  # fmt: skip
    assert hook.roles == {WEBHOOK} and hook.client_ca is None
    assert (ops.host, ops.port, ops.roles, ops.certfile) == ("0.0.0.0", 9090, {OPS}, None)
    # IPv6 ops address.
    assert plan_listeners(Settings(ops_listen="[::1]:9090"), LOOPBACK, 8888)[1].host == "::1"
    with pytest.raises(MusterError, match="--client-ca needs --tls-cert"):
        plan_listeners(Settings(client_ca=Path("ca.crt")), LOOPBACK, 8888)
    for bad in ("9090", "host:", "host:99999", ":9090"):
        with pytest.raises(MusterError, match="--ops-listen"):
            plan_listeners(Settings(ops_listen=bad), LOOPBACK, 8888)
    with pytest.raises(MusterError, match="two listeners on one address"):
        plan_listeners(Settings(ops_listen=f"{LOOPBACK}:8888"), LOOPBACK, 8888)


def test_every_route_has_the_role_the_readme_gives_it() -> None:
    paths = [*create_app().openapi()["paths"], "/openapi.json", "/docs"]
    roles = {path: role_of(path) for path in paths}
    assert {p for p, r in roles.items() if r == EXTENDER} == {"/filter", "/prioritize",
                                                               "/preempt", "/bind"}  # fmt: skip
    assert {p for p, r in roles.items() if r == WEBHOOK} == {"/mutate", "/validate"}
    assert {"/metrics", "/healthz", "/readyz", "/debug/nodes", "/whatif", "/openapi.json"} <= {
        p for p, r in roles.items() if r == OPS
    }


def test_serve_refuses_a_client_ca_without_a_serving_pair(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert main(["serve", "--demo", "--client-ca", "ca.crt"]) == 2
    assert "--client-ca needs --tls-cert and --tls-key" in caplog.text
    assert main(["serve", "--demo", "--ops-listen", "nonsense"]) == 2
    assert "expected HOST:PORT" in caplog.text


def test_a_follower_forwards_to_a_mutual_tls_leader_with_its_serving_certificate(
    pki: Pki, tmp_path: Path
) -> None:
    """With --client-ca the leader's extender port wants a client certificate from followers
    too: the follower presents its serving certificate and checks the leader's chain."""
    from tests.api.test_forward import follower

    port = free_port()
    settings = Settings(demo=True, tls_cert=pki.file("tls.crt"), tls_key=pki.file("tls.key"),
                        client_ca=pki.file("ca.crt"), webhook_port=free_port())  # fmt: skip
    with running_server(create_app(settings), plan_listeners(settings, LOOPBACK, port)):
        services = follower(f"https://{LOOPBACK}:{port}")
        services.settings = settings
        replica = create_app(settings, services=services)
        from tests.conftest import running

        with running(replica) as client:
            answer = client.post("/filter", json=FILTER_BODY)
            assert answer.status_code == 200, answer.text
            assert answer.json()["NodeNames"] == []
        # Without the client certificate the leader refuses the forwarded call.
        plain = follower(f"https://{LOOPBACK}:{port}")
        with running(create_app(Settings(demo=True), services=plain)) as client:
            refused = client.post("/filter", json=FILTER_BODY)
            assert refused.status_code == 503 and "did not answer" in refused.json()["detail"]
