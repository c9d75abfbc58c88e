"""The API server misbehaves, on the real control plane, with Muster as kube-scheduler's extender.

* kube-apiserver is stopped mid-run and started again on the same port and etcd: Muster's
  watches resume (relisting where the restarted server no longer has their resourceVersion),
  gangs stay whole, no GPU is over-committed, and work submitted right after the restart —
  while Muster is still reconnecting — is scheduled.
* etcd compacts every second and the apiserver serves watches from etcd (``--watch-cache=false``),
  so a watch that resumes from an older resourceVersion gets a real ``410 Gone``: Muster relists
  under load (node heartbeats, gang waves) and its books match the API server's.
* A validating admission webhook refuses ``pods/binding`` for a while: no gang is ever partly
  bound, and the gangs start once binds are accepted again.
"""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import kubernetes.client
import pytest
from controlplane import GPU_RESOURCE, LOOPBACK, ControlPlane, create_gpu_node, wait_for
from harness import (
    SCHEDULER_CONFIG,
    BindingWatch,
    delete_now,
    gpu_pod,
    make_namespace,
    node_names,
    wait_nodes,
)
from prometheus_client.parser import text_string_to_metric_families

from app.main import create_app
from app.services import Services
from app.settings import Settings
from tests.conftest import running

GANG = 8


@dataclass
class Parts:
    cp: ControlPlane
    core: kubernetes.client.CoreV1Api
    muster: httpx.Client
    services: Services


@contextmanager
def faulty_cluster(apiserver_args: tuple[str, ...] = ()) -> Iterator[Parts]:
    """Like ``harness.muster_cluster``, with extra apiserver flags and Muster's services."""
    cp = ControlPlane(apiserver_args=apiserver_args)
    try:
        cp.start()
        api = cp.api_client()
        core = kubernetes.client.CoreV1Api(api)
        settings = Settings(mode="cluster", mirror_unresolvable=True)
        app = create_app(settings, api_client=cp.api_client())
        with running(app) as muster:
            wait_for(lambda: muster.get("/readyz").status_code == 200, 30, "Muster to sync")
            cp.start_scheduler(SCHEDULER_CONFIG.replace("MUSTER_URL", str(muster.base_url) + "/"))
            yield Parts(cp, core, muster, app.state.muster)
        api.close()
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def parts() -> Iterator[Parts]:
    with faulty_cluster() as p:
        yield p


class ResilientWatch(BindingWatch):
    """A ``BindingWatch`` that survives the API server going away: it retries, and when its
    resourceVersion is gone (410) it rebuilds its view from a fresh LIST."""

    def _run(self) -> None:
        while not self._stopped:
            try:
                if not self._resource_version:
                    self._relist()
                for event in self._watch.stream(
                    self._core.list_namespaced_pod,
                    self._namespace,
                    resource_version=self._resource_version,
                    _request_timeout=(5, 3),
                ):
                    if event["type"] == "ERROR":
                        self._resource_version = ""
                        break
                    self._record(event)
            except kubernetes.client.ApiException as exc:
                if exc.status == 410:
                    self._resource_version = ""
                else:
                    time.sleep(0.2)  # the API server is restarting: retry
            except Exception:
                if self._stopped:
                    return
                time.sleep(0.2)

    def _relist(self) -> None:
        listing = self._core.list_namespaced_pod(self._namespace)
        with self._lock:
            self.current.clear()
        for pod in listing.items:
            self._record({"type": "ADDED", "object": pod})
        self._resource_version = listing.metadata.resource_version


def gang(job: str, ns: str, group: str, size: int = GANG) -> list[dict[str, Any]]:
    labels = {"muster.io/pod-group": job, "muster.io/min-member": str(size), "job": job}
    return [gpu_pod(f"{job}-{i}", 1, ns, group, labels) for i in range(size)]


def create_gang(core: kubernetes.client.CoreV1Api, ns: str, job: str, group: str) -> None:
    for body in gang(job, ns, group):
        core.create_namespaced_pod(ns, body)


def bound(seen: BindingWatch, job: str) -> int:
    return sum(1 for i in range(GANG) if f"{job}-{i}" in seen.current)


