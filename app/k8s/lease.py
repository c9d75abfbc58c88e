"""Leader election on a ``coordination.k8s.io/v1`` Lease (served since Kubernetes 1.14).

Every replica runs a ``LeaseElector`` thread. A replica whose cache has synced tries to take
the Lease every ``retry_period`` seconds; it may once the Lease is free (no holder, or released)
or expired: its record has not changed for ``leaseDurationSeconds`` as seen by *this* replica's
monotonic clock (so clocks need not agree, as in client-go). Writes carry the resourceVersion
read, so two replicas cannot both win. The holder renews every ``retry_period`` and counts as
leader only while its last successful renewal is less than ``renew_deadline`` old; the deadline
is shorter than the lease duration, so a leader that cannot renew stops deciding before anyone
else may take over. On a clean stop the holder releases the Lease (no holder, duration 1 s), so
a follower takes over at once instead of waiting for it to expire.

The holder's identity is its pod name. ``annotations()`` adds the holder's own records to every
renewal (the head-of-line hold, ``app.core.cycle.records``); ``on_started`` gets those the
previous holder left.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import ApiClient, CoordinationV1Api
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from app.k8s.apitime import micro_time

log = logging.getLogger("muster.k8s.lease")


class LeaseElector:
    """Takes and keeps the Lease ``namespace/name`` for ``identity`` (see module)."""

    def __init__(
        self,
        api: ApiClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 3.0,
        renew_deadline: float = 2.0,
        retry_period: float = 0.5,
        can_lead: Callable[[], bool] = lambda: True,
        on_started: Callable[[Mapping[str, str]], object] = lambda _: None,
        on_stopped: Callable[[], object] = lambda: None,
        annotations: Callable[[], Mapping[str, str]] = dict,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError(
                "leader election needs 0 < retry period < renew deadline < lease duration, got "
                f"{retry_period:g} / {renew_deadline:g} / {lease_duration:g}"
            )
        # Raw JSON in and out (``_preload_content=False``): typed as Any on purpose.
        self._api: Any = CoordinationV1Api(api)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._can_lead = can_lead
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._annotations = annotations
        self._clock = clock
        self._timeout = (min(1.0, retry_period * 2), renew_deadline / 2)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: The Lease as last read or written, and when (this replica's clock) it last changed.
        self._record: dict[str, Any] | None = None
        self._observed_rv = ""
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        self._leading = False
        #: Who holds the Lease, as last seen ("" for nobody).
        self.holder = ""
        self.transitions = 0
        self.last_error: str | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the election thread."""
        self._thread = threading.Thread(target=self._run, name="muster-lease", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop taking part; a leader steps down and releases the Lease."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._leading:
            self._step_down("stopping")
            self._release()

    @property
    def held(self) -> bool:
        """Whether this replica holds the Lease now (renewed within the renew deadline)."""
        renewed = self._renewed_at
        return (
            self._leading and renewed is not None and self._clock() - renewed < self.renew_deadline
        )

    def leader_annotations(self) -> Mapping[str, str] | None:
        """The annotations of the Lease as the current holder (another replica) last wrote
        them, while its lease runs; None when this replica holds it or nobody does."""
        record = self._record
        if record is None or self._leading:
            return None
        holder = (record.get("spec") or {}).get("holderIdentity")
        if not holder or holder == self.identity or self._expired(record):
            return None
        annotations: Mapping[str, str] = record.get("metadata", {}).get("annotations") or {}
        return annotations

    def stats(self) -> dict[str, object]:
        """The election's state, for ``/debug`` and ``/readyz``."""
        return {
            "lease": f"{self.namespace}/{self.name}",
            "identity": self.identity,
            "holder": self.holder,
            "leading": self.held,
            "transitions": self.transitions,
            "last_error": self.last_error,
        }

    # -- the loop ---------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self._clock()
            try:
                self._step()
            except Exception:  # the election must survive anything one round does
                log.exception("leader election round failed")
            self._stop.wait(max(self.retry_period - (self._clock() - started), 0.0))

    def _step(self) -> None:
        if self._leading:
            if self._try(renew=True):
                return
            renewed = self._renewed_at or 0.0
            if self._clock() - renewed >= self.renew_deadline:
                self._step_down(f"could not renew within {self.renew_deadline:g}s")
            return
        if not self._can_lead():
            return
        previous = self._try(renew=False)
        if previous is not None:
            self._leading = True
            log.info("%s leads (Lease %s/%s)", self.identity, self.namespace, self.name)
            try:
                self._on_started(previous)
            except Exception:
                log.exception("taking over failed; giving the Lease up")
                self._step_down("taking over failed")
                self._release()

    def _step_down(self, why: str) -> None:
        log.warning("%s no longer leads: %s", self.identity, why)
        self._leading = False
        self._renewed_at = None
        self._on_stopped()

    # -- API --------------------------------------------------------------------------------

    def _try(self, *, renew: bool) -> Any:
        """Renew (``renew``) or take the Lease. Returns the previous holder's annotations
        when taken (``{}`` if it was new), True when renewed, None when not."""
        try:
            current = self._read()
            if current is None:
                if renew:
                    return None
                self._write(self._body(None, acquire=True), create=True)
                self._taken()
                return {}
            spec = current.get("spec") or {}
            holder = str(spec.get("holderIdentity") or "")
            self.holder = holder
            mine = holder == self.identity
            if renew and not mine:
                return None
            if not mine and holder and not self._expired(current):
                return None
            previous = dict(current.get("metadata", {}).get("annotations") or {})
            self._write(self._body(current, acquire=not mine), create=False)
            self._renewed_at = self._clock()
            self.last_error = None
            if renew:
                return True
            self._taken()
            return previous
        except ApiException as exc:
            if exc.status == 409:  # someone else wrote first: read again next round
                return None
            self.last_error = f"{exc.status} {exc.reason}"
            log.warning("lease %s/%s: %s", self.namespace, self.name, self.last_error)
            return None
        except (HTTPError, OSError, ValueError) as exc:
            self.last_error = repr(exc)
            log.warning("lease %s/%s: %s", self.namespace, self.name, self.last_error)
            return None

    def _taken(self) -> None:
        self._renewed_at = self._clock()
        self.holder = self.identity
        self.transitions += 1

    def _expired(self, lease: Mapping[str, Any]) -> bool:
        """Whether the holder's record has not changed for its lease duration (by this
        replica's clock, from when it first saw that record)."""
        spec = lease.get("spec") or {}
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        return self._clock() - self._observed_at >= duration

    def _read(self) -> dict[str, Any] | None:
        try:
            response = self._api.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=self._timeout
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        try:
            lease: dict[str, Any] = json.loads(response.data)
        finally:
            response.release_conn()
        self._observe(lease)
        return lease

    def _observe(self, lease: Mapping[str, Any]) -> None:
        rv = str(lease.get("metadata", {}).get("resourceVersion") or "")
        if rv != self._observed_rv:
            self._observed_rv, self._observed_at = rv, self._clock()
        self._record = dict(lease)

    def _body(self, current: Mapping[str, Any] | None, *, acquire: bool) -> dict[str, Any]:
        spec = dict((current or {}).get("spec") or {})
        now = micro_time(datetime.now(UTC))
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if current is not None:
            metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
        annotations = dict(self._annotations())
        if annotations:
            metadata["annotations"] = annotations
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=math.ceil(self.lease_duration),
            renewTime=now,
        )
        if acquire:
            spec["acquireTime"] = now
            if current is not None:
                spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            else:
                spec["leaseTransitions"] = 0
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    def _write(self, body: dict[str, Any], *, create: bool) -> None:
        kwargs: dict[str, Any] = {"_preload_content": False, "_request_timeout": self._timeout}
        if create:
            response = self._api.create_namespaced_lease(self.namespace, body, **kwargs)
        else:
            response = self._api.replace_namespaced_lease(self.name, self.namespace, body, **kwargs)
        try:
            self._observe(json.loads(response.data))
        finally:
            response.release_conn()

    def _release(self) -> None:
        """Give the Lease up (no holder, 1 s), so a follower need not wait for it to expire."""
        try:
            current = self._read()
            spec = (current or {}).get("spec") or {}
            if current is None or spec.get("holderIdentity") != self.identity:
                return
            body = self._body(current, acquire=False)
            body["spec"].update(holderIdentity=None, leaseDurationSeconds=1)
            self._write(body, create=False)
            log.info("%s released the Lease", self.identity)
        except (ApiException, HTTPError, OSError, ValueError) as exc:
            log.warning("could not release the Lease: %s", exc)
