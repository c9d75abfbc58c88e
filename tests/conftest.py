"""Shared fixtures: a real uvicorn server on loopback for HTTP-level tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from app.server import KEEP_ALIVE

#: Recorded kube-scheduler <-> extender exchanges, kept in the repository (see its README.md).
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "kube-scheduler-v1.32"


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running(app: FastAPI) -> Iterator[httpx.Client]:
    """Serve ``app`` with uvicorn on loopback in a thread; yield a client; stop it after."""
    port = free_port()
    # As Muster serves (``app.server.KEEP_ALIVE``): tests idle between calls while they wait
    # on the cluster, and with uvicorn's 5 s a reused connection could be closing.
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        timeout_keep_alive=KEEP_ALIVE,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test server did not start")
        time.sleep(0.01)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        assert not thread.is_alive(), "test server did not stop"


@pytest.fixture
def serve() -> type[running]:  # type: ignore[valid-type]
    """The ``running`` context manager, for tests that build their own app."""
    return running  # type: ignore[return-value]