def partial(seen: BindingWatch, jobs: list[str]) -> dict[str, int]:
    """Gangs with some but not all members bound right now."""
    counts = {job: bound(seen, job) for job in jobs}
    return {job: n for job, n in counts.items() if 0 < n < GANG}


def books_differ(parts: Parts, ns: str, nodes: list[str]) -> str:
    """What Muster's /debug books say differently from the API server ("" when they agree):
    where each pod of ``ns`` is bound, and the GPUs used on each node."""
    truth: dict[str, str] = {}
    used: Counter[str] = Counter()
    for pod in parts.core.list_pod_for_all_namespaces().items:
        if pod.spec.node_name and pod.status.phase not in ("Succeeded", "Failed"):
            for c in pod.spec.containers:
                used[pod.spec.node_name] += int((c.resources.requests or {}).get(GPU_RESOURCE, 0))
            if pod.metadata.namespace == ns:
                truth[pod.metadata.name] = pod.spec.node_name
    pods = parts.muster.get("/debug/pods").json()["pods"]
    books = {p["name"]: p["node"] for p in pods if p["namespace"] == ns and p["node"]}
    if books != truth:
        return f"placements: muster {sorted(books.items())} != api {sorted(truth.items())}"
    # GPUs held per node by pods (a head-of-line hold for a waiting gang counts in "used"
    # but holds no device, so count the devices that pods hold).
    held = {
        n["name"]: sum(1 for d in n["gpus"]["devices"] if d["pods"])
        for n in parts.muster.get("/debug/nodes").json()["nodes"]
    }
    wrong = {n: (held.get(n), used[n]) for n in nodes if held.get(n) != used[n]}
    return f"GPUs held (muster, api): {wrong}" if wrong else ""


def wait_books_agree(parts: Parts, ns: str, nodes: list[str]) -> None:
    last = ""

    def agree() -> bool:
        nonlocal last
        last = books_differ(parts, ns, nodes)
        return not last

    try:
        wait_for(agree, 60, "Muster's books to match the API server")
    except TimeoutError as exc:
        raise AssertionError(last) from exc


def test_apiserver_restart_mid_run(parts: Parts) -> None:
    """4 nodes x 8 GPUs; three gangs run, two more compete while kube-apiserver restarts."""
    core, cp = parts.core, parts.cp
    ns = make_namespace(core, "restart")
    nodes = node_names("restart", 4)
    for name in nodes:
        create_gpu_node(core, name, gpus=8, labels={"e2e": "restart"})
    wait_nodes(parts.muster, nodes)
    jobs = [f"g{k}" for k in range(6)]
    with ResilientWatch(core, ns) as seen:
        for job in jobs[:3]:
            create_gang(core, ns, job, "restart")
        wait_for(lambda: all(bound(seen, j) == GANG for j in jobs[:3]), 90, "three gangs to run")
        for job in jobs[3:5]:
            create_gang(core, ns, job, "restart")
        # Mid-run: the fourth gang is being planned and bound while the server goes away.
        wait_for(lambda: bound(seen, "g3") or bound(seen, "g4"), 60, "a fourth gang to bind")
        # A write after the last pod event: the restarted server's watch cache begins beyond
        # Muster's resourceVersions, so resuming may earn a 410 and a relist.
        core.create_namespaced_config_map(ns, {"metadata": {"name": "bump"}})
        events_before = parts.services.source.stats()
        cp.stop_apiserver()
        wait_for(lambda: parts.services.source.stats()["last_error"], 60, "Muster to notice")
        cp.start_apiserver()
        # Right away, while Muster's watches are still reconnecting: room frees up and a new
        # gang arrives.
        for i in range(GANG):
            delete_now(core, ns, f"g0-{i}")
        create_gang(core, ns, "g5", "restart")

        def settled() -> bool:
            whole = [j for j in jobs[1:] if bound(seen, j) == GANG]
            return len(whole) == 4 and not partial(seen, jobs[1:])

        wait_for(settled, 120, "four gangs to run whole after the restart")
        waiting = [j for j in jobs[1:] if bound(seen, j) == 0]
        assert len(waiting) == 1, {j: bound(seen, j) for j in jobs}
        wait_books_agree(parts, ns, nodes)
        assert not partial(seen, jobs), partial(seen, jobs)
    stats = parts.services.source.stats()
    assert stats["last_error"] is None and stats["watching"], stats
    print(f"\napiserver restart: relists {events_before['relists']} -> {stats['relists']}, "
          f"pod events {events_before['pod_events']} -> {stats['pod_events']}")  # fmt: skip
    assert max(seen.max_gpus[n] for n in nodes) <= 8, seen.max_gpus


