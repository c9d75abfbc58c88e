"""`muster probe-node`: nvidia-smi output in, the GPU topology annotation out and onto the Node."""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

import app.k8s.config
import app.k8s.nodes
from app.cli import main
from app.core.gpu.links import GpuTopology, parse_topology
from app.core.model.errors import MusterError
from app.core.model.labels import GPU_TOPOLOGY
from app.k8s.nodes import patch_node_annotation

SAMPLES = Path(__file__).resolve().parent / "data" / "nvidia-smi"
A30 = SAMPLES / "a30-pcie-nvlink-pairs.txt"
A30_TOPOLOGY = GpuTopology(4, (0, 0, 1, 1), (frozenset({0, 1}), frozenset({2, 3})), "annotation")


class FakeApiClient:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class FakeCluster:
    """Stands in for ``load_api_client`` and ``patch_node_annotation``."""

    def __init__(self, nodes: set[str]) -> None:
        self.nodes = nodes
        self.clients: list[tuple[str | None, FakeApiClient]] = []
        self.patches: list[tuple[str, str, str]] = []

    def load_api_client(self, kubeconfig: str | None = None) -> FakeApiClient:
        client = FakeApiClient()
        self.clients.append((kubeconfig, client))
        return client

    def patch(self, api: FakeApiClient, node: str, key: str, value: str) -> None:
        assert not api.closed
        if node not in self.nodes:
            raise MusterError(f"node {node!r} not found")
        self.patches.append((node, key, value))


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    fake = FakeCluster({"gpu-1", "from-env", "this-host"})
    monkeypatch.setattr(app.k8s.config, "load_api_client", fake.load_api_client)
    monkeypatch.setattr(app.k8s.nodes, "patch_node_annotation", fake.patch)
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.setattr("socket.gethostname", lambda: "this-host")
    return fake


