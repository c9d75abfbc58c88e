"""Filter latency with and without a stream of pod events flowing into the cache.

Usage::

    .venv/bin/python scripts/bench_events.py           # 1 000 nodes, 10 000 pods, 100 events/s
    .venv/bin/python scripts/bench_events.py --requests 400 --rate 200

One Muster server runs in a subprocess (uvicorn, access log off, on 127.0.0.1). Its cache is
filled and kept up to date by ``app.k8s.sync.ClusterSync`` — the code the watch uses in
cluster mode — from an in-memory API (``bench_memory.PagedApi``: real-shaped node and pod JSON).
After the LIST, the pod watch stream delivers ``MODIFIED`` events for random existing pods
(new resourceVersion, a changed annotation) at the rate the
benchmark sets through a control route of the child (``POST /bench/rate/{n}``); 0 keeps the
stream open and idle.

The client sends kube-scheduler's ``/filter`` (nodeCacheCapable, every node name, a fresh
1-GPU pod each time) strictly sequentially and alternates phases of ``--phase`` seconds:
stream off, stream on, until each series has ``--requests`` calls. Both series therefore
come from the same server and run, and drift hits both. Prints p50/p99 of each, their ratio
and the event rate actually applied; it is not a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import bench_extender  # noqa: E402
import bench_memory  # noqa: E402
from benchproc import Latency, child_server  # noqa: E402

FILL = 0.7  # share of nodes running a gang: the rest have room for the benchmark's pods


class StreamingApi(bench_memory.PagedApi):
    """``PagedApi`` whose pod watch delivers MODIFIED events at ``rate`` per second."""

    def __init__(self, nodes: int, pods: int, done: threading.Event) -> None:
        super().__init__(nodes, pods, done, FILL)
        self.rate = 0.0
        self.delivered = 0
        self._rng = random.Random(5)
        self._version = 10_000_000

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> Any:
        if kwargs.get("watch"):
            return _EventStream(self, float(kwargs.get("timeout_seconds") or 5))
        return super().list_pod_for_all_namespaces(**kwargs)

    def event(self) -> bytes:
        """One MODIFIED event for a random existing pod, as a watch line."""
        i = self._rng.randrange(self.pods)
        obj = bench_memory.pod_json(i, self.nodes, self.fill)
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)
        obj["metadata"]["annotations"]["example.com/heartbeat"] = str(self._version)
        self.delivered += 1
        return json.dumps({"type": "MODIFIED", "object": obj}).encode() + b"\n"


class _EventStream:
    """One watch call: events paced at ``api.rate`` until its timeout or the end."""

    def __init__(self, api: StreamingApi, timeout: float) -> None:
        self._api, self._timeout = api, timeout

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        ends = time.monotonic() + self._timeout
        due = time.monotonic()
        while not self._api.done.is_set() and time.monotonic() < ends:
            if self._api.rate <= 0:
                self._api.done.wait(0.05)
                due = time.monotonic()
                continue
            due += 1.0 / self._api.rate
            pause = due - time.monotonic()
            if pause > 0 and self._api.done.wait(pause):
                return
            yield self._api.event()

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def serve(nodes: int, pods: int) -> None:
    """Child process: Muster fed by ``StreamingApi`` through ClusterSync, plus a control route."""
    import uvicorn
    from fastapi import FastAPI

    from app.k8s.sync import ClusterSync
    from app.main import create_app
    from app.settings import Settings

    app: FastAPI = create_app(Settings(demo=True))
    done = threading.Event()
    api = StreamingApi(nodes, pods, done)
    sync = ClusterSync(app.state.muster.cache, api)  # type: ignore[arg-type]

    @app.post("/bench/rate/{rate}")
    def set_rate(rate: float) -> dict[str, float]:
        api.rate = rate
        return {"delivered": api.delivered, "applied": sync.pod_events}

    sync.start()
    if not sync.wait_synced(600):
        raise SystemExit(f"cache did not sync: {sync.stats()}")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    try:
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        done.set()
        sync.stop()


@dataclass(frozen=True, slots=True)
class Result:
    """The two series and the stream actually delivered during the "on" phases."""

    quiet: Latency
    streaming: Latency
    events_per_second: float


def run(nodes: int, pods: int, requests: int, phase: float, rate: float, warmup: int) -> Result:
    """Measure; print and return the figures."""
    names = [f"gpu-node-{i:05d}" for i in range(nodes)]
    template = bench_extender.args_template(names)
    script = Path(__file__).resolve()
    args = ["--serve", "--nodes", str(nodes), "--pods", str(pods)]
    samples: dict[bool, list[int]] = {False: [], True: []}
    streamed_s = 0.0
    applied = 0
    with child_server(script, args, 900.0) as url, bench_extender.make_client(url) as client:
        for i in range(warmup):
            bench_extender.timed_post(client, "/filter", template.render(i)[0])
        index = warmup
        while min(len(samples[True]), len(samples[False])) < requests:
            for on in (False, True):
                before = client.post(f"/bench/rate/{rate if on else 0}").json()["applied"]
                started = time.monotonic()
                while time.monotonic() - started < phase:
                    body, _ = template.render(index)
                    index += 1
                    samples[on].append(bench_extender.timed_post(client, "/filter", body)[0])
                if on:
                    streamed_s += time.monotonic() - started
                    after = client.post("/bench/rate/0").json()["applied"]
                    applied += after - before
    quiet, streaming = Latency.of(samples[False]), Latency.of(samples[True])
    result = Result(quiet, streaming, applied / streamed_s if streamed_s else 0.0)
    ratio50 = streaming.p50 / quiet.p50 if quiet.p50 else float("nan")
    ratio99 = streaming.p99 / quiet.p99 if quiet.p99 else float("nan")
    print(f"/filter over HTTP, {nodes} nodes, {pods} pods in the cache; {len(samples[False])} "
          f"and {len(samples[True])} requests in alternating phases of {phase:g} s")  # fmt: skip
    print(f"  {'series':34} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    print(f"  {'no pod events (baseline)':34} {quiet.p50:8.2f} {quiet.p99:8.2f} {quiet.max:8.2f}")
    label = f"{result.events_per_second:.0f} pod events/s applied"
    print(f"  {label:34} {streaming.p50:8.2f} {streaming.p99:8.2f} {streaming.max:8.2f}")
    print(f"  ratio streaming/baseline: p50 x{ratio50:.2f}, p99 x{ratio99:.2f}"
          f"   (target: p99 unchanged)")  # fmt: skip
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--requests", type=int, default=1000, help="filter calls per series")
    parser.add_argument("--phase", type=float, default=2.0, help="seconds per on/off phase")
    parser.add_argument("--rate", type=float, default=100.0, help="pod events per second")
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.nodes, args.pods)
    else:
        run(args.nodes, args.pods, args.requests, args.phase, args.rate, args.warmup)


if __name__ == "__main__":
    main()
