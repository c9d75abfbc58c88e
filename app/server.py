"""One Muster app served on several listeners: the extender, the webhook, operations.

kube-scheduler reaches the extender on ``--port`` (HTTPS with a required client certificate
when ``--client-ca`` is given, as in scheduler-config/; plain HTTP otherwise), the API server
calls the admission webhooks over HTTPS on ``--webhook-port``, and ``--ops-listen`` may move
health, metrics, debug, explain and what-if to a listener of their own (``app.api.listeners``
says which route has which role). Every listener serves the *same* app - one cache, one set
of services - from one event loop. The first listener runs the app's lifespan (the cluster
watch starts and stops once); each HTTPS listener gets a ``CertReloader`` so renewed
certificates (and client CAs) are picked up without a restart.

SIGINT/SIGTERM stop every listener (uvicorn's own handlers would each stop only one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from app.api.listeners import EXTENDER, OPS, ROLES, WEBHOOK, RouteGate
from app.core.model.errors import MusterError
from app.heap import freeze_heap
from app.settings import Settings
from app.tls import DEFAULT_INTERVAL, CertReloader

log = logging.getLogger("muster")

#: The interpreter's thread switch interval while serving (seconds; CPython's default is 5 ms).
#: The planner loop is a pure-Python thread: a request handler that gives up the GIL (a lock
#: held for a moment, a numpy call on thousands of nodes) gets it back only when the running
#: thread is asked to switch. 0.5 ms keeps filter from waiting behind a long cycle in 5 ms
#: steps, for a little switching overhead while both run.
SWITCH_INTERVAL = 0.0005
#: Seconds an idle keep-alive connection stays open: longer than the idle timeout of the Go
#: clients that call Muster (kube-scheduler's extender client, kube-apiserver's webhook
#: client: 90 s), so the client closes an idle connection first. With uvicorn's 5 s a call
#: sent just as Muster closed the connection failed, and Go does not send a POST again.
KEEP_ALIVE = 120


def event_loop() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop factory if uvloop is installed (``uvicorn[standard]`` brings it),
    else None (asyncio's own). A loop of our own does not get the one ``uvicorn.run`` would
    set up. uvloop writes a response to its socket without giving up the interpreter lock;
    asyncio's loop gives it up around every ``send`` and, while the planner, the watch and the
    gateway's workers hold it, waits up to a switch interval to get it back: in the 400
    single pods benchmark filter and prioritize spent most of their time there."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - a dependency, but not a hard one
        return None
    return uvloop.new_event_loop


@dataclass(frozen=True, slots=True)
class Listener:
    """An address to serve on; with ``certfile``/``keyfile`` it speaks HTTPS, and with
    ``client_ca`` it also requires a client certificate signed by that CA. It serves the routes
    of ``roles`` (``app.api.listeners``; default: all)."""

    host: str
    port: int
    certfile: Path | None = None
    keyfile: Path | None = None
    client_ca: Path | None = None
    roles: frozenset[str] = ROLES

    @property
    def url(self) -> str:
        """``http(s)://host:port``."""
        return f"{'https' if self.certfile else 'http'}://{self.host}:{self.port}"

    def describe(self) -> str:
        """``URL (roles[, client certificates])``, for the start-up log line."""
        extra = ", client certificates required" if self.client_ca else ""
        return f"{self.url} ({'+'.join(sorted(self.roles))}{extra})"


def parse_address(text: str, what: str = "--ops-listen") -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT`` too) -> ``(host, port)``; ``MusterError`` naming ``what``."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise MusterError(f"{what} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9090")
    return host, int(port)


