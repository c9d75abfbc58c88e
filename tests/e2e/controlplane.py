"""A real, loopback-only Kubernetes control plane for end-to-end tests.

``ControlPlane`` runs etcd, kube-apiserver and (on request) kube-scheduler 1.20 in a temporary
directory, with certificates made by the ``openssl`` CLI and a static admin token. Every server
listens on 127.0.0.1 only. There is no kubelet and no controller-manager: nodes are plain API
objects made schedulable by :func:`create_gpu_node`, and bound pods stay ``Pending``.

Binaries come from ``scripts/provision-k8s.sh`` (see DESIGN.md section 5).
"""

from __future__ import annotations

import ctypes
import json
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

import kubernetes.client
import kubernetes.config
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
PROVISION_SCRIPT = REPO_ROOT / "scripts" / "provision-k8s.sh"
LOOPBACK = "127.0.0.1"
GPU_RESOURCE = "nvidia.com/gpu"

#: A plain kube-scheduler 1.20 profile. ``{kubeconfig}``, ``{healthz}`` and ``{metrics}`` are
#: filled in by :meth:`ControlPlane.start_scheduler` (plain text replacement, so YAML braces
#: elsewhere are safe).
DEFAULT_SCHEDULER_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1beta1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: "{kubeconfig}"
leaderElection:
  leaderElect: false
healthzBindAddress: "{healthz}"
metricsBindAddress: "{metrics}"
profiles:
  - schedulerName: default-scheduler
"""

_OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = muster-e2e
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
authorityKeyIdentifier = keyid
"""

_STOP_GRACE_SECONDS = 5.0
_LOG_TAIL_CHARS = 4000
_PR_SET_PDEATHSIG = 1

T = TypeVar("T")


class ControlPlaneError(RuntimeError):
    """A control-plane component failed to provision, start or become ready."""


