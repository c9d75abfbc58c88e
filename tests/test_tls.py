"""HTTPS listener: the served certificate is reloaded when its files change on disk, over real
TLS connections; a half-written pair keeps the old one; HTTP and HTTPS serve one app."""

from __future__ import annotations

import asyncio
import gc
import os
import select
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization

from app import certs
from app.cli import main
from app.core.model.errors import MusterError
from app.main import create_app
from app.services import build_services
from app.settings import Settings
from app.tls import CertReloader, server_context
from tests.conftest import free_port
from tests.https import LOOPBACK, served_certificate, serving

SERVICE_NAME = "muster.muster-system.svc"


def der(pair: certs.Pair) -> bytes:
    return pair.cert.public_bytes(serialization.Encoding.DER)


def until(check: Any, what: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def serves(port: int, cafile: Path, pair: certs.Pair) -> bool:
    """Whether a new connection gets ``pair``'s certificate (an old one may still fail to
    verify against a CA file that already changed)."""
    try:
        return served_certificate(port, cafile) == der(pair)
    except ssl.SSLCertVerificationError:
        return False


def test_certificate_is_reloaded_when_the_files_change(tmp_path: Path) -> None:
    ca = certs.make_ca()
    first = certs.issue(ca, certs.service_names("muster", "muster-system"), [LOOPBACK])
    certs.write(tmp_path, ca, first)
    cafile, certfile, keyfile = (tmp_path / n for n in ("ca.crt", "tls.crt", "tls.key"))
    with serving(create_app(), certfile, keyfile) as served:
        port = served.https_port
        assert served_certificate(port, cafile) == der(first)
        # The service DNS name verifies too (what the API server checks).
        assert served_certificate(port, cafile, SERVICE_NAME) == der(first)
        (reloader,) = served.server.reloaders

        # Half-written: the new certificate with the old key. The old pair stays in force.
        second = certs.issue(ca, certs.service_names("muster", "muster-system"), [LOOPBACK])
        certfile.write_bytes(second.cert_pem())
        until(lambda: reloader.last_error, "the reloader to try the mismatched pair")
        assert "cannot load TLS certificate" in reloader.last_error
        assert served_certificate(port, cafile) == der(first)

        # The key arrives: the new certificate is served on new connections.
        keyfile.write_bytes(second.key_pem())
        until(lambda: serves(port, cafile, second), "the new certificate")
        assert reloader.reloads == 1 and reloader.last_error == ""

        # A whole new CA and pair (e.g. `muster certs --new-ca`), swapped in by rename.
        ca2 = certs.make_ca()
        third = certs.issue(ca2, [SERVICE_NAME], [LOOPBACK])
        certs.write(tmp_path, ca2, third)
        until(lambda: serves(port, cafile, third), "the third certificate")
        with httpx.Client(verify=ssl.create_default_context(cafile=str(cafile))) as client:
            assert client.get(f"{served.https_url}/healthz").json() == {"status": "ok"}


def test_reloader_follows_a_symlink_flip_like_a_secret_volume(tmp_path: Path) -> None:
    ca = certs.make_ca()
    old, new = (certs.issue(ca, [SERVICE_NAME]) for _ in range(2))
    for name, pair in (("v1", old), ("v2", new)):
        certs.write(tmp_path / name, ca, pair)
    data = tmp_path / "..data"
    data.symlink_to("v1")
    for f in ("tls.crt", "tls.key"):
        (tmp_path / f).symlink_to(Path("..data") / f)
    reloader = CertReloader(tmp_path / "tls.crt", tmp_path / "tls.key")
    first = reloader.current
    assert reloader.check() is False  # nothing changed
    tmp = tmp_path / "..data_tmp"
    tmp.symlink_to("v2")
    os.replace(tmp, data)  # what kubelet does when the Secret changes
    assert reloader.check() is True
    assert reloader.current is not first
    assert reloader.check() is False


def test_unloadable_pair_is_refused_before_listening(tmp_path: Path) -> None:
    with pytest.raises(MusterError, match="cannot load TLS certificate"):
        server_context(tmp_path / "missing.crt", tmp_path / "missing.key")


class CountingSource:
    def __init__(self) -> None:
        self.starts = self.stops = 0
        self.loop = ""

    def start(self) -> None:
        self.starts += 1
        self.loop = type(asyncio.get_running_loop()).__module__

    def stop(self, timeout: float = 5.0) -> None:
        self.stops += 1


def test_both_listeners_serve_one_app_and_the_lifespan_runs_once(tmp_path: Path) -> None:
    ca = certs.make_ca()
    certs.write(tmp_path, ca, certs.issue(ca, [SERVICE_NAME], [LOOPBACK]))
    services = build_services(Settings(demo=True))
    source = CountingSource()
    services.source = source
    app = create_app(services=services)
    verify = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    gc.unfreeze()
    with serving(app, tmp_path / "tls.crt", tmp_path / "tls.key") as served:
        with httpx.Client() as plain, httpx.Client(verify=verify) as tls:
            assert plain.get(f"{served.http_url}/readyz").status_code == 200
            assert tls.get(f"{served.https_url}/readyz").status_code == 200
            assert plain.post(f"{served.http_url}/mutate", content="{}").status_code == 400
            assert tls.post(f"{served.https_url}/mutate", content="{}").status_code == 400
        assert (source.starts, source.stops) == (1, 0)
        # uvloop's loop, not asyncio's (see app.server.event_loop).
        assert source.loop.startswith("uvloop"), source.loop
        # Startup state is kept out of full garbage collections (see MusterServer.serve).
        assert gc.get_freeze_count() > 0
    gc.unfreeze()
    assert (source.starts, source.stops) == (1, 1)


def test_serve_refuses_half_a_tls_pair(caplog: pytest.LogCaptureFixture) -> None:
    assert main(["serve", "--demo", "--tls-cert", "tls.crt"]) == 2
    assert "--tls-cert and --tls-key go together" in caplog.text


def test_serve_refuses_unloadable_tls_files_before_listening(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ports = ["--port", str(free_port()), "--webhook-port", str(free_port())]
    tls = ["--tls-cert", str(tmp_path / "tls.crt"), "--tls-key", str(tmp_path / "tls.key")]
    argv = ["serve", "--demo", *ports, *tls]
    assert main(argv) == 2
    assert "cannot start: cannot load TLS certificate" in caplog.text


def test_an_idle_connection_outlives_the_go_clients_idle_timeout_window() -> None:
    """Muster keeps an idle keep-alive connection open well past uvicorn's 5 s default, so
    the Go clients that call it (idle timeout 90 s) close it first: a POST they send on it
    is never met by a connection Muster is just closing."""
    from app.server import KEEP_ALIVE, Listener
    from tests.https import running_server

    assert KEEP_ALIVE > 90
    app = create_app(services=build_services(Settings(demo=True)))
    port = free_port()
    request = f"GET /readyz HTTP/1.1\r\nHost: {LOOPBACK}\r\n\r\n".encode()
    with (
        running_server(app, [Listener(LOOPBACK, port)], 0.05),
        socket.create_connection((LOOPBACK, port), timeout=5) as conn,
    ):
        for _ in range(2):
            conn.sendall(request)
            answer = conn.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
            time.sleep(6.0)  # past uvicorn's default keep-alive timeout
            readable, _, _ = select.select([conn], [], [], 0)
            assert not readable, "the server closed the idle connection"
    gc.unfreeze()