def plan_listeners(settings: Settings, host: str, port: int) -> list[Listener]:
    """The listeners of a server, and the routes each serves.

    * ``host:port`` - the extender; HTTPS with required client certificates when
      ``settings.client_ca`` is set (then the extender verbs are served nowhere else).
    * ``host:webhook_port`` - HTTPS for the admission webhooks, when a serving pair is set.
    * ``settings.ops_listen`` - operations routes only; once it is set they leave the others.

    ``MusterError`` for a combination that cannot work (a client CA without a serving pair).
    """
    tls = settings.tls_cert is not None and settings.tls_key is not None
    if settings.client_ca is not None and not tls:
        raise MusterError("--client-ca needs --tls-cert and --tls-key (the extender's HTTPS)")
    ops_elsewhere = settings.ops_listen is not None
    shared = set() if ops_elsewhere else {OPS}
    mutual = settings.client_ca is not None
    extender = Listener(
        host,
        port,
        settings.tls_cert if mutual else None,
        settings.tls_key if mutual else None,
        settings.client_ca,
        frozenset({EXTENDER, WEBHOOK} | shared),
    )
    listeners = [extender]
    if tls:
        roles = {WEBHOOK} | shared | (set() if mutual else {EXTENDER})
        listeners.append(Listener(host, settings.webhook_port, settings.tls_cert,
                                  settings.tls_key, roles=frozenset(roles)))  # fmt: skip
    if settings.ops_listen is not None:
        ops_host, ops_port = parse_address(settings.ops_listen)
        listeners.append(Listener(ops_host, ops_port, roles=frozenset({OPS})))
    taken = [(x.host, x.port) for x in listeners]
    if len(set(taken)) < len(taken):
        raise MusterError(f"two listeners on one address: {taken}")
    return listeners


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling to ``MusterServer``."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # uvicorn >= 0.29
        yield

    def install_signal_handlers(self) -> None:  # uvicorn < 0.29
        pass


class MusterServer:
    """Serve ``app`` on ``listeners`` until ``stop()`` (or SIGINT/SIGTERM in the main thread).

    TLS files are loaded when ``serve()`` starts; an unloadable pair raises ``MusterError``
    before anything listens.
    """

    def __init__(
        self,
        app: FastAPI,
        listeners: Sequence[Listener],
        *,
        log_level: str = "info",
        access_log: bool = False,
        reload_interval: float = DEFAULT_INTERVAL,
    ) -> None:
        if not listeners:
            raise ValueError("at least one listener")
        self.listeners = tuple(listeners)
        self.reloaders: list[CertReloader] = []
        self._servers: list[_Server] = []
        for i, listener in enumerate(self.listeners):
            served = app if listener.roles == ROLES else RouteGate(app, listener.roles)
            config = uvicorn.Config(
                served,
                host=listener.host,
                port=listener.port,
                log_level=log_level,
                access_log=access_log,
                lifespan="on" if i == 0 else "off",
                timeout_keep_alive=KEEP_ALIVE,
            )
            self._servers.append(_Server(config))
        self._reload_interval = reload_interval

    @property
    def started(self) -> bool:
        """Whether every listener accepts connections."""
        return all(s.started for s in self._servers)

    def stop(self) -> None:
        """Ask every listener to finish (thread-safe; ``serve()`` returns once they have)."""
        for server in self._servers:
            server.should_exit = True

    def run(self) -> None:
        """``serve()`` in a new event loop (blocks): uvloop's where it is installed (see
        ``event_loop``)."""
        with asyncio.Runner(loop_factory=event_loop()) as runner:
            runner.run(self.serve())

    def _load_tls(self) -> None:
        self.reloaders = []
        for listener, server in zip(self.listeners, self._servers, strict=True):
            if listener.certfile is None or listener.keyfile is None:
                continue
            reloader = CertReloader(listener.certfile, listener.keyfile, self._reload_interval,
                                    listener.client_ca)  # fmt: skip
            config = server.config
            if not config.loaded:
                config.load()
            config.ssl = reloader.context  # ours: reloadable, TLS >= 1.2, OpenSSL's ciphers
            self.reloaders.append(reloader)

    async def serve(self) -> None:
        """Serve until every listener has stopped."""
        self._load_tls()
        # Everything alive now (imported modules: ~150k objects, mostly the kubernetes
        # client's models) lives as long as the process.
        freeze_heap()
        switch = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL)
        loop = asyncio.get_running_loop()
        handle_signals = threading.current_thread() is threading.main_thread()
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self.stop)
        watchers = [asyncio.create_task(r.watch()) for r in self.reloaders]
        servers = [asyncio.create_task(s.serve()) for s in self._servers]
        try:
            # When one listener ends (stop, or it failed to start), end the others too.
            await asyncio.wait(servers, return_when=asyncio.FIRST_COMPLETED)
            self.stop()
            await asyncio.gather(*servers)
        finally:
            sys.setswitchinterval(switch)
            self.stop()
            for task in watchers:
                task.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)
            if handle_signals:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
