"""`muster serve` chooses its mode the documented way and refuses bad input clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.cli import _serve_settings, build_parser, main


@pytest.fixture
def no_kube(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def settings_for(*argv: str):
    return _serve_settings(build_parser().parse_args(["serve", *argv]))


def test_cluster_file_means_standalone(no_kube: Path) -> None:
    s = settings_for("--cluster", "nodes.yaml", "--strategy", "spread")
    assert (s.mode, s.cluster_file, s.strategy, s.demo) == (
        "standalone",
        Path("nodes.yaml"),
        "spread",
        False,
    )


def test_no_access_means_demo(no_kube: Path) -> None:
    s = settings_for()
    assert s.mode == "standalone" and s.demo
    assert "demo cluster" in s.describe()


def test_kubeconfig_in_home_means_cluster(no_kube: Path) -> None:
    (no_kube / ".kube").mkdir()
    (no_kube / ".kube" / "config").write_text("apiVersion: v1\n")
    assert settings_for().mode == "cluster"
    assert settings_for("--demo").demo  # --demo still wins


def test_explicit_modes(no_kube: Path) -> None:
    assert settings_for("--kubeconfig", "/x/kc").kubeconfig == "/x/kc"
    s = settings_for("--in-cluster")
    assert s.mode == "cluster" and s.in_cluster


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "--cluster", "/nonexistent.yaml"], "cannot read"),
        (["serve", "--kubeconfig", "/nonexistent-kubeconfig"], "does not exist"),
    ],
)
def test_bad_sources_exit_2_with_a_reason(
    no_kube: Path, argv: list[str], message: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert main(argv) == 2
    assert message in caplog.text


def test_unknown_strategy_is_a_usage_error(no_kube: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--strategy", "random"])
    assert exc.value.code == 2


def test_leader_election_flags(no_kube: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "muster-7d9-abc")
    monkeypatch.setenv("POD_IP", "10.1.2.3")
    s = settings_for("--in-cluster", "--leader-elect", "--port", "9000", "--lease-duration", "6",
                     "--renew-deadline", "4", "--retry-period", "1")  # fmt: skip
    assert (s.leader_elect, s.identity, s.advertise_url) == (
        True,
        "muster-7d9-abc",
        "http://10.1.2.3:9000",
    )
    assert (s.lease_duration_seconds, s.renew_deadline_seconds, s.retry_period_seconds) == (6, 4, 1)
    assert (s.lease_name, settings_for("--advertise-url", "http://x:1").advertise_url) == (
        "muster-leader",
        "http://x:1",
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "--demo", "--leader-elect"], "leader election needs cluster mode"),
        (
            ["serve", "--kubeconfig", "KC", "--leader-elect", "--renew-deadline", "5"],
            "retry period < renew deadline < lease duration",
        ),
    ],
)
def test_bad_election_settings_exit_2_with_a_reason(
    no_kube: Path, argv: list[str], message: str, caplog: pytest.LogCaptureFixture
) -> None:
    kubeconfig = no_kube / "kc"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    argv = [str(kubeconfig) if a == "KC" else a for a in argv]
    assert main(argv) == 2
    assert message in caplog.text
