"""The Lease elector's rules on a scripted Lease store, step by step on a fake clock.

The real API server runs it in tests/e2e/test_ha_e2e.py; here each rule is checked alone: who
may take the Lease and when, renew deadline before lease duration, release on stop,
optimistic concurrency, and what a new holder learns from the old one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from app.k8s.lease import LeaseElector


class Response:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()

    def release_conn(self) -> None:
        pass


class FakeLeases:
    """One Lease with a resourceVersion; writes must carry the current one (else 409)."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise ApiException(status=503, reason="Service Unavailable")

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> Response:
        self._check()
        if self.lease is None:
            raise ApiException(status=404, reason="Not Found")
        return Response(self.lease)

    def _store(self, body: dict[str, Any]) -> Response:
        self.rv += 1
        body = json.loads(json.dumps(body))
        body["metadata"]["resourceVersion"] = str(self.rv)
        self.lease = body
        return Response(body)

    def create_namespaced_lease(self, namespace: str, body: dict[str, Any], **_: Any) -> Response:
        self._check()
        if self.lease is not None:
            raise ApiException(status=409, reason="Conflict")
        return self._store(body)

    def replace_namespaced_lease(
        self, name: str, namespace: str, body: dict[str, Any], **_: Any
    ) -> Response:
        self._check()
        assert self.lease is not None
        if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        return self._store(body)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store() -> FakeLeases:
    return FakeLeases()


def elector(store: FakeLeases, clock: Clock, identity: str, **kwargs: Any) -> LeaseElector:
    started: list[dict[str, str]] = []
    stopped: list[bool] = []
    e = LeaseElector(
        ApiClient(),
        namespace="muster-system",
        name="muster-leader",
        identity=identity,
        clock=clock,
        on_started=lambda annotations: started.append(dict(annotations)),
        on_stopped=lambda: stopped.append(True),
        annotations=lambda: {"muster.io/endpoint": f"http://{identity}:8888"},
        **kwargs,
    )
    e._api = store
    e.started, e.stopped = started, stopped  # type: ignore[attr-defined]
    return e


def pair(store: FakeLeases) -> tuple[Clock, LeaseElector, LeaseElector]:
    """Replicas ``a`` and ``b`` after one round each: ``a`` holds the Lease."""
    clock = Clock()
    a, b = elector(store, clock, "a"), elector(store, clock, "b")
    a._step()
    b._step()
    return clock, a, b


def test_one_replica_wins_and_the_other_takes_over_only_once_the_lease_ran_out(
    store: FakeLeases,
) -> None:
    clock, a, b = pair(store)
    assert a.held and not b.held and a.started == [{}] and b.started == []
    assert b.leader_annotations() == {"muster.io/endpoint": "http://a:8888"}
    for _ in range(10):  # a renews every retry period: b never gets it
        clock.now += 0.5
        a._step()
        b._step()
    assert a.held and not b.held and store.lease["spec"]["holderIdentity"] == "a"  # type: ignore[index]
    # a dies (no more renewals): b waits the lease duration from when it last saw a change.
    clock.now += 2.9
    b._step()
    assert not b.held
    clock.now += 0.2
    b._step()
    assert b.held and b.started == [{"muster.io/endpoint": "http://a:8888"}]
    spec = store.lease["spec"]  # type: ignore[index]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert not a.held  # its last renewal is older than the renew deadline


def test_a_leader_that_cannot_renew_stops_deciding_at_its_renew_deadline(
    store: FakeLeases,
) -> None:
    clock = Clock()
    a = elector(store, clock, "a")
    a._step()
    store.down = True
    clock.now += 1.9
    a._step()
    assert a.held and a.stopped == []
    clock.now += 0.2
    assert not a.held  # before any other step: ``held`` looks at the clock itself
    a._step()
    assert a.stopped == [True]
    # The deadline (2 s) comes before the lease duration (3 s): nobody else could take over yet.
    assert a.renew_deadline < a.lease_duration


def test_a_stopped_leader_releases_and_the_follower_takes_over_at_once(
    store: FakeLeases,
) -> None:
    clock, a, b = pair(store)
    a._leading = True
    a.stop()
    assert store.lease["spec"].get("holderIdentity") is None  # type: ignore[index]
    assert a.stopped == [True]
    clock.now += 0.5  # no need to wait for the lease duration
    b._step()
    assert b.held


def test_a_write_based_on_a_stale_read_loses(store: FakeLeases) -> None:
    """b decides from what it read that a's Lease ran out, but a renews in between: b's
    write carries the old resourceVersion and is refused; a keeps the Lease."""
    clock, a, b = pair(store)
    clock.now += 3.5  # by b's clock, a's record has not changed for the lease duration
    replace = store.replace_namespaced_lease

    def a_renews_first(*args: Any, **kwargs: Any) -> Response:
        store.replace_namespaced_lease = replace  # type: ignore[method-assign]
        a._step()
        return replace(*args, **kwargs)

    store.replace_namespaced_lease = a_renews_first  # type: ignore[method-assign]
    b._step()
    assert a.held and not b.held and b.started == []
    assert store.lease["spec"]["holderIdentity"] == "a"  # type: ignore[index]


def test_settings_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseElector(
            ApiClient(), namespace="n", name="l", identity="i", lease_duration=2, renew_deadline=3
        )
