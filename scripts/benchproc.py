"""Child servers for the benchmarks: start one, learn its port, stop it for sure."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

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
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