def ensure_binaries() -> Path:
    """Run the provisioning script (fast when already provisioned); return the bin directory."""
    proc = subprocess.run(
        ["bash", str(PROVISION_SCRIPT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise ControlPlaneError(
            f"{PROVISION_SCRIPT} failed (exit {proc.returncode}):\n{proc.stdout[-_LOG_TAIL_CHARS:]}"
        )
    return Path(lines[-1])


def wait_for(
    check: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.2,
) -> T:
    """Poll ``check`` until it returns a truthy value (returned) or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct free TCP ports on 127.0.0.1 (free at the time of the call)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


# Resolved once in the parent: the forked child must not call dlopen (loader lock).
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def _die_with_parent() -> None:
    """preexec_fn: have the kernel SIGKILL the child when the thread that started it dies."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class _Process:
    """A child process whose stdout and stderr go to a log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("wb")
        try:
            self.popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,  # test setup runs single-threaded
            )
        except BaseException:
            self._log.close()
            raise

    def tail(self) -> str:
        """Return the end of the process log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return text[-_LOG_TAIL_CHARS:]

    def exited(self) -> int | None:
        """Return the exit code if the process has exited, else None."""
        return self.popen.poll()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period; always reap and close the log."""
        try:
            if self.popen.poll() is None:
                self.popen.terminate()
                try:
                    self.popen.wait(_STOP_GRACE_SECONDS)
                except subprocess.TimeoutExpired:
                    self.popen.kill()
                    self.popen.wait()
        finally:
            self._log.close()


class ControlPlane:
    """etcd + kube-apiserver (+ optional kube-scheduler) on loopback, in a temporary directory.

    Use as a context manager, or call :meth:`start` and then always :meth:`stop`. After
    :meth:`start`: ``url``, ``token``, ``ca_file`` and ``kubeconfig`` describe the apiserver,
    ``etcd_url`` the etcd client endpoint, and ``dir`` holds certificates and per-process logs.

    Children get SIGKILL from the kernel if the thread that started them exits (so a killed
    test run leaves no servers behind): call :meth:`start` / :meth:`start_scheduler` from a
    thread that outlives the control plane, such as the main thread.
    """

    def __init__(
        self,
        bin_dir: Path | None = None,
        ready_timeout: float = 60.0,
        apiserver_args: tuple[str, ...] = (),
    ) -> None:
        self.bin_dir = bin_dir
        self.ready_timeout = ready_timeout
        #: Extra kube-apiserver flags (``--etcd-compaction-interval=1s`` ...).
        self.apiserver_args = apiserver_args
        self.apiserver_starts = 0
        self.dir: Path | None = None
        self.url = ""
        self.etcd_url = ""
        self.token = ""
        self.ca_file = Path()
        self.kubeconfig = Path()
        self.scheduler_healthz_url = ""
        self.scheduler_metrics_url = ""
        self._etcd: _Process | None = None
        self._apiserver: _Process | None = None
        self._scheduler: _Process | None = None
        self._scheduler_log_path: Path | None = None

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Provision binaries, make certificates, start etcd and kube-apiserver, await /readyz.

        On failure everything already started is stopped and a :class:`ControlPlaneError`
        carrying the relevant log tail is raised.
        """
        if self.dir is not None:
            raise ControlPlaneError("control plane already started")
        try:
            if self.bin_dir is None:
                self.bin_dir = ensure_binaries()
            self.dir = Path(tempfile.mkdtemp(prefix="muster-e2e-"))
            self._make_credentials()
            etcd_client, etcd_peer, api_port = free_ports(3)
            self._start_etcd(etcd_client, etcd_peer)
            self._start_apiserver(api_port, self.etcd_url)
            self._write_kubeconfig()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every process (scheduler, apiserver, etcd) and remove the temporary directory."""
        errors: list[BaseException] = []
        for attr in ("_scheduler", "_apiserver", "_etcd"):
            proc: _Process | None = getattr(self, attr)
            if proc is None:
                continue
            try:
                proc.stop()
            except BaseException as exc:  # keep stopping the others
                errors.append(exc)
            setattr(self, attr, None)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
        if errors:
            raise errors[0]

    # ---- apiserver faults --------------------------------------------------------------------

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver (SIGTERM); etcd and kube-scheduler keep running."""
        if self._apiserver is not None:
            proc, self._apiserver = self._apiserver, None
            proc.stop()

    def start_apiserver(self) -> None:
        """Start kube-apiserver again on the same port, with the same etcd and flags."""
        if self.dir is None or self._apiserver is not None:
            raise ControlPlaneError("start_apiserver() needs a started plane without apiserver")
        self._start_apiserver(int(self.url.rsplit(":", 1)[1]), self.etcd_url)

    # ---- scheduler -------------------------------------------------------------------------

    def start_scheduler(self, config_yaml: str, timeout: float = 60.0) -> None:
        """Start kube-scheduler with a KubeSchedulerConfiguration (v1beta1 for 1.20).

        ``{kubeconfig}``, ``{healthz}`` and ``{metrics}`` in the text are replaced by the
        kubeconfig path and free 127.0.0.1 addresses; the same values are filled in when the
        fields are missing, and leader election is disabled unless configured. Waits for the
        scheduler's /healthz.
        """
        if self.dir is None:
            raise ControlPlaneError("start the control plane first")
        if self._scheduler is not None:
            raise ControlPlaneError("a scheduler is already running; stop_scheduler() first")
        healthz_port, metrics_port = free_ports(2)
        config = self._scheduler_config(
            config_yaml, f"{LOOPBACK}:{healthz_port}", f"{LOOPBACK}:{metrics_port}"
        )
        config_path = self.dir / "scheduler-config.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.scheduler_healthz_url = f"http://{config['healthzBindAddress']}/healthz"
        self.scheduler_metrics_url = f"http://{config['metricsBindAddress']}/metrics"
        self._scheduler_log_path = self.dir / "kube-scheduler.log"
        assert self.bin_dir is not None
        self._scheduler = _Process(
            "kube-scheduler",
            [
                str(self.bin_dir / "kube-scheduler"),
                f"--config={config_path}",
                # 1.20 also serves HTTPS on 0.0.0.0:10259 by default; tests need only healthz.
                "--secure-port=0",
                "--v=3",
            ],
            self._scheduler_log_path,
        )
        try:
            self._await(self._scheduler, self.scheduler_healthz_url, timeout, ca=False)
        except BaseException:
            self.stop_scheduler()
            raise

    def stop_scheduler(self) -> None:
        """Stop kube-scheduler if it runs (its log stays readable via :meth:`scheduler_log`)."""
        if self._scheduler is not None:
            proc, self._scheduler = self._scheduler, None
            proc.stop()

    def scheduler_log(self) -> str:
        """Return kube-scheduler's whole log so far ("" if it was never started)."""
        if self._scheduler_log_path is None or not self._scheduler_log_path.exists():
            return ""
        return self._scheduler_log_path.read_text(errors="replace")

    # ---- clients ---------------------------------------------------------------------------

    def api_client(self) -> kubernetes.client.ApiClient:
        """Return a new admin ApiClient (close it after use); the global config is untouched."""
        return kubernetes.config.new_client_from_config(config_file=str(self.kubeconfig))

    # ---- internals -------------------------------------------------------------------------

    def _path(self, name: str) -> Path:
        assert self.dir is not None
        return self.dir / name

    def _openssl(self, *args: str) -> None:
        proc = subprocess.run(
            ["openssl", *args], cwd=self.dir, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise ControlPlaneError(f"openssl {' '.join(args)} failed:\n{proc.stderr}")

    def _make_credentials(self) -> None:
        """CA, serving cert for 127.0.0.1/localhost, service-account key pair, token file."""
        cnf = self._path("openssl.cnf")
        cnf.write_text(_OPENSSL_CONFIG)
        self._openssl("genrsa", "-out", "ca.key", "2048")
        self._openssl(
            "req", "-x509", "-new", "-key", "ca.key", "-out", "ca.crt", "-days", "2",
            "-config", str(cnf), "-extensions", "ca_ext", "-subj", "/CN=muster-e2e-ca",
        )  # fmt: skip
        self._openssl("genrsa", "-out", "server.key", "2048")
        self._openssl(
            "req", "-new", "-key", "server.key", "-out", "server.csr",
            "-config", str(cnf), "-subj", "/CN=kube-apiserver",
        )  # fmt: skip
        self._openssl(
            "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.crt", "-days", "2",
            "-extfile", str(cnf), "-extensions", "server_ext",
        )  # fmt: skip
        self._openssl("genrsa", "-out", "sa.key", "2048")
        self._openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        self.token = secrets.token_hex(24)
        self._path("tokens.csv").write_text(f'{self.token},admin,admin-uid,"system:masters"\n')
        self.ca_file = self._path("ca.crt")

    def _start_etcd(self, client_port: int, peer_port: int) -> None:
        client_url = self.etcd_url = f"http://{LOOPBACK}:{client_port}"
        peer_url = f"http://{LOOPBACK}:{peer_port}"
        self._etcd = _Process(
            "etcd",
            [
                shutil.which("etcd") or "etcd",
                "--name=muster-e2e",
                f"--data-dir={self._path('etcd-data')}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=muster-e2e={peer_url}",
                "--initial-cluster-state=new",
                "--log-level=warn",
            ],
            self._path("etcd.log"),
        )
        self._await(self._etcd, f"{client_url}/health", self.ready_timeout, ca=False)

    def _start_apiserver(self, port: int, etcd_url: str) -> None:
        assert self.bin_dir is not None
        self.url = f"https://{LOOPBACK}:{port}"
        self.apiserver_starts += 1
        log_name = "kube-apiserver.log"
        if self.apiserver_starts > 1:
            log_name = f"kube-apiserver-{self.apiserver_starts}.log"
        self._apiserver = _Process(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={port}",
                f"--cert-dir={self._path('apiserver-certs')}",
                f"--tls-cert-file={self._path('server.crt')}",
                f"--tls-private-key-file={self._path('server.key')}",
                f"--token-auth-file={self._path('tokens.csv')}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={self._path('sa.pub')}",
                f"--service-account-signing-key-file={self._path('sa.key')}",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--endpoint-reconciler-type=none",
                "--disable-admission-plugins=ServiceAccount",
                *self.apiserver_args,
            ],
            self._path(log_name),
        )
        self._await(self._apiserver, f"{self.url}/readyz", self.ready_timeout, ca=True)

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "muster-e2e",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [
                {"name": "muster-e2e", "context": {"cluster": "muster-e2e", "user": "admin"}}
            ],
            "current-context": "muster-e2e",
        }
        self.kubeconfig = self._path("kubeconfig")
        self.kubeconfig.write_text(json.dumps(config, indent=2))  # JSON is valid YAML

    def _scheduler_config(self, text: str, healthz: str, metrics: str) -> dict[str, Any]:
        for placeholder, value in (
            ("{kubeconfig}", str(self.kubeconfig)),
            ("{healthz}", healthz),
            ("{metrics}", metrics),
        ):
            text = text.replace(placeholder, value)
        config = yaml.safe_load(text)
        if not isinstance(config, dict):
            raise ValueError("scheduler config must be a YAML mapping")
        config.setdefault("clientConnection", {}).setdefault("kubeconfig", str(self.kubeconfig))
        config.setdefault("leaderElection", {}).setdefault("leaderElect", False)
        config.setdefault("healthzBindAddress", healthz)
        config.setdefault("metricsBindAddress", metrics)
        for key in ("healthzBindAddress", "metricsBindAddress"):
            if not str(config[key]).startswith(f"{LOOPBACK}:"):
                raise ValueError(f"{key} must be on {LOOPBACK}, got {config[key]!r}")
        return config

    def _probe(self, url: str, ca: bool) -> bool:
        request = urllib.request.Request(url)
        context = None
        if ca:
            request.add_header("Authorization", f"Bearer {self.token}")
            context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _await(self, proc: _Process, url: str, timeout: float, ca: bool) -> None:
        """Wait until ``url`` answers 200; fail early if ``proc`` exits. Errors carry its log."""

        def ready() -> bool:
            code = proc.exited()
            if code is not None:
                raise ControlPlaneError(
                    f"{proc.name} exited with code {code}; log tail:\n{proc.tail()}"
                )
            return self._probe(url, ca)

        try:
            wait_for(ready, timeout, f"{proc.name} at {url}")
        except TimeoutError as exc:
            raise ControlPlaneError(f"{exc}; {proc.name} log tail:\n{proc.tail()}") from None


def create_gpu_node(
    core_v1: kubernetes.client.CoreV1Api,
    name: str,
    gpus: int = 8,
    cpu: str = "32",
    memory: str = "256Gi",
    pods: str = "110",
    labels: Mapping[str, str] | None = None,
) -> kubernetes.client.V1Node:
    """Create a schedulable Node with ``gpus`` x nvidia.com/gpu; return it as finally stored.

    Capacity, allocatable and a ``Ready`` condition are set through the status subresource.
    The apiserver's TaintNodesByCondition admission adds ``node.kubernetes.io/not-ready``
    to every new node; without a node-lifecycle controller nothing re-adds it once removed.
    """
    all_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})}
    core_v1.create_node({"metadata": {"name": name, "labels": all_labels}})
    resources = {"cpu": cpu, "memory": memory, "pods": pods, GPU_RESOURCE: str(gpus)}
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "muster e2e node (no kubelet)",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    core_v1.patch_node_status(
        name, {"status": {"capacity": resources, "allocatable": resources, "conditions": [ready]}}
    )
    # A JSON patch sets the list outright ("add" also works when the field is absent).
    core_v1.patch_node(name, [{"op": "add", "path": "/spec/taints", "value": []}])
    node = core_v1.read_node(name)
    if node.spec.taints:
        raise ControlPlaneError(f"node {name} still tainted: {node.spec.taints}")
    return node
