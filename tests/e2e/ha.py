"""Two Muster replicas behind a Service, on the real control plane.

``MusterProcess`` runs ``muster serve --leader-elect`` as a real subprocess (so SIGKILL is
real). ``ServiceProxy`` plays the Kubernetes Service in front of them: a loopback TCP proxy
that sends each new connection to the next replica whose ``/readyz`` answers 200 (round
robin), as kube-proxy picks a ready endpoint; with none ready the connection is refused
(closed at once). Followers are ready too and forward the verbs to the leader.
``HaCluster`` puts it all together: control plane, two replicas, the proxy and
kube-scheduler 1.20 using the proxy as its extender URL. Used by test_ha_e2e.py and
scripts/bench_takeover.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
from controlplane import LOOPBACK, ControlPlane, _Process, free_ports, wait_for
from harness import SCHEDULER_CONFIG

#: Readiness is polled this often (a Service's endpoints follow readiness within about a
#: second in a real cluster with ``periodSeconds: 1``; deploy/ uses that).
READY_POLL = 0.1
NAMESPACE = "muster-system"


def ready(url: str) -> bool:
    """Whether ``url``/readyz answers 200."""
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=1) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class MusterProcess:
    """``muster serve`` in cluster mode (with leader election unless ``elect`` is false), as
    a child process."""

    def __init__(self, cp: ControlPlane, identity: str, *extra: str, elect: bool = True) -> None:
        self.cp, self.identity, self.extra = cp, identity, extra
        self.elect = elect
        (self.port,) = free_ports(1)
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.proc: _Process | None = None
        self.starts = 0

    def start(self) -> None:
        """Start (again) on the same port; logs go to ``<identity>-<n>.log``."""
        assert self.cp.dir is not None and self.proc is None
        self.starts += 1
        argv = [
            sys.executable, "-m", "app.cli", "serve",
            "--kubeconfig", str(self.cp.kubeconfig),
            "--host", LOOPBACK, "--port", str(self.port),
            *(("--leader-elect", "--identity", self.identity) if self.elect else ()),
            "--muster-namespace", NAMESPACE,
            "--mirror-unresolvable", "--strategy", "binpack",
            "--advertise-url", self.url,
            *self.extra,
        ]  # fmt: skip
        log = Path(self.cp.dir) / f"{self.identity}-{self.starts}.log"
        self.proc = _Process(self.identity, argv, log)

    def kill(self) -> None:
        """SIGKILL: no cleanup, no Lease release."""
        assert self.proc is not None
        self.proc.popen.send_signal(signal.SIGKILL)
        self.proc.popen.wait()
        self.proc.stop()  # closes the log
        self.proc = None

    def stop(self) -> None:
        """SIGTERM (the leader releases its Lease), then reap."""
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.exited() is None

    def ready(self) -> bool:
        """Whether it reports ready (its cache has synced)."""
        return self.alive and ready(self.url)

    def leads(self) -> bool:
        """Whether it is the leader (it won the Lease and took over)."""
        try:
            return self.alive and self.get("/debug/leadership")["role"] == "leader"
        except (urllib.error.URLError, OSError):
            return False

    def synced(self) -> bool:
        """Whether it runs and its cache has synced (leader or follower)."""
        try:
            return self.alive and bool(self.get("/readyz").get("synced"))
        except (urllib.error.URLError, OSError):
            return False

    def get(self, path: str) -> dict[str, Any]:
        """GET a JSON path of this replica (the body of an error status too)."""
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=5) as response:
                body: dict[str, Any] = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read())
        return body

    def log(self) -> str:
        """Every log of this replica so far (all starts)."""
        assert self.cp.dir is not None
        return "".join(
            p.read_text(errors="replace")
            for p in sorted(Path(self.cp.dir).glob(f"{self.identity}-*.log"))
        )


class ServiceProxy:
    """A loopback TCP proxy to the ready backends (see module). Like a Service without ready
    endpoints, it refuses connections while no backend is ready: it stops listening."""

    def __init__(self, backends: list[MusterProcess]) -> None:
        self.backends = backends
        self.port = 0
        self._listener: socket.socket | None = None
        self._listen()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self._ready: list[MusterProcess] = []
        self._next = 0
        self._stop = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._poll, daemon=True)]
        #: identity -> connections routed to it
        self.routed: dict[str, int] = {}

    def _listen(self) -> socket.socket:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK, self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        return listener

    def start(self) -> ServiceProxy:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in list(self._threads):
            thread.join(5)
        self._close_listener()
        with self._lock:
            for sock in list(self._sockets):
                with contextlib.suppress(OSError):
                    sock.close()

    def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                listener.close()

    @property
    def refusing(self) -> bool:
        """Whether it refuses connections now (no ready backend: not listening)."""
        return self._listener is None

    @property
    def endpoints(self) -> list[MusterProcess]:
        """The ready backends new connections go to (none: refused)."""
        return self._ready

    def _poll(self) -> None:
        while not self._stop.wait(READY_POLL):
            self._ready = [b for b in self.backends if b.ready()]
            if not self._ready:
                self._close_listener()
            elif self._listener is None or not any(t.is_alive() for t in self._threads[1:]):
                listener = self._listener or self._listen()
                thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
                self._threads.append(thread)
                thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            ready = self._ready
            backend = ready[self._next % len(ready)] if ready else None
            self._next += 1
            upstream = None
            if backend is not None:
                try:
                    upstream = socket.create_connection((LOOPBACK, backend.port), timeout=1)
                    upstream.settimeout(None)
                except OSError:
                    upstream = None
            if upstream is None or backend is None:
                client.close()
                continue
            self.routed[backend.identity] = self.routed.get(backend.identity, 0) + 1
            with self._lock:
                self._sockets.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
                with self._lock:
                    self._sockets.discard(sock)


class HaCluster:
    """Control plane, replicas ``muster-a`` and ``muster-b`` (by default), the proxy and
    kube-scheduler."""

    def __init__(
        self, cp: ControlPlane, *extra: str, replicas: str = "ab", elect: bool = True
    ) -> None:
        self.cp = cp
        self.api = cp.api_client()
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.core.create_namespace({"metadata": {"name": NAMESPACE}})
        self.replicas = [MusterProcess(cp, f"muster-{x}", *extra, elect=elect) for x in replicas]
        self.proxy = ServiceProxy(self.replicas)

    def start(self) -> None:
        for replica in self.replicas:
            replica.start()
        self.proxy.start()
        wait_for(self.leader, 60, "a Muster replica to lead")
        wait_for(self.followers_synced, 60, "the follower to sync")
        self.cp.start_scheduler(SCHEDULER_CONFIG.replace("MUSTER_URL", self.proxy.url + "/"))

    def followers_synced(self) -> bool:
        leader = self.leader()
        others = [r for r in self.replicas if r is not leader and r.alive]
        return all(r.synced() for r in others)

    def stop(self) -> None:
        self.cp.stop_scheduler()
        self.proxy.stop()
        for replica in self.replicas:
            replica.stop()
        self.api.close()

    def leader(self) -> MusterProcess | None:
        """The replica that leads, if any."""
        return next((r for r in self.replicas if r.leads()), None)

    def kill_leader(self) -> MusterProcess:
        """SIGKILL the leader; returns it (dead)."""
        leader = wait_for(self.leader, 30, "a leader")
        leader.kill()
        return leader

    def lease(self) -> Any:
        return kubernetes.client.CoordinationV1Api(self.api).read_namespaced_lease(
            "muster-leader", NAMESPACE
        )

    def lease_holder(self) -> str:
        return str(self.lease().spec.holder_identity or "")

    def lease_annotations(self) -> dict[str, str]:
        return dict(self.lease().metadata.annotations or {})


@contextlib.contextmanager
def ha_cluster(*extra: str, replicas: str = "ab", elect: bool = True) -> Iterator[HaCluster]:
    """A started ``HaCluster`` (``extra``: more ``muster serve`` flags; ``replicas``: their
    letters; ``elect``: with leader election), stopped after."""
    cp = ControlPlane()
    try:
        cp.start()
        cluster = HaCluster(cp, *extra, replicas=replicas, elect=elect)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()
            keep = os.environ.get("MUSTER_E2E_LOGS")  # a folder to keep every log in
            if keep and cp.dir is not None:
                shutil.copytree(cp.dir, keep, dirs_exist_ok=True, ignore=_not_logs)
    finally:
        cp.stop()


def _not_logs(folder: str, names: list[str]) -> list[str]:
    return [n for n in names if not n.endswith(".log") and not Path(folder, n).is_dir()]
