"""``muster explain`` against a running server: the table, the JSON, and clear refusals."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from app.main import create_app
from tests.conftest import free_port, running
from tests.factories import pod_json

GANG = {"muster.io/pod-group": "llama", "muster.io/min-member": "2"}


def test_explain_prints_a_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    with running(create_app()) as client:
        member = pod_json("llama-0", gpu=8, namespace="ml", labels=GANG)
        client.post("/filter", content=json.dumps({"Pod": member, "NodeNames": ["h100-0"]}))
        server = str(client.base_url)
        assert main(["explain", "ml/llama-0", "--server", server]) == 0
        table = capsys.readouterr().out
        assert "blocked by      gang-incomplete: 1 of 2 members exist" in table
        assert "members         1 seen, 2 needed, 0 bound" in table
        assert "expected start  unknown" in table
        assert main(["explain", "--gang", "ml/llama", "--server", server, "-o", "json"]) == 0
        body = json.loads(capsys.readouterr().out)
        assert (body["subject"], body["category"]) == ("gang ml/llama", "gang-incomplete")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["explain", "a/b/c"], "expected NAMESPACE/NAME, got 'a/b/c'"),
        (["explain", "ml/x", "--server", "http://127.0.0.1:{port}"], "cannot reach Muster at"),
    ],
)
def test_explain_refuses_clearly(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [a.format(port=free_port()) for a in argv]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


JOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: llama, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
            - {name: main, resources: {requests: {nvidia.com/gpu: "8", cpu: "8", memory: 64Gi}}}
    Worker:
      replicas: 3
      template:
        spec:
          containers:
            - {name: main, resources: {requests: {nvidia.com/gpu: "8", cpu: "8", memory: 64Gi}}}
"""


def test_whatif_reads_a_manifest(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    manifest = tmp_path / "job.yaml"
    manifest.write_text(JOB)
    with running(create_app()) as client:
        server = str(client.base_url)
        assert main(["whatif", "-f", str(manifest), "--server", server]) == 0
        table = capsys.readouterr().out
        assert "subject         gang ml/llama" in table
        assert "fits now        yes" in table
        assert "min-member      4 (PyTorchJob: 4 replicas)" in table
        assert "llama-master-0  h100-" in table and "(GPUs 0,1,2,3,4,5,6,7)" in table
        assert main(["whatif", "-f", str(manifest), "--server", server, "--priority", "5",
                     "--min-member", "2", "-o", "json"]) == 0  # fmt: skip
        body = json.loads(capsys.readouterr().out)
        assert (body["min_member"], body["basis"]) == (2, "minMember")
        # A fifth 8-GPU member does not fit: the answer explains why.
        bigger = JOB.replace("replicas: 3", "replicas: 4")
        manifest.write_text(bigger)
        assert main(["whatif", "-f", str(manifest), "--server", server]) == 0
        table = capsys.readouterr().out
        assert "fits now        no" in table
        assert "blocked by      fragmentation: 40 nvidia.com/gpu free in total" in table


def test_whatif_refuses_an_unreadable_manifest(
    tmp_path,
    capsys: pytest.CaptureFixture[str],  # noqa: ANN001
) -> None:
    assert main(["whatif", "-f", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read" in capsys.readouterr().err
