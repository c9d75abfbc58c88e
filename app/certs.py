"""``muster certs``: a CA, Muster's serving certificate, kube-scheduler's client certificate,
and the caBundle.

The API server calls the webhook at ``https://muster.muster-system.svc:8443`` and trusts only
the CA named in the webhook configurations' ``caBundle``; kube-scheduler calls the extender at
``https://muster.muster-system.svc:8888`` with a client certificate (its extender
``tlsConfig``) that Muster checks against the same CA (``muster serve --client-ca ca.crt``).
This makes that CA (or reuses the one already in the output directory, so the caBundle and the
trust stay the same across renewals), issues a serving certificate for the Service's DNS names
(extended key usage serverAuth, and clientAuth: follower replicas forward verbs to the leader
with it) and a client certificate for kube-scheduler (clientAuth only: it cannot serve), and
writes::

    ca.crt  ca.key  tls.crt  tls.key  client.crt  client.key
                                      (keys mode 0600; tls.* and client.* each fit
                                       `kubectl create secret tls`)

prints the base64 caBundle on stdout (and nothing else there), and with ``--patch`` writes it
into every webhook of the Mutating- and ValidatingWebhookConfiguration through the API.

Keys are ECDSA P-256 (what cert-manager and Go's TLS stacks prefer; generated instantly).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import ipaddress
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from app.core.model.errors import MusterError

log = logging.getLogger("muster.certs")

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
CLIENT_CERT, CLIENT_KEY = "client.crt", "client.key"
#: The client certificate's subject: kube-scheduler's own user name, for logs and audit.
SCHEDULER_CLIENT = "system:kube-scheduler"
#: Issued certificates start this long in the past, so a slightly slow clock accepts them.
_BACKDATE = dt.timedelta(hours=1)


def service_names(service: str, namespace: str, cluster_domain: str = "cluster.local") -> list[str]:
    """The DNS names a Service answers to inside the cluster."""
    base = f"{service}.{namespace}"
    return [service, base, f"{base}.svc", f"{base}.svc.{cluster_domain}"]


@dataclass(frozen=True, slots=True)
class Pair:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def cert_pem(self) -> bytes:
        """The certificate, PEM."""
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        """The private key, unencrypted PKCS#8 PEM."""
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )


def ca_bundle(ca: Pair) -> str:
    """The webhook configurations' ``caBundle``: the CA certificate PEM, base64."""
    return base64.b64encode(ca.cert_pem()).decode()


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """Digital signature for every certificate; certificate and CRL signing for the CA only."""
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=ca,
        crl_sign=ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def make_ca(common_name: str = "muster-webhook-ca", days: int = 3650) -> Pair:
    """A new self-signed CA that can sign serving certificates (and nothing below them)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            _key_usage(ca=True),
            critical=True,
        )  # fmt: skip
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Pair(cert, key)


def _leaf(
    ca: Pair,
    subject: str,
    usages: Sequence[x509.ObjectIdentifier],
    sans: Sequence[x509.GeneralName],
    days: int,
) -> Pair:
    """A new key and an end-entity certificate for it, signed by ``ca``, for ``usages``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(min(now + dt.timedelta(days=days), ca.cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return Pair(builder.sign(ca.key, hashes.SHA256()), key)


def issue(ca: Pair, dns_names: Sequence[str], ips: Sequence[str] = (), days: int = 365) -> Pair:
    """A serving certificate signed by ``ca`` for ``dns_names`` and ``ips`` (SANs)."""
    if not dns_names and not ips:
        raise MusterError("a serving certificate needs at least one DNS name or IP address")
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    for ip in ips:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(ip)))
        except ValueError as exc:
            raise MusterError(f"--ip {ip!r}: {exc}") from None
    subject = dns_names[2] if len(dns_names) > 2 else (dns_names or list(ips))[0]
    # clientAuth too: a follower replica forwards the extender verbs to the leader with it.
    usages = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH)
    return _leaf(ca, subject, usages, sans, days)