@pytest.fixture(scope="module")
def compacting() -> Iterator[Parts]:
    """Watches served straight from etcd, which compacts every second: a watch resuming from
    a resourceVersion more than a second or two old gets ``410 Gone`` from etcd itself."""
    with faulty_cluster(("--watch-cache=false", "--etcd-compaction-interval=1s")) as p:
        yield p


class Heartbeats:
    """Node heartbeats: each node's annotation patched in turn, as fast as the API allows."""

    def __init__(self, core: kubernetes.client.CoreV1Api, nodes: list[str]) -> None:
        self.core, self.nodes, self.beats = core, nodes, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name in self.nodes:
                beat = {"metadata": {"annotations": {"e2e/heartbeat": str(self.beats)}}}
                self.core.patch_node(name, beat)
                self.beats += 1

    def __enter__(self) -> Heartbeats:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def test_watch_410_gone_under_load_relists_without_double_booking(compacting: Parts) -> None:
    """4 nodes x 8 GPUs, node heartbeats throughout; three waves of five 8-GPU gangs (one
    more than fits). Between waves the pod watch resumes from a compacted resourceVersion."""
    parts, core = compacting, compacting.core
    ns = make_namespace(core, "gone")
    nodes = node_names("gone", 4)
    for name in nodes:
        create_gpu_node(core, name, gpus=8, labels={"e2e": "gone"})
    wait_nodes(parts.muster, nodes)
    source = parts.services.source
    assert source is not None
    with ResilientWatch(core, ns) as seen, Heartbeats(core, nodes) as beats:
        for wave in range(3):
            jobs = [f"w{wave}-{k}" for k in range(5)]
            relists = source.relists
            for job in jobs:
                create_gang(core, ns, job, "gone")

            def settled(jobs: list[str] = jobs) -> bool:
                whole = [j for j in jobs if bound(seen, j) == GANG]
                return len(whole) == 4 and not partial(seen, jobs)

            wait_for(settled, 120, f"wave {wave}: four gangs whole")
            # Pods fall quiet while the nodes keep beating: the pod watch's next resume
            # finds its resourceVersion compacted away.
            wait_for(lambda n=relists: source.relists > n, 60, f"wave {wave}: a 410 relist")
            assert [j for j in jobs if bound(seen, j) == 0] != [], jobs
            wait_books_agree(parts, ns, nodes)
            assert not partial(seen, jobs), partial(seen, jobs)
            for job in jobs:
                for i in range(GANG):
                    delete_now(core, ns, f"{job}-{i}")
            wait_for(lambda jobs=jobs: not any(bound(seen, j) for j in jobs), 60, "wave gone")
        stats = source.stats()
        print(f"\n410 under load: {stats['relists']} relists, {beats.beats} node heartbeats, "
              f"{stats['pod_events']} pod events")  # fmt: skip
    assert max(seen.max_gpus[n] for n in nodes) <= 8, seen.max_gpus
    assert source.last_error is None, source.stats()


