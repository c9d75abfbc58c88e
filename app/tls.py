"""HTTPS from certificate and key files that may change while Muster runs.

The API server calls the webhook over HTTPS only. Its certificate is a Secret mounted into the
pod, renewed by cert-manager or replaced by a new ``muster certs`` run; kubelet then swaps the
files (a symlink flip). ``CertReloader`` notices that (modification time, size or inode of
either file) and builds a new ``ssl.SSLContext`` from them. The listening context never changes:
its SNI callback, which OpenSSL runs on every handshake (with or without SNI), hands each new
connection the current context. New handshakes use the new certificate at once, connections
already open keep the old one, nothing restarts.

With a client CA (``client_ca``) the listener also requires a client certificate signed by
it (mutual TLS: kube-scheduler's extender ``tlsConfig``); a connection without one, or with one
from another CA, fails its handshake. The CA file is watched and reloaded like the pair, so
rotating the client CA needs no restart either.

A pair caught half-written (the new certificate with the old key) does not load: the previous
context stays in force and the reload is retried at the next check. (Reloading *into* the live
context would not do: OpenSSL installs the new certificate before it finds the key mismatch,
and the context is left serving a certificate it has no key for.)
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from pathlib import Path

from app.core.model.errors import MusterError

log = logging.getLogger("muster.tls")

#: Seconds between checks of the files (kubelet refreshes Secret volumes about once a minute).
DEFAULT_INTERVAL = 10.0


def server_context(
    certfile: Path | str, keyfile: Path | str, client_ca: Path | str | None = None
) -> ssl.SSLContext:
    """A TLS server context (TLS 1.2 or later) holding the pair; with ``client_ca`` it requires
    a client certificate signed by that CA. ``MusterError`` if a file does not load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    load_pair(context, certfile, keyfile)
    if client_ca is not None:
        try:
            context.load_verify_locations(cafile=str(client_ca))
        except (OSError, ssl.SSLError) as exc:
            raise MusterError(f"cannot load the client CA {client_ca}: {exc}") from exc
        # OpenSSL checks the client certificate's purpose too (extended key usage clientAuth).
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def load_pair(context: ssl.SSLContext, certfile: Path | str, keyfile: Path | str) -> None:
    """Load a certificate chain and its key into ``context``; ``MusterError`` naming the files."""
    try:
        context.load_cert_chain(str(certfile), str(keyfile))
    except (OSError, ssl.SSLError) as exc:
        raise MusterError(
            f"cannot load TLS certificate {certfile} with key {keyfile}: {exc}"
        ) from exc


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)  # follows symlinks: a Secret volume flips its ..data link
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class CertReloader:
    """Serves ``certfile``/``keyfile`` and switches to new ones when they change on disk.

    With ``client_ca`` every handshake must present a client certificate signed by it; that
    file is watched too.

    ``context`` is the listening context (give it to the server); ``current`` the context new
    handshakes get. Call ``check()`` from the thread that runs the server's event loop, or run
    ``watch()`` there as a task. ``reloads`` counts reloads; ``last_error`` is the latest
    failure (``""`` after a good load). Raises ``MusterError`` if the files do not load at first.
    """

    def __init__(
        self,
        certfile: Path | str,
        keyfile: Path | str,
        interval: float = DEFAULT_INTERVAL,
        client_ca: Path | str | None = None,
    ) -> None:
        self.certfile = Path(certfile)
        self.keyfile = Path(keyfile)
        self.client_ca = Path(client_ca) if client_ca is not None else None
        self.interval = interval
        self.reloads = 0
        self.last_error = ""
        self._seen = self._stamps()
        self.current = self._load()
        # The listening context requires client certificates as well: whatever OpenSSL takes
        # over from it when the SNI callback swaps contexts, verification is never off.
        self.context = self._load()
        self.context.sni_callback = self._select

    def _select(self, connection: ssl.SSLObject | ssl.SSLSocket, name: str | None,
                context: ssl.SSLContext) -> None:  # fmt: skip
        connection.context = self.current

    def _load(self) -> ssl.SSLContext:
        return server_context(self.certfile, self.keyfile, self.client_ca)

    def _stamps(self) -> tuple[tuple[int, int, int] | None, ...]:
        files = (self.certfile, self.keyfile) + ((self.client_ca,) if self.client_ca else ())
        return tuple(_stamp(f) for f in files)

    def check(self) -> bool:
        """Switch to the files' pair (and client CA) if any changed since it was loaded;
        return if it did."""
        stamps = self._stamps()
        if stamps == self._seen or None in stamps:
            return False
        try:
            context = self._load()
        except MusterError as exc:
            if str(exc) != self.last_error:
                log.warning("%s; keeping the previous certificate", exc)
            self.last_error = str(exc)
            return False
        self.current = context
        self._seen = stamps
        self.reloads += 1
        self.last_error = ""
        log.info("reloaded TLS certificate %s", self.certfile)
        return True

    async def watch(self) -> None:
        """Check every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            self.check()