def issue_client(ca: Pair, common_name: str = SCHEDULER_CLIENT, days: int = 365) -> Pair:
    """A client certificate signed by ``ca`` (clientAuth only), for kube-scheduler."""
    if not common_name:
        raise MusterError("a client certificate needs a name (--client-name)")
    return _leaf(ca, common_name, (ExtendedKeyUsageOID.CLIENT_AUTH,), (), days)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write atomically (a reader never sees half a file) with ``mode``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_ca(directory: Path) -> Pair | None:
    """The CA stored in ``directory`` (``ca.crt``/``ca.key``), or ``None`` if absent."""
    cert_path, key_path = directory / CA_CERT, directory / CA_KEY
    if not cert_path.exists() and not key_path.exists():
        return None
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise MusterError(f"cannot reuse the CA in {directory}: {exc} (or pass --new-ca)") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        raise MusterError(f"{key_path} is not the key of {cert_path} (or pass --new-ca)")
    return Pair(cert, key)


def write(directory: Path, ca: Pair, serving: Pair, client: Pair | None = None) -> list[Path]:
    """Write the PEM files into ``directory`` (created if needed); return their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    files = [
        (CA_CERT, ca.cert_pem(), 0o644),
        (CA_KEY, ca.key_pem(), 0o600),
        (TLS_KEY, serving.key_pem(), 0o600),  # key before cert: a reloader waits for both
        (TLS_CERT, serving.cert_pem(), 0o644),
    ]
    if client is not None:
        files += [(CLIENT_KEY, client.key_pem(), 0o600), (CLIENT_CERT, client.cert_pem(), 0o644)]
    paths = []
    for name, data, mode in files:
        _write(directory / name, data, mode)
        paths.append(directory / name)
    return paths


# -- the command ------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``muster certs`` options."""
    add = parser.add_argument
    add(
        "--out-dir",
        type=Path,
        default=Path("muster-certs"),
        help="where to write ca.crt, ca.key, tls.crt, tls.key, client.crt, client.key "
        "(default ./muster-certs)",
    )
    add("--service", default="muster", help="the webhook Service (default muster)")
    add(
        "--namespace",
        default="muster-system",
        help="the Service's namespace (default muster-system)",
    )
    add(
        "--cluster-domain",
        default="cluster.local",
        help="the cluster DNS domain (default cluster.local)",
    )
    add(
        "--dns",
        action="append",
        default=[],
        metavar="NAME",
        help="an extra DNS name for the certificate (repeatable)",
    )
    add(
        "--ip",
        action="append",
        default=[],
        metavar="ADDRESS",
        help="an IP address for the certificate (repeatable)",
    )
    add(
        "--days",
        type=int,
        default=365,
        help="validity of the serving certificate in days (default 365)",
    )
    add(
        "--client-name",
        default=SCHEDULER_CLIENT,
        help=f"subject of kube-scheduler's client certificate (default {SCHEDULER_CLIENT})",
    )
    add(
        "--new-ca",
        action="store_true",
        help="make a new CA even if --out-dir holds one (changes the caBundle)",
    )
    add(
        "--patch",
        action="store_true",
        help="write the caBundle into the webhook configurations in the cluster",
    )
    add(
        "--webhook-config",
        default="muster",
        help="name of the Mutating/ValidatingWebhookConfiguration (default muster)",
    )
    add(
        "--kubeconfig",
        metavar="FILE",
        help="cluster access for --patch (default: $KUBECONFIG, then ~/.kube/config)",
    )


def command(args: argparse.Namespace) -> int:
    """Run ``muster certs``; the caBundle goes to stdout, everything else to the log."""
    try:
        if args.days < 1:
            raise MusterError("--days must be at least 1")
        ca = None if args.new_ca else load_ca(args.out_dir)
        if ca is None:
            ca = make_ca()
            log.info("made a new CA")
        else:
            log.info("reusing the CA in %s (the caBundle stays the same)", args.out_dir)
        names = service_names(args.service, args.namespace, args.cluster_domain) + list(args.dns)
        serving = issue(ca, names, args.ip, args.days)
        client = issue_client(ca, args.client_name, args.days)
        for path in write(args.out_dir, ca, serving, client):
            log.info("wrote %s", path)
        bundle = ca_bundle(ca)
        if args.patch:
            from app.k8s.config import close_api_client, load_api_client
            from app.k8s.webhooks import patch_ca_bundle

            api = load_api_client(args.kubeconfig, False)
            try:
                for line in patch_ca_bundle(api, args.webhook_config, bundle):
                    log.info("%s", line)
            finally:
                close_api_client(api)
    except MusterError as exc:
        log.error("%s", exc)
        return 2
    sys.stdout.write(bundle + "\n")
    return 0
