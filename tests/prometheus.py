"""A real Prometheus (Debian's ``prometheus`` package) for tests: started on loopback with a
short scrape interval, queried through its HTTP API, stopped afterwards."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import yaml

from tests.conftest import free_port

INSTALL = "apt-get install -y prometheus  (Debian's package brings prometheus and promtool)"
T = TypeVar("T")


def tool(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``; fails the test saying how to install it."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; install it with: {INSTALL}")
    return path


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``promtool`` with ``args``."""
    return subprocess.run(
        [tool("promtool"), *args], capture_output=True, text=True, timeout=120, check=False
    )


class Prometheus:
    """A running Prometheus: ``query`` its HTTP API."""

    def __init__(self, url: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.process = process
        self.log = log
        self.client = httpx.Client(base_url=url, timeout=10)

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query; the result vector (or matrix/scalar rows) as Prometheus gives it."""
        answer = self.client.get("/api/v1/query", params={"query": expr})
        body = answer.json()
        assert body.get("status") == "success", f"{expr}: {body}"
        result = body["data"]["result"]
        if body["data"]["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        return list(result)

    def value(self, expr: str) -> dict[tuple[tuple[str, str], ...], float]:
        """``expr``'s samples: sorted label pairs (without ``__name__``) -> value."""
        out = {}
        for row in self.query(expr):
            labels = tuple(sorted((k, v) for k, v in row["metric"].items() if k != "__name__"))
            out[labels] = float(row["value"][1])
        return out

    def alerts(self) -> dict[str, list[dict[str, Any]]]:
        """Alert name -> its active alerts (pending or firing), from ``/api/v1/alerts``."""
        body = self.client.get("/api/v1/alerts").json()
        out: dict[str, list[dict[str, Any]]] = {}
        for alert in body["data"]["alerts"]:
            out.setdefault(alert["labels"]["alertname"], []).append(alert)
        return out

    def rule_health(self) -> dict[str, str]:
        """Rule name -> its health after the last evaluation (``ok``, ``err``, ``unknown``)."""
        body = self.client.get("/api/v1/rules").json()
        return {
            rule["name"]: rule["health"]
            for group in body["data"]["groups"]
            for rule in group["rules"]
        }

    def poll(
        self, what: str, check: Callable[[], T | None], timeout: float = 60.0, every: float = 0.25
    ) -> T:
        """Call ``check`` until it returns something not ``None``; fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            try:
                got = check()
                if got is not None:
                    return got
            except AssertionError as exc:
                last = exc
            if self.process.poll() is not None:
                pytest.fail(f"prometheus exited: {self.log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}" + (f": {last}" if last else ""))
            time.sleep(every)


@contextmanager
def prometheus(
    workdir: Path, targets: dict[str, str], rules: list[Path], interval: str = "1s"
) -> Iterator[Prometheus]:
    """Run Prometheus on a free loopback port scraping ``targets`` (job -> host:port) every
    ``interval`` with ``rules``; stop it on exit."""
    binary = tool("prometheus")
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(r) for r in rules],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [target]}]}
            for job, target in targets.items()
        ],
    }
    path = workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    log = workdir / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={path}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", process, log)
    try:

        def ready() -> bool | None:
            try:
                return server.client.get("/-/ready").status_code == 200 or None
            except httpx.TransportError:
                return None

        server.poll("prometheus to be ready", ready)
        yield server
    finally:
        server.client.close()
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=20)
        if process.poll() is None:  # it did not stop on SIGTERM
            process.kill()
            process.wait(timeout=10)
