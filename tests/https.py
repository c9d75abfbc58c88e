"""Run a Muster app with ``app.server.MusterServer`` (HTTP + HTTPS listeners) in a thread."""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI

from app.server import Listener, MusterServer
from tests.conftest import free_port

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class Served:
    """A running server and its two base URLs."""

    server: MusterServer
    http_url: str
    https_url: str
    https_port: int


@contextmanager
def running_server(
    app: FastAPI, listeners: Sequence[Listener], reload_interval: float = 0.05
) -> Iterator[MusterServer]:
    """Serve ``app`` on ``listeners`` in a thread until the block ends; then stop it."""
    server = MusterServer(app, listeners, log_level="warning", reload_interval=reload_interval)
    thread = threading.Thread(target=server.run, name="muster-https-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        yield server
    finally:
        server.stop()
        thread.join(timeout=10)
        assert not thread.is_alive(), "test server did not stop"


@contextmanager
def serving(
    app: FastAPI, certfile: Path, keyfile: Path, reload_interval: float = 0.05
) -> Iterator[Served]:
    """Serve ``app`` on HTTP and HTTPS on loopback until the block ends; then stop it."""
    http_port, https_port = free_port(), free_port()
    listeners = [
        Listener(LOOPBACK, http_port),
        Listener(LOOPBACK, https_port, certfile, keyfile),
    ]
    with running_server(app, listeners, reload_interval) as server:
        yield Served(server, f"http://{LOOPBACK}:{http_port}", f"https://{LOOPBACK}:{https_port}",
                     https_port)  # fmt: skip


def served_certificate(port: int, cafile: Path, server_name: str = LOOPBACK) -> bytes:
    """The DER certificate a TLS handshake with ``127.0.0.1:port`` presents, verified against
    ``cafile`` for ``server_name``."""
    context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection((LOOPBACK, port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=server_name) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der
