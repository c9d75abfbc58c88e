"""``app.k8s.admission``: what admission may see of Bindings reaches ``BindAdmission`` through
discovery and list+watch of the admission configurations.

The admission policies (``ValidatingAdmissionPolicy`` v1 needs 1.30+, ``MutatingAdmissionPolicy``
1.32+) cannot run here: these tests feed ``AdmissionSync`` the documented JSON objects through
the scripted discovery and list/watch of ``test_groups``. Webhook configurations run against a
real API server in ``tests/e2e/test_bind_dry_run_e2e.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.core.state.bindadmission import BindAdmission
from app.k8s.admission import AdmissionSync
from tests.k8s.test_gateway_sync import event_line, eventually, listing
from tests.k8s.test_groups import FakeGroupApi

GROUP = "admissionregistration.k8s.io"
BINDING_RULE = {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                "resources": ["pods/binding"]}  # fmt: skip
PODS_RULE = {**BINDING_RULE, "resources": ["pods"]}


def webhooks(name: str, rule: dict[str, Any], rv: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "resourceVersion": rv},
        "webhooks": [{"name": f"{name}.example.com", "rules": [rule],
                      "clientConfig": {"url": "https://x"}, "sideEffects": "None",
                      "admissionReviewVersions": ["v1"]}],
    }  # fmt: skip


def vap(name: str, rule: dict[str, Any], rv: str = "1") -> dict[str, Any]:
    """A ``ValidatingAdmissionPolicy`` as the Kubernetes 1.30 docs show it."""
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "resourceVersion": rv},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [rule]},
            "validations": [{"expression": "object.target.name != 'forbidden'"}],
        },
    }


@pytest.fixture
def run() -> Iterator[Callable[[FakeGroupApi], tuple[BindAdmission, AdmissionSync]]]:
    started: list[tuple[AdmissionSync, FakeGroupApi]] = []

    def start(api: FakeGroupApi) -> tuple[BindAdmission, AdmissionSync]:
        admission = BindAdmission()
        sync = AdmissionSync(admission, api, resync_backoff=0.01, rediscover=3600,
                             watch_timeout=1)  # fmt: skip
        started.append((sync, api))
        sync.start()
        return admission, sync

    yield start
    for sync, api in started:
        api.closed.set()
        sync.stop(timeout=5)


def test_webhooks_on_pods_only_turn_dry_runs_off(run: Callable[..., Any]) -> None:
    api = FakeGroupApi()
    api.serve(GROUP, "v1", "validatingwebhookconfigurations",
              [listing("3", webhooks("muster", PODS_RULE))])  # fmt: skip
    api.serve(GROUP, "v1", "mutatingwebhookconfigurations", [listing("3")])
    admission, sync = run(api)
    eventually(lambda: sync.ready.is_set(), "the lists")
    assert admission.describe() == {"mode": "auto", "known": True, "seeBindings": [],
                                    "dryRun": False}  # fmt: skip
    assert sync.served == [f"mutatingwebhookconfigurations.{GROUP}/v1",
                           f"validatingwebhookconfigurations.{GROUP}/v1"]  # fmt: skip


def test_a_webhook_on_bindings_added_by_the_watch(run: Callable[..., Any]) -> None:
    api = FakeGroupApi()
    api.serve(GROUP, "v1", "validatingwebhookconfigurations",
              [listing("3"), [event_line("ADDED", webhooks("guard", BINDING_RULE, "4"))]])
    admission, sync = run(api)
    eventually(lambda: admission.describe()["seeBindings"] == ["guard/guard.example.com"],
               "the added webhook")  # fmt: skip
    assert admission.dry_run_wanted()


def test_a_webhook_narrowed_and_one_deleted_by_the_watch(run: Callable[..., Any]) -> None:
    api = FakeGroupApi()
    api.serve(GROUP, "v1", "validatingwebhookconfigurations", [
        listing("3", webhooks("guard", BINDING_RULE, "3")),
        [event_line("MODIFIED", webhooks("guard", PODS_RULE, "5")),
         event_line("ADDED", webhooks("again", BINDING_RULE, "6")),
         event_line("DELETED", webhooks("again", BINDING_RULE, "7"))],
    ])  # fmt: skip
    admission, sync = run(api)
    eventually(lambda: sync.stats()["events"] == 3, "every event")
    assert sync.ready.is_set()
    assert admission.describe()["seeBindings"] == []
    assert not admission.dry_run_wanted()


def test_policies_where_served(run: Callable[..., Any]) -> None:
    api = FakeGroupApi()
    api.serve(GROUP, "v1", "validatingwebhookconfigurations", [listing("1")])
    api.serve(GROUP, "v1", "validatingadmissionpolicies",
              [listing("2", vap("deny-forbidden-binds", BINDING_RULE))])  # fmt: skip
    api.serve(GROUP, "v1beta1", "mutatingadmissionpolicies", [listing("2", vap("m", PODS_RULE))])
    admission, sync = run(api)
    eventually(lambda: sync.ready.is_set(), "the lists")
    assert admission.describe()["seeBindings"] == ["deny-forbidden-binds"]
    assert f"mutatingadmissionpolicies.{GROUP}/v1beta1" in sync.served


def test_unreadable_configurations_keep_dry_runs(run: Callable[..., Any]) -> None:
    """The LIST is refused (no RBAC for it): nothing is known, every gang keeps its dry runs."""
    from kubernetes.client.exceptions import ApiException

    api = FakeGroupApi()
    api.serve(GROUP, "v1", "validatingwebhookconfigurations", [listing("1")])
    api.serve(GROUP, "v1", "mutatingwebhookconfigurations",
              [ApiException(status=403, reason="Forbidden")] * 50)  # fmt: skip
    admission, sync = run(api)
    eventually(lambda: sync.stats()["last_error"], "the refused list")
    assert not sync.ready.is_set()
    assert admission.dry_run_wanted() and not admission.describe()["known"]


def test_a_failing_watch_keeps_dry_runs(run: Callable[..., Any]) -> None:
    """Listed, then every watch fails: what changes meanwhile is not known, so dry runs stay on
    (and ``known`` says false) while it fails."""
    from kubernetes.client.exceptions import ApiException

    api = FakeGroupApi()
    api.serve(GROUP, "v1", "validatingwebhookconfigurations",
              [listing("1"), *[ApiException(status=500, reason="Internal")] * 50])  # fmt: skip
    admission, sync = run(api)
    eventually(lambda: sync.ready.is_set() and sync.stats()["last_error"], "the failing watch")
    assert not sync.healthy()
    assert admission.dry_run_wanted() and not admission.describe()["known"]


def test_a_discovery_failure_keeps_dry_runs(run: Callable[..., Any]) -> None:
    class Unreachable(FakeGroupApi):
        def served(self, group: str, version: str) -> frozenset[str] | None:
            raise OSError("connection refused")

    admission, sync = run(Unreachable())
    eventually(lambda: sync.discovery_error, "the failed discovery")
    assert not sync.ready.is_set() and admission.dry_run_wanted()
