"""What the benchmarks share: child servers (start one, learn its port, stop it for sure) and
latency percentiles."""

from __future__ import annotations

import os
import re
import selectors
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _read_port(proc: subprocess.Popen[str], timeout: float) -> int:
    """The port a child server prints first (``PORT n``); raises if it dies or stays silent."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise RuntimeError(f"server did not report its port within {timeout:.0f} s")
    line = proc.stdout.readline()
    match = re.fullmatch(r"PORT (\d+)\s*", line)
    if not match:
        raise RuntimeError(f"server failed to start (exit code {proc.poll()}): {line!r}")
    return int(match.group(1))


@contextmanager
def child_server(script: Path, args: Sequence[str], timeout: float = 60.0) -> Iterator[str]:
    """Run ``script args`` (which prints ``PORT n`` once listening on 127.0.0.1) for the
    duration of the block; yields its base URL and always stops it."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    cmd = [sys.executable, str(script), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    try:
        yield f"http://127.0.0.1:{_read_port(proc, timeout)}"
    finally:
        stop(proc)
        if proc.stdout is not None:
            proc.stdout.close()


def stop(proc: subprocess.Popen[Any]) -> None:
    """Stop a child process: SIGTERM, then SIGKILL if it is still there after 10 s."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@dataclass(frozen=True, slots=True)
class Latency:
    """One series of latencies, in milliseconds."""

    count: int
    p50: float
    p90: float
    p99: float
    max: float
    per_second: float

    @classmethod
    def of(cls, samples_ns: Sequence[int]) -> Latency:
        """Percentiles of nanosecond samples; ``per_second`` = calls / time spent in them (0
        when no time was spent: a call never made, recorded as 0 ns)."""
        if not samples_ns:
            return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0)
        ns = np.asarray(samples_ns, dtype=np.float64)
        p50, p90, p99 = (float(x) for x in np.percentile(ns, [50, 90, 99]) / 1e6)
        spent = float(ns.sum()) / 1e9
        rate = len(ns) / spent if spent else 0.0
        return cls(len(ns), p50, p90, p99, float(ns.max()) / 1e6, rate)


def serve_on_loopback(app: Any, *, as_serve: bool = False) -> None:
    """Serve the ASGI ``app`` with uvicorn on an ephemeral 127.0.0.1 port, announced first as
    ``PORT n`` on stdout (what ``child_server`` reads). The socket is made with
    ``IPPROTO_TCP`` so asyncio sets TCP_NODELAY on accepted connections (see bench_extender).

    ``as_serve``: run the process as ``muster serve`` does once its cache is loaded (the heap
    frozen out of full garbage collections, the interpreter's thread switch interval).
    """
    import uvicorn

    if as_serve:
        from app.heap import freeze_heap
        from app.server import SWITCH_INTERVAL

        freeze_heap()
        sys.setswitchinterval(SWITCH_INTERVAL)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
