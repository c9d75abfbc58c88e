"""``muster certs``: a CA and serving certificate the API server accepts, files and caBundle."""

from __future__ import annotations

import base64
import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from app import certs
from app.cli import main

SERVICE_NAMES = [
    "muster",
    "muster.muster-system",
    "muster.muster-system.svc",
    "muster.muster-system.svc.cluster.local",
]


def test_serving_certificate_is_signed_by_the_ca_for_the_service_names() -> None:
    ca = certs.make_ca()
    pair = certs.issue(ca, certs.service_names("muster", "muster-system"), ["127.0.0.1"])
    cert = pair.cert
    cert.verify_directly_issued_by(ca.cert)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == SERVICE_NAMES
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    # clientAuth too: follower replicas forward the extender verbs to the leader with it.
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    ca_constraints = ca.cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert ca_constraints.ca is True and ca_constraints.path_length == 0
    assert cert.not_valid_after_utc <= ca.cert.not_valid_after_utc


def test_certs_command_writes_files_and_prints_only_the_ca_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["certs", "--out-dir", str(out), "--namespace", "gpu", "--dns", "muster.example.com"]
    assert main(argv) == 0
    bundle = capsys.readouterr().out
    assert base64.b64decode(bundle.strip()) == (out / "ca.crt").read_bytes()
    for name, mode in (("ca.crt", 0o644), ("ca.key", 0o600), ("tls.crt", 0o644),
                       ("tls.key", 0o600), ("client.crt", 0o644),
                       ("client.key", 0o600)):  # fmt: skip
        assert stat.S_IMODE((out / name).stat().st_mode) == mode, name
    # kube-scheduler's client certificate: same CA, clientAuth only, kube-scheduler's name.
    ca_cert = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    client = x509.load_pem_x509_certificate((out / "client.crt").read_bytes())
    client.verify_directly_issued_by(ca_cert)
    eku = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert client.subject.rfc4514_string() == "CN=system:kube-scheduler"
    cert = x509.load_pem_x509_certificate((out / "tls.crt").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "muster.gpu.svc" in san.get_values_for_type(x509.DNSName)
    assert "muster.example.com" in san.get_values_for_type(x509.DNSName)
    first_cert = (out / "tls.crt").read_bytes()

    # Again: the CA (and so the caBundle) is reused, the serving certificate is new.
    assert main(argv) == 0
    assert capsys.readouterr().out == bundle
    assert (out / "tls.crt").read_bytes() != first_cert
    # --new-ca: a new caBundle.
    assert main([*argv, "--new-ca"]) == 0
    assert capsys.readouterr().out != bundle


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--ip", "not-an-ip"], "--ip 'not-an-ip'"),
        (["--days", "0"], "--days must be at least 1"),
    ],
)
def test_bad_options_exit_2_with_a_reason(
    tmp_path: Path,
    extra: list[str],
    message: str,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["certs", "--out-dir", str(tmp_path), *extra]) == 2
    assert message in caplog.text
    assert capsys.readouterr().out == ""


def test_a_ca_key_that_does_not_match_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    certs.write(tmp_path, certs.make_ca(), certs.issue(certs.make_ca(), ["x"]))
    (tmp_path / "ca.key").write_bytes(certs.make_ca().key_pem())
    assert main(["certs", "--out-dir", str(tmp_path)]) == 2
    assert "is not the key of" in caplog.text


def test_patch_needs_cluster_access(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    missing = tmp_path / "no-kubeconfig"
    assert main(["certs", "--out-dir", str(tmp_path), "--patch", "--kubeconfig", str(missing)]) == 2
    assert "does not exist" in caplog.text
