"""``app.k8s``: the list+watch sync and the gateway, against fakes and a real kube-apiserver.

The fake-API tests drive ``ClusterSync`` through scripted LIST/WATCH answers (410 Gone in both
forms, transient failures, malformed objects). The e2e tests run etcd + kube-apiserver 1.20
(``tests/e2e/controlplane.py``) without kube-scheduler, so pods stay unbound until a test binds
them.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import kubernetes.client
import pytest
from kubernetes.client import ApiClient, Configuration, CoreV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

import app.k8s.gateway
from app.core.model.errors import GatewayError, MusterError
from app.core.model.values import Resources
from app.core.state.cache import ClusterCache
from app.k8s.config import kube_access_available, load_api_client
from app.k8s.gateway import KubeGateway, gateway_error
from app.k8s.sync import ClusterSync

# tests/ has no __init__.py files; make the shared control-plane helper importable from here.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
from controlplane import ControlPlane, create_gpu_node, free_ports  # noqa: E402

NS = "default"
DEADLINE = 15.0
GPU_MILLI = 1000


def eventually(check: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
    """Poll ``check`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def muster_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("muster-sync-")]


# ---------------------------------------------------------------------------------------------
# A scripted fake of the two CoreV1Api list functions ClusterSync uses.


def pod_json(name: str, *, uid: str | None = None, rv: str = "1", gpu: str = "1") -> dict:
    return {
        "metadata": {"name": name, "namespace": NS, "uid": uid or name, "resourceVersion": rv},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": gpu}}}]},
        "status": {"phase": "Pending"},
    }


def node_json(name: str, rv: str = "1", gpus: str = "8") -> dict:
    return {
        "metadata": {"name": name, "resourceVersion": rv},
        "status": {"allocatable": {"nvidia.com/gpu": gpus, "cpu": "32", "pods": "110"}},
    }


def event_line(kind: str, obj: dict) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


GONE_EVENT = event_line(
    "ERROR",
    {"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410,
     "message": "too old resource version: 10 (15)"},
)  # fmt: skip


class FakeListResponse:
    def __init__(self, body: dict) -> None:
        self.data = json.dumps(body).encode()

    def release_conn(self) -> None:
        pass


class FakeWatchResponse:
    """A watch stream: the scripted lines, then (when ``idle``) silence until closed."""

    connection = None

    def __init__(self, lines: list[bytes], closed: threading.Event, idle: bool) -> None:
        self._lines = lines
        self._closed = closed
        self._idle = idle

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        yield from self._lines
        if self._idle:
            # Like a real watch that ends at timeout_seconds: stay open a little, then end.
            self._closed.wait(0.05)

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class FakeResource:
    """Scripted answers for one list function. Each script item is a LIST body, a list of watch
    lines, or an exception to raise. Once the script is used up, LISTs repeat the last body
    and watches are idle."""

    def __init__(self, script: list[Any], closed: threading.Event) -> None:
        self._script: queue.Queue[Any] = queue.Queue()
        for item in script:
            self._script.put(item)
        self._closed = closed
        self._last_list: dict = {"metadata": {"resourceVersion": "1"}, "items": []}
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        watch = bool(kwargs.get("watch"))
        try:
            item = self._script.get_nowait()
        except queue.Empty:
            item = [] if watch else self._last_list
        if isinstance(item, BaseException):
            raise item
        if watch:
            assert isinstance(item, list), f"script expected a LIST, got a WATCH {kwargs}"
            return FakeWatchResponse(item, self._closed, idle=self._script.empty())
        assert isinstance(item, dict), f"script expected a WATCH, got a LIST {kwargs}"
        self._last_list = item
        return FakeListResponse(item)

    def watch_versions(self) -> list[str]:
        return [c["resource_version"] for c in self.calls if c.get("watch")]

    def list_count(self) -> int:
        return sum(1 for c in self.calls if not c.get("watch"))


class FakeCore:
    """Stands in for ``CoreV1Api`` (``list_node``, ``list_pod_for_all_namespaces``)."""

    def __init__(self, nodes: list[Any], pods: list[Any]) -> None:
        self.closed = threading.Event()
        self.list_node = FakeResource(nodes, self.closed)
        self.list_pod_for_all_namespaces = FakeResource(pods, self.closed)


def listing(rv: str, *items: dict) -> dict:
    return {"metadata": {"resourceVersion": rv}, "items": list(items)}


@pytest.fixture
def run_fake() -> Iterator[Callable[[FakeCore], tuple[ClusterCache, ClusterSync]]]:
    started: list[tuple[ClusterSync, FakeCore]] = []

    def run(
        core: FakeCore, on_synced: Callable[[], None] | None = None
    ) -> tuple[ClusterCache, ClusterSync]:
        cache = ClusterCache()
        sync = ClusterSync(cache, cast(CoreV1Api, core), resync_backoff=0.01, on_synced=on_synced)
        started.append((sync, core))
        sync.start()
        return cache, sync

    yield run
    for sync, core in started:
        core.closed.set()
        sync.stop(timeout=5)
    assert not muster_threads()


def test_fake_watch_error_410_relists(run_fake: Callable[..., Any]) -> None:
    synced: list[int] = []
    core = FakeCore(
        nodes=[listing("5", node_json("n1"))],
        pods=[
            listing("10", pod_json("a"), pod_json("b")),
            [event_line("ADDED", pod_json("c", rv="11")), GONE_EVENT],
            # While the watch was gone, b was deleted: only the relist can tell.
            listing("20", pod_json("a"), pod_json("c")),
        ],
    )
    cache, sync = run_fake(core, lambda: synced.append(1))
    assert sync.wait_synced(5)
    pods = core.list_pod_for_all_namespaces
    eventually(lambda: pods.list_count() == 2 and len(pods.watch_versions()) >= 2, "the relist")
    assert synced == [1]  # once, when the first lists are in; not again on the relist
    assert pods.watch_versions()[:2] == ["10", "20"]
    eventually(lambda: set(cache.snapshot().pods) == {"a", "c"}, "b gone after the relist")
    assert sync.relists == 1
    assert sync.pod_events == 1


def test_fake_http_410_on_watch_relists(run_fake: Callable[..., Any]) -> None:
    core = FakeCore(
        nodes=[listing("5", node_json("n1"))],
        pods=[
            listing("10", pod_json("a")),
            ApiException(status=410, reason="Gone"),
            listing("12", pod_json("b")),
        ],
    )
    cache, sync = run_fake(core)
    eventually(lambda: set(cache.snapshot().pods) == {"b"}, "the relist after HTTP 410")
    assert sync.relists == 1
    pods = core.list_pod_for_all_namespaces
    eventually(lambda: len(pods.watch_versions()) >= 2, "the watch after the relist")
    assert pods.watch_versions()[:2] == ["10", "12"]


def test_fake_watch_resumes_from_last_event_and_bookmark(run_fake: Callable[..., Any]) -> None:
    bookmark = {"kind": "Pod", "metadata": {"resourceVersion": "17"}}
    core = FakeCore(
        nodes=[listing("5", node_json("n1")), [event_line("MODIFIED", node_json("n1", "6", "4"))]],
        pods=[
            listing("10", pod_json("a")),
            [event_line("DELETED", pod_json("a", rv="12"))],
            [event_line("BOOKMARK", bookmark)],
            [event_line("ADDED", pod_json("d", rv="18"))],
        ],
    )
    cache, sync = run_fake(core)
    pods = core.list_pod_for_all_namespaces
    eventually(lambda: len(pods.watch_versions()) >= 4, "four watches")
    assert pods.watch_versions()[:4] == ["10", "12", "17", "18"]
    assert pods.list_count() == 1
    assert set(cache.snapshot().pods) == {"d"}
    assert cache.view().free_of("n1").gpu == 4 * GPU_MILLI
    assert core.list_node.watch_versions()[:2] == ["5", "6"]
    assert sync.relists == 0
    assert (sync.pod_events, sync.node_events) == (2, 1)
    first_watch = next(c for c in pods.calls if c.get("watch"))
    assert first_watch["allow_watch_bookmarks"] is True
    assert 0 < first_watch["timeout_seconds"] <= 10


def test_fake_transient_errors_back_off_and_recover(
    run_fake: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="muster.k8s.sync")
    core = FakeCore(
        nodes=[ApiException(status=503, reason="Service Unavailable"), listing("5")],
        pods=[
            ConnectionRefusedError("connection refused"),
            listing("10", pod_json("a")),
            ApiException(status=500, reason="Internal Server Error"),  # the watch fails once
            [event_line("ADDED", pod_json("b", rv="11"))],
        ],
    )
    cache, sync = run_fake(core)
    assert sync.wait_synced(5)
    eventually(lambda: cache.pod("b") is not None, "the event after the watch error")
    pods = core.list_pod_for_all_namespaces
    assert pods.list_count() == 2  # the refused one and the good one; the failed watch resumes
    assert pods.watch_versions()[:2] == ["10", "10"]
    messages = [r.getMessage() for r in caplog.records]
    assert any("503" in m for m in messages)
    assert any("connection refused" in m for m in messages)
    assert any("500" in m for m in messages)
    assert sync.last_error is None


def test_fake_malformed_objects_are_skipped(
    run_fake: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="muster.k8s.sync")
    core = FakeCore(
        nodes=[listing("5", node_json("n1"), node_json("bad-node", gpus="lots"))],
        pods=[
            listing("10", pod_json("a"), pod_json("bad-list", gpu="x")),
            [
                event_line("ADDED", pod_json("bad-watch", rv="11", gpu="?")),
                event_line("ADDED", pod_json("b", rv="12")),
            ],
        ],
    )
    cache, sync = run_fake(core)
    eventually(lambda: cache.pod("b") is not None, "the event after a malformed one")
    assert set(cache.snapshot().pods) == {"a", "b"}
    assert [n.name for n in cache.view().nodes] == ["n1"]
    assert sync.skipped == 3
    text = caplog.text
    assert "bad-node" in text and "default/bad-list" in text and "default/bad-watch" in text


def test_unreachable_api_is_retried_and_stop_is_prompt() -> None:
    configuration = Configuration()
    configuration.host = f"https://127.0.0.1:{free_ports(1)[0]}"  # nothing listens there
    cache = ClusterCache()
    with ApiClient(configuration) as api:
        # A long backoff: stop() must interrupt the wait, not sit it out.
        sync = ClusterSync(cache, api, resync_backoff=10)
        sync.start()
        try:
            assert not sync.wait_synced(0.5)
            eventually(lambda: sync.last_error, "a recorded error")
            assert "nodes" in sync.last_error or "pods" in sync.last_error
            assert not cache.synced
        finally:
            started = time.monotonic()
            sync.stop(timeout=5)
    assert time.monotonic() - started < 2
    assert not muster_threads()


# ---------------------------------------------------------------------------------------------
# Gateway and config without a server.


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (409, "Conflict"),
        (404, "NotFound"),
        (403, "Forbidden"),
        (422, "Invalid"),
        (429, "TooManyRequests"),
        (500, "Unavailable"),
        (503, "Unavailable"),
    ],
)
def test_gateway_error_mapping(status: int, reason: str) -> None:
    body = json.dumps({"kind": "Status", "code": status, "message": f"the message {status}"})
    error = gateway_error(ApiException(status=status, reason="X", body=body), "bind")
    assert (error.reason, error.message) == (reason, f"the message {status}")


def test_gateway_error_without_status_body() -> None:
    error = gateway_error(ApiException(status=502, reason="Bad Gateway"), "bind")
    assert (error.reason, error.message) == ("Unavailable", "502 Bad Gateway")


def test_gateway_unreachable_api_is_unavailable() -> None:
    configuration = Configuration()
    configuration.host = f"https://127.0.0.1:{free_ports(1)[0]}"  # nothing listens there
    with ApiClient(configuration) as api, pytest.raises(GatewayError) as caught:
        KubeGateway(api).bind(NS, "p", "uid", "n1")
    assert caught.value.reason == "Unavailable"


def test_gateway_calls_time_out() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        configuration = Configuration()
        configuration.host = f"http://127.0.0.1:{silent.getsockname()[1]}"
        with ApiClient(configuration) as api:
            gateway = KubeGateway(api, timeout=(0.5, 0.5))
            started = time.monotonic()
            with pytest.raises(GatewayError) as caught:
                gateway.annotate_pod(NS, "p", {"a": "b"})
            elapsed = time.monotonic() - started
    assert caught.value.reason == "Unavailable"
    assert elapsed < 3, elapsed


def test_kube_access_available(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    assert not kube_access_available(None)
    assert kube_access_available(str(tmp_path / "typo"))  # explicit: fail loudly later
    config = tmp_path / "config"
    config.write_text("apiVersion: v1\nkind: Config\n")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}{os.pathsep}{config}")
    assert kube_access_available(None)
    monkeypatch.delenv("KUBECONFIG")
    assert not kube_access_available(None)
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("apiVersion: v1\n")
    assert kube_access_available(None)
    monkeypatch.setenv("HOME", str(tmp_path / "nowhere"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert kube_access_available(None)


def test_load_api_client_errors_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    with pytest.raises(MusterError, match="missing.yaml"):
        load_api_client(str(missing))
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: v1\nkind: Config\ncurrent-context: nope\n")
    with pytest.raises(MusterError, match="broken.yaml"):
        load_api_client(str(broken))


def test_load_api_client_in_cluster_without_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(MusterError, match="in-cluster"):
        load_api_client()


# ---------------------------------------------------------------------------------------------
# Against a real kube-apiserver 1.20.

skip_e2e = pytest.mark.skipif(os.environ.get("MUSTER_SKIP_E2E") == "1", reason="MUSTER_SKIP_E2E=1")


def e2e(test: Callable[..., None]) -> Callable[..., None]:
    """Mark ``test`` as needing the real control plane (skipped when MUSTER_SKIP_E2E=1)."""
    return pytest.mark.e2e(skip_e2e(test))


GROUP = "e2e.muster.io"


@pytest.fixture(scope="module")
def control_plane() -> Iterator[ControlPlane]:
    with ControlPlane() as cp:
        yield cp


@pytest.fixture(scope="module")
def api(control_plane: ControlPlane) -> Iterator[ApiClient]:
    default_host = Configuration.get_default_copy().host
    with load_api_client(str(control_plane.kubeconfig)) as client:
        yield client
    assert Configuration.get_default_copy().host == default_host  # the global stays untouched


@pytest.fixture(scope="module")
def core_v1(api: ApiClient) -> CoreV1Api:
    return CoreV1Api(api)


@pytest.fixture(scope="module")
def gpu_node(core_v1: CoreV1Api) -> str:
    create_gpu_node(core_v1, "gw-node", gpus=8)
    return "gw-node"


@pytest.fixture
def synced(api: ApiClient) -> Iterator[tuple[ClusterCache, ClusterSync]]:
    cache = ClusterCache()
    sync = ClusterSync(cache, api, resync_backoff=0.1)
    sync.start()
    try:
        assert sync.wait_synced(DEADLINE), f"not synced: {sync.stats()}"
        yield cache, sync
    finally:
        sync.stop(timeout=5)
    assert not muster_threads()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def pod_body(name: str, gpus: int = 1, labels: dict[str, str] | None = None) -> dict:
    requests = {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"requests": requests, "limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ]
        },
    }


def create_pod(core_v1: CoreV1Api, name: str, **kwargs: Any) -> str:
    """Create a pod in ``NS``; return its uid."""
    return core_v1.create_namespaced_pod(NS, pod_body(name, **kwargs)).metadata.uid


def delete_now(core_v1: CoreV1Api, name: str) -> None:
    try:
        core_v1.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    except ApiException as exc:
        if exc.status != 404:
            raise


def pod_gone(core_v1: CoreV1Api, name: str) -> bool:
    try:
        core_v1.read_namespaced_pod(name, NS)
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


@e2e
def test_sync_follows_nodes_and_pods(
    core_v1: CoreV1Api, api: ApiClient, synced: tuple[ClusterCache, ClusterSync]
) -> None:
    cache, sync = synced
    assert cache.synced and sync.synced and sync.last_error is None
    node = unique("sync-node")
    create_gpu_node(core_v1, node, gpus=8, cpu="32", memory="256Gi")
    eventually(
        lambda: (
            (n := cache.view().node(node)) is not None
            and n.allocatable == Resources(8 * GPU_MILLI, 32_000, 256 * 2**30 * 1000, 110_000)
        ),
        "the node with its allocatable",
    )

    name = unique("sync-pod")
    uid = create_pod(core_v1, name, gpus=2)
    try:
        pod = eventually(lambda: cache.pod(uid), "the pod in the cache")
        assert pod.requests == Resources(2 * GPU_MILLI, 500, 2**30 * 1000, 1000)
        assert (pod.namespace, pod.name, pod.node_name) == (NS, name, "")

        KubeGateway(api).bind(NS, name, uid, node)
        eventually(lambda: cache.pod(uid).node_name == node, "the binding seen by the watch")
        assert cache.view().used_of(node).gpu == 2 * GPU_MILLI

        core_v1.patch_node(node, {"metadata": {"labels": {"muster.io/pool": "a100"}}})
        eventually(
            lambda: cache.view().node(node).labels.get("muster.io/pool") == "a100",
            "the node label change",
        )
    finally:
        delete_now(core_v1, name)
    eventually(lambda: cache.pod(uid) is None, "the deleted pod to leave the cache")
    assert cache.view().used_of(node).gpu == 0
    core_v1.delete_node(node)
    eventually(lambda: cache.view().node(node) is None, "the deleted node to leave the cache")
    assert sync.node_events >= 3 and sync.pod_events >= 3
    assert (sync.relists, sync.skipped, sync.last_error) == (0, 0, None)


class PodsFromCustomResources:
    """A ``CoreV1Api`` stand-in backed by the real server: nodes are real nodes, "pods" are
    ``FakePod`` custom resources, and the first pod watch resumes from resourceVersion 1, as a
    sync that had been disconnected for a long time would.

    Why custom resources: this apiserver started on an empty etcd, so its pod watch cache
    begins at resourceVersion ~1 and no resourceVersion is "too old" for pods. A custom
    resource's watch cache is created when first used, at the then-current resourceVersion,
    so resuming from 1 earns a genuine "410 Expired" ERROR event from the server — the same
    thing that happens to every client after a real apiserver restart.
    """

    def __init__(self, api: ApiClient) -> None:
        self.list_node = CoreV1Api(api).list_node
        self._custom = kubernetes.client.CustomObjectsApi(api)
        self.watches: list[str] = []

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> Any:
        if kwargs.get("watch"):
            if not self.watches:
                kwargs["resource_version"] = "1"
            self.watches.append(kwargs["resource_version"])
        return self._custom.list_cluster_custom_object(GROUP, "v1", "fakepods", **kwargs)


@pytest.fixture(scope="module")
def fakepod_crd(api: ApiClient) -> str:
    extensions = kubernetes.client.ApiextensionsV1Api(api)
    name = f"fakepods.{GROUP}"
    schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    extensions.create_custom_resource_definition(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {
                "group": GROUP,
                "scope": "Namespaced",
                "names": {"plural": "fakepods", "singular": "fakepod", "kind": "FakePod"},
                "versions": [
                    {"name": "v1", "served": True, "storage": True,
                     "schema": {"openAPIV3Schema": schema}},
                ],
            },
        }
    )  # fmt: skip

    def established() -> bool:
        conditions = extensions.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    eventually(established, "the FakePod CRD to be established")
    return name


def create_fakepod(api: ApiClient, name: str) -> str:
    body = {"apiVersion": f"{GROUP}/v1", "kind": "FakePod", **pod_body(name)}
    created = kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, "v1", NS, "fakepods", body
    )
    return created["metadata"]["uid"]


@e2e
def test_sync_relists_after_410_from_the_server(api: ApiClient, fakepod_crd: str) -> None:
    before = create_fakepod(api, unique("before"))
    core = PodsFromCustomResources(api)
    # Precondition: the server really finds resourceVersion 1 too old for this resource.
    raw = core.list_pod_for_all_namespaces(
        watch=True, resource_version="1", timeout_seconds=2, _preload_content=False
    )
    try:
        first = json.loads(next(iter_resp_lines(raw)))
    finally:
        raw.close()
        raw.release_conn()
    assert first["type"] == "ERROR" and first["object"]["code"] == 410, first
    core.watches.clear()

    cache = ClusterCache()
    sync = ClusterSync(cache, cast(CoreV1Api, core), resync_backoff=0.1)
    sync.start()
    try:
        assert sync.wait_synced(DEADLINE)
        eventually(lambda: sync.relists == 1, "the relist after 410")
        eventually(lambda: len(core.watches) >= 2, "the watch after the relist")
        assert core.watches[0] == "1" and int(core.watches[1]) > 1
        assert sync.pod_events == 0  # the expired watch delivered nothing
        assert cache.pod(before) is not None
        after = create_fakepod(api, unique("after"))
        eventually(lambda: cache.pod(after) is not None, "an object created after the relist")
        assert sync.pod_events == 1 and sync.relists == 1 and sync.last_error is None
    finally:
        sync.stop(timeout=5)
    assert not muster_threads()


@e2e
def test_stop_is_prompt_and_leaves_no_thread(api: ApiClient) -> None:
    threads_before = set(threading.enumerate())
    cache = ClusterCache()
    # A 60 s server-side watch: only stop()'s socket shutdown can end the loops quickly.
    sync = ClusterSync(cache, api, watch_timeout=60)
    sync.start()
    assert len(muster_threads()) == 2
    assert sync.wait_synced(DEADLINE)
    eventually(lambda: sync.watching, "both watches to be open")
    started = time.monotonic()
    sync.stop(timeout=5)
    elapsed = time.monotonic() - started
    assert set(threading.enumerate()) == threads_before, threading.enumerate()
    assert elapsed < 2, f"stop() took {elapsed:.1f}s"


@e2e
def test_gateway_bind(core_v1: CoreV1Api, api: ApiClient, gpu_node: str) -> None:
    gateway = KubeGateway(api)
    name = unique("bind")
    uid = create_pod(core_v1, name)
    try:
        gateway.bind(NS, name, uid, gpu_node)
        assert core_v1.read_namespaced_pod(name, NS).spec.node_name == gpu_node
        with pytest.raises(GatewayError) as twice:
            gateway.bind(NS, name, uid, gpu_node)
        assert twice.value.reason == "Conflict"
        assert "already assigned" in twice.value.message
    finally:
        delete_now(core_v1, name)
    with pytest.raises(GatewayError) as missing:
        gateway.bind(NS, name, uid, gpu_node)
    assert missing.value.reason == "NotFound"
    assert name in missing.value.message


@e2e
def test_gateway_annotate_pod(core_v1: CoreV1Api, api: ApiClient) -> None:
    gateway = KubeGateway(api)
    name = unique("annotate")
    create_pod(core_v1, name)
    try:
        gateway.annotate_pod(NS, name, {"muster.io/retry": "1", "muster.io/plan": "n1"})
        annotations = core_v1.read_namespaced_pod(name, NS).metadata.annotations
        assert annotations == {"muster.io/retry": "1", "muster.io/plan": "n1"}
        gateway.annotate_pod(NS, name, {"muster.io/retry": None, "muster.io/plan": "n2"})
        annotations = core_v1.read_namespaced_pod(name, NS).metadata.annotations
        assert annotations == {"muster.io/plan": "n2"}
    finally:
        delete_now(core_v1, name)
    with pytest.raises(GatewayError) as missing:
        gateway.annotate_pod(NS, name, {"a": "b"})
    assert missing.value.reason == "NotFound"


class WholeSecond(datetime):
    """A clock that always reads a whole second (the client would drop the zero fraction)."""

    @classmethod
    def now(cls, tz: Any = None) -> WholeSecond:
        return cls(2024, 5, 1, 12, 0, 0, tzinfo=tz)


@e2e
def test_gateway_event(core_v1: CoreV1Api, api: ApiClient, monkeypatch: pytest.MonkeyPatch) -> None:
    gateway = KubeGateway(api, instance="muster-test-0")
    name = unique("event")
    uid = create_pod(core_v1, name)
    try:
        gateway.event(NS, name, uid, "MusterPlanned", "gang team-a/llama placed on n1")
        gateway.event(NS, name, uid, "MusterWaiting", "x" * 3000, kind="Warning")
        with monkeypatch.context() as patched:
            patched.setattr(app.k8s.gateway, "datetime", WholeSecond)
            gateway.event(NS, name, uid, "MusterWholeSecond", "eventTime needs a fraction")
        events = core_v1.list_namespaced_event(
            NS, field_selector=f"involvedObject.name={name}"
        ).items
    finally:
        delete_now(core_v1, name)
    by_reason = {e.reason: e for e in events}
    assert set(by_reason) == {"MusterPlanned", "MusterWaiting", "MusterWholeSecond"}
    planned = by_reason["MusterPlanned"]
    assert (planned.type, planned.message) == ("Normal", "gang team-a/llama placed on n1")
    assert (planned.involved_object.kind, planned.involved_object.uid) == ("Pod", uid)
    assert planned.source.component == "muster"
    assert (planned.reporting_component, planned.reporting_instance) == ("muster", "muster-test-0")
    assert planned.event_time is not None and planned.first_timestamp is not None
    assert planned.last_timestamp is not None and planned.count == 1
    waiting = by_reason["MusterWaiting"]
    assert waiting.type == "Warning" and waiting.message == "x" * 1024


def run_pod(core_v1: CoreV1Api, name: str, labels: dict[str, str] | None = None) -> str:
    """A pod in phase Running (no kubelet here: the status is set through the API)."""
    uid = create_pod(core_v1, name, labels=labels)
    core_v1.patch_namespaced_pod_status(name, NS, {"status": {"phase": "Running"}})
    return uid


@e2e
def test_gateway_evict(
    core_v1: CoreV1Api, api: ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="muster.k8s.gateway")
    gateway = KubeGateway(api)
    name = unique("evict")
    uid = run_pod(core_v1, name)
    try:
        with pytest.raises(GatewayError) as wrong_uid:
            gateway.evict(NS, name, "not-the-uid")
        assert wrong_uid.value.reason == "Conflict"
        assert "policy/v1beta1" in caplog.text  # 1.20 has no policy/v1 Eviction: fallback
        gateway.evict(NS, name, uid)
        eventually(lambda: pod_gone(core_v1, name), "the evicted pod to go")
    finally:
        delete_now(core_v1, name)
    with pytest.raises(GatewayError) as missing:
        gateway.evict(NS, name, uid)
    assert missing.value.reason == "NotFound"


@e2e
def test_gateway_evict_blocked_by_disruption_budget(core_v1: CoreV1Api, api: ApiClient) -> None:
    gateway = KubeGateway(api)
    name, app = unique("guarded"), unique("app")
    run_pod(core_v1, name, labels={"app": app})
    policy = kubernetes.client.CustomObjectsApi(api)
    pdb = {
        "apiVersion": "policy/v1beta1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
    }
    policy.create_namespaced_custom_object("policy", "v1beta1", NS, "poddisruptionbudgets", pdb)
    try:
        with pytest.raises(GatewayError) as blocked:
            gateway.evict(NS, name, "")
        assert blocked.value.reason == "TooManyRequests"
        assert "disruption budget" in blocked.value.message
        assert not pod_gone(core_v1, name)
    finally:
        policy.delete_namespaced_custom_object("policy", "v1beta1", NS, "poddisruptionbudgets", app)
        delete_now(core_v1, name)


@e2e
def test_many_requests_at_once_keep_their_connections(
    core_v1: CoreV1Api, caplog: pytest.LogCaptureFixture
) -> None:
    """Muster's threads (watches, nudge workers, a gang's parallel binds) call the API server
    at once: 24 concurrent requests through ``load_api_client``'s client drop no connection
    (the client's default pool is 5 per CPU)."""
    start = threading.Barrier(24)

    def read() -> None:
        start.wait()
        core_v1.read_namespace("default", _preload_content=False).release_conn()

    with caplog.at_level(logging.WARNING, "urllib3.connectionpool"):
        for _ in range(2):
            threads = [threading.Thread(target=read) for _ in range(24)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    assert "Connection pool is full" not in caplog.text