def test_dry_run_prints_the_annotation(
    capsys: pytest.CaptureFixture[str], cluster: FakeCluster
) -> None:
    assert main(["probe-node", "--from-file", str(A30), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["version"] == 1
    assert parse_topology(out) == A30_TOPOLOGY
    assert out.count("\n") == 1
    assert cluster.clients == [] and cluster.patches == []


def test_reads_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(A30.read_text()))
    assert main(["probe-node", "--from-file", "-", "--dry-run"]) == 0
    assert parse_topology(capsys.readouterr().out) == A30_TOPOLOGY


@pytest.mark.parametrize(
    ("argv", "env", "node"),
    [
        (["--node", "gpu-1"], {"NODE_NAME": "from-env"}, "gpu-1"),
        ([], {"NODE_NAME": "from-env"}, "from-env"),
        ([], {}, "this-host"),
    ],
)
def test_patches_the_node(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    cluster: FakeCluster,
    argv: list[str],
    env: dict[str, str],
    node: str,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(["probe-node", "--from-file", str(A30), "--kubeconfig", "/k/c", *argv]) == 0
    out = capsys.readouterr().out.strip()
    assert cluster.patches == [(node, GPU_TOPOLOGY, out)]
    [(kubeconfig, client)] = cluster.clients
    assert kubeconfig == "/k/c" and client.closed


def fake_nvidia_smi(directory: Path, script: str) -> None:
    path = directory / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_runs_nvidia_smi(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_nvidia_smi(tmp_path, f'[ "$*" = "topo -m" ] || exit 3\ncat "{A30}"\n')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert main(["probe-node", "--dry-run"]) == 0
    assert parse_topology(capsys.readouterr().out) == A30_TOPOLOGY


def broken_nvidia_smi(tmp_path: Path) -> str:
    fake_nvidia_smi(
        tmp_path, "echo 'NVIDIA-SMI has failed because it could not communicate' >&2\nexit 9\n"
    )
    return str(tmp_path)


@pytest.mark.parametrize(
    ("argv", "path", "message"),
    [
        ([], lambda tmp: str(tmp), "nvidia-smi not found"),
        ([], broken_nvidia_smi, "nvidia-smi topo -m failed: NVIDIA-SMI has failed because"),
        (["--from-file", "/no/such/file"], None, "cannot read /no/such/file: No such file"),
        (["--from-file", __file__], None, "cannot parse the output of"),
        (["--from-file", str(SAMPLES / "README.md")], None, "no topology matrix"),
    ],
    ids=[
        "no nvidia-smi",
        "nvidia-smi fails",
        "missing file",
        "not a matrix",
        "not a matrix either",
    ],
)
def test_bad_input_exits_2_with_a_message(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    cluster: FakeCluster,
    argv: list[str],
    path: Any,
    message: str,
) -> None:
    if path is not None:
        monkeypatch.setenv("PATH", path(tmp_path))
    assert main(["probe-node", *argv]) == 2
    assert message in caplog.text
    assert capsys.readouterr().out == ""
    assert cluster.patches == []


def test_unknown_node_exits_2(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, cluster: FakeCluster
) -> None:
    assert main(["probe-node", "--from-file", str(A30), "--node", "nope"]) == 2
    assert "node 'nope' not found" in caplog.text
    assert cluster.clients[0][1].closed


def test_cluster_access_errors_exit_2(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, cluster: FakeCluster
) -> None:
    def no_access(kubeconfig: str | None = None) -> None:
        raise MusterError("kubeconfig /k/c does not exist")

    monkeypatch.setattr(app.k8s.config, "load_api_client", no_access)
    assert main(["probe-node", "--from-file", str(A30), "--kubeconfig", "/k/c"]) == 2
    assert "kubeconfig /k/c does not exist" in caplog.text


# -- app.k8s.nodes.patch_node_annotation against a fake CoreV1Api ---------------------------------


class FakeCoreV1Api:
    calls: list[tuple[str, Any, dict[str, Any]]] = []
    error: BaseException | None = None

    def __init__(self, api: object) -> None:
        self.api = api

    def patch_node(self, name: str, body: Any, **kwargs: Any) -> None:
        FakeCoreV1Api.calls.append((name, body, kwargs))
        if FakeCoreV1Api.error is not None:
            raise FakeCoreV1Api.error


@pytest.fixture
def core(monkeypatch: pytest.MonkeyPatch) -> type[FakeCoreV1Api]:
    monkeypatch.setattr(app.k8s.nodes, "CoreV1Api", FakeCoreV1Api)
    FakeCoreV1Api.calls = []
    FakeCoreV1Api.error = None
    return FakeCoreV1Api


def test_patch_is_a_merge_patch_of_one_annotation(core: type[FakeCoreV1Api]) -> None:
    patch_node_annotation(object(), "gpu-1", GPU_TOPOLOGY, '{"version":1}')  # type: ignore[arg-type]
    [(name, body, kwargs)] = core.calls
    assert name == "gpu-1"
    assert body == {"metadata": {"annotations": {GPU_TOPOLOGY: '{"version":1}'}}}
    assert kwargs["_content_type"] == "application/merge-patch+json"
    assert kwargs["_request_timeout"]


def status_error(code: int, message: str) -> ApiException:
    exc = ApiException(status=code, reason="Reason")
    exc.body = json.dumps({"kind": "Status", "message": message})
    return exc


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (status_error(404, 'nodes "gpu-9" not found'), "node 'gpu-9' not found"),
        (
            status_error(403, 'nodes "gpu-9" is forbidden: User "x" cannot patch'),
            'cannot annotate node \'gpu-9\': nodes "gpu-9" is forbidden: User "x" cannot patch',
        ),
        (
            ApiException(status=500, reason="Internal Server Error"),
            "cannot annotate node 'gpu-9': 500 Internal Server Error",
        ),
        (MaxRetryError(None, "/api/v1/nodes/gpu-9", "refused"), "cannot annotate node 'gpu-9': "),
    ],
    ids=["404", "403", "500", "unreachable"],
)
def test_patch_errors_become_muster_errors(
    core: type[FakeCoreV1Api], error: BaseException, message: str
) -> None:
    core.error = error
    with pytest.raises(MusterError) as exc:
        patch_node_annotation(object(), "gpu-9", GPU_TOPOLOGY, "{}")  # type: ignore[arg-type]
    assert str(exc.value).startswith(message)