class RefusingWebhook:
    """A validating admission webhook (HTTPS on loopback, the control plane's serving
    certificate) that the API server calls for every ``pods/binding`` CREATE in namespaces
    labelled ``e2e-refuse=yes``; it denies them while ``refusing`` is set."""

    def __init__(self, cp: ControlPlane, only: set[str] | None = None) -> None:
        assert cp.dir is not None
        self.refusing = True
        #: refuse only these pods' binds (None: every pod's)
        self.only = only
        self.refused: list[str] = []
        self.allowed: list[str] = []
        self.dry_runs = 0
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                request = review["request"]
                hook.dry_runs += bool(request.get("dryRun"))
                refuse = hook.refusing and (hook.only is None or request["name"] in hook.only)
                (hook.refused if refuse else hook.allowed).append(request["name"])
                response: dict[str, Any] = {"uid": request["uid"], "allowed": not refuse}
                if refuse:
                    response["status"] = {"code": 403, "message": "binds refused (e2e window)"}
                body = json.dumps({"apiVersion": "admission.k8s.io/v1",
                                   "kind": "AdmissionReview", "response": response}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer((LOOPBACK, 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cp.dir / "server.crt", cp.dir / "server.key")
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.url = f"https://{LOOPBACK}:{self._server.server_address[1]}/validate"
        self.ca_bundle = base64.b64encode(cp.ca_file.read_bytes()).decode()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> RefusingWebhook:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


HOOK_SEEN = "e2e-refuse-binds/refuse-binds.e2e.muster.io"


def muster_sees(muster: httpx.Client, seen: bool) -> None:
    """Wait until Muster's ``/debug/binds`` lists the test's webhook (``seen``) or not."""
    wait_for(lambda: (HOOK_SEEN in muster.get("/debug/binds").json()["seeBindings"]) is seen,
             30, f"Muster to see the webhook {'added' if seen else 'removed'}")  # fmt: skip


@contextmanager
def registered(
    core: kubernetes.client.CoreV1Api, hook: RefusingWebhook, muster: httpx.Client
) -> Iterator[None]:
    """The hook as a ValidatingWebhookConfiguration on ``pods/binding`` CREATE in namespaces
    labelled ``e2e-refuse=yes``, for the duration of the block (entered once Muster's watch
    has seen it, left once it has seen it go)."""
    admission = kubernetes.client.AdmissionregistrationV1Api(core.api_client)
    admission.create_validating_webhook_configuration({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "e2e-refuse-binds"},
        "webhooks": [{
            "name": "refuse-binds.e2e.muster.io",
            "clientConfig": {"url": hook.url, "caBundle": hook.ca_bundle},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["pods/binding"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {"e2e-refuse": "yes"}},
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
        }],
    })  # fmt: skip
    try:
        muster_sees(muster, True)
        yield
    finally:
        admission.delete_validating_webhook_configuration("e2e-refuse-binds")
        muster_sees(muster, False)


def test_binds_refused_for_a_while_no_gang_is_partly_bound(parts: Parts) -> None:
    """2 nodes x 8 GPUs, two 8-pod gangs; the API server refuses every bind until the window
    closes: no member is bound meanwhile, then both gangs start whole."""
    core, cp = parts.core, parts.cp
    ns = "refuse"
    core.create_namespace({"metadata": {"name": ns, "labels": {"e2e-refuse": "yes"}}})
    nodes = node_names("refuse", 2)
    for name in nodes:
        create_gpu_node(core, name, gpus=8, labels={"e2e": "refuse"})
    wait_nodes(parts.muster, nodes)
    with (
        RefusingWebhook(cp) as hook,
        ResilientWatch(core, ns) as seen,
        registered(core, hook, parts.muster),
    ):
        jobs = ["a", "b"]
        for job in jobs:
            create_gang(core, ns, job, "refuse")
        # Both gangs are planned and reach bind several times; every Binding is refused.
        wait_for(lambda: len(set(hook.refused)) >= 2 * GANG, 90, "binds of both gangs refused")
        assert not seen.placements, seen.placements  # nothing bound, not even part of a gang
        hook.refusing = False
        wait_for(lambda: all(bound(seen, j) == GANG for j in jobs), 120, "both gangs to start")
        wait_books_agree(parts, ns, nodes)
    journal = parts.muster.get("/debug/events").json()
    print(f"\nbinds refused: {len(hook.refused)} refused, {len(hook.allowed)} allowed; "
          f"journal kinds {sorted({e.get('kind') for e in journal.get('events', [])})}")
    assert max(seen.max_gpus[n] for n in nodes) <= 8, seen.max_gpus
    assert max(seen.max_group_gpus.values() or [0]) <= 16


def test_a_bind_refused_for_one_member_binds_no_member(parts: Parts) -> None:
    """The webhook refuses one member's bind only (dry run or not): Muster asks the API server
    about every member first, so no member is bound while the refusal lasts — none is bound
    and then deleted — and the gang starts whole once the refusal ends."""
    core, cp = parts.core, parts.cp
    ns = "refuse-one"
    core.create_namespace({"metadata": {"name": ns, "labels": {"e2e-refuse": "yes"}}})
    create_gpu_node(core, "refuse-one-0", gpus=8, labels={"e2e": "refuse-one"})
    wait_nodes(parts.muster, ["refuse-one-0"])
    with (
        RefusingWebhook(cp, only={"c-3"}) as hook,
        ResilientWatch(core, ns) as seen,
        registered(core, hook, parts.muster),
    ):
        create_gang(core, ns, "c", "refuse-one")
        wait_for(lambda: "c-3" in hook.refused, 90, "c-3's bind refused")
        wait_for(lambda: hook.dry_runs >= GANG, 30, "every member asked about in a dry run")
        assert not seen.placements, seen.placements
        hook.refusing = False
        flipped = time.monotonic()
        wait_for(lambda: bound(seen, "c") == GANG, 180, "the gang to start whole")
        took = time.monotonic() - flipped
        wait_books_agree(parts, ns, ["refuse-one-0"])
    assert not set(seen.placements) - {f"c-{i}" for i in range(GANG)}
    print(f"\none member refused: {hook.refused.count('c-3')} refusals, {hook.dry_runs} dry runs;"
          f" gang bound {took:.1f}s after the refusal ended")  # fmt: skip


def dry_run_binds(cp: ControlPlane) -> int:
    """How many dry-run Bindings (``pods/binding``, ``dryRun=All``) the API server has served,
    from its own ``apiserver_request_total``."""
    api = cp.api_client()
    try:
        headers = {v["key"]: v["value"] for v in api.configuration.auth_settings().values()}
        response = api.call_api("GET", api.configuration.host + "/metrics", header_params=headers)
        text = response.read().decode()
    finally:
        api.close()
    return int(sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "apiserver_request_total"
        and sample.labels.get("subresource") == "binding"
        and sample.labels.get("dry_run") == "All"
    ))  # fmt: skip


def test_gangs_bind_after_dry_runs_only_where_admission_sees_bindings(parts: Parts) -> None:
    """No webhook on Bindings: a gang binds with no dry run at all (the API server's own
    count). A webhook on ``pods/binding`` registered (it allows every bind): Muster's watch
    sees it, and the next gang's 8 members are each asked about in a dry run first."""
    core, cp = parts.core, parts.cp
    ns = "dry-runs"
    core.create_namespace({"metadata": {"name": ns}})
    nodes = node_names("dry-runs", 2)
    for name in nodes:
        create_gpu_node(core, name, gpus=8, labels={"e2e": "dry-runs"})
    wait_nodes(parts.muster, nodes)
    wait_for(lambda: parts.muster.get("/debug/binds").json() == {
        "mode": "auto", "known": True, "seeBindings": [], "dryRun": False,
    }, 30, "Muster to know no admission sees Bindings")  # fmt: skip
    with ResilientWatch(core, ns) as seen:
        before = dry_run_binds(cp)
        create_gang(core, ns, "plain", "dry-runs")
        wait_for(lambda: bound(seen, "plain") == GANG, 90, "the first gang to start")
        without = dry_run_binds(cp) - before
        with RefusingWebhook(cp) as hook, registered(core, hook, parts.muster):
            hook.refusing = False
            assert parts.muster.get("/debug/binds").json()["dryRun"] is True
            before = dry_run_binds(cp)
            create_gang(core, ns, "checked", "dry-runs")
            wait_for(lambda: bound(seen, "checked") == GANG, 90, "the second gang to start")
            checked = dry_run_binds(cp) - before
        wait_books_agree(parts, ns, nodes)
    print(f"\ndry-run Bindings: {without} without a webhook on Bindings, {checked} with one")
    assert without == 0
    assert checked >= GANG  # every member once (again if kube-scheduler retried the gang)
