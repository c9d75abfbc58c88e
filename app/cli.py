"""The ``muster`` command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from app import __version__, client
from app.core.model.errors import MusterError
from app.core.policies.gangorder import GANG_ORDERS
from app.core.state.domains import DEFAULT_KEYS
from app.core.verbs.prioritize import STRATEGIES
from app.settings import Settings

log = logging.getLogger("muster")


def _serve_settings(args: argparse.Namespace) -> Settings:
    """Choose the mode: a cluster file, else Kubernetes access, else the demo cluster."""
    common = {
        "strategy": args.strategy,
        "assume_ttl_seconds": args.assume_ttl,
        "bind_barrier_seconds": args.bind_barrier,
        "plan_ttl_seconds": args.plan_ttl,
        "group_discovery_seconds": args.group_discovery,
        "queue_file": Path(args.queues) if args.queues else None,
        "default_runtime_seconds": args.default_runtime,
        "gang_order": args.gang_order,
        "longest_first_window_seconds": args.longest_first_window,
        "mirror_unresolvable": args.mirror_unresolvable,
        "sole_pick": not args.no_sole_pick,
        "min_runtime_seconds": args.min_runtime,
        "preemption": not args.no_preemption,
        "scheduler_name": args.scheduler_name,
        "muster_namespace": args.muster_namespace,
        "tls_cert": Path(args.tls_cert) if args.tls_cert else None,
        "tls_key": Path(args.tls_key) if args.tls_key else None,
        "webhook_port": args.webhook_port,
        "client_ca": Path(args.client_ca) if args.client_ca else None,
        "ops_listen": args.ops_listen,
        "topology_keys": args.topology_keys,
        "leader_elect": args.leader_elect,
        "lease_name": args.lease_name,
        "identity": args.identity,
        "lease_duration_seconds": args.lease_duration,
        "renew_deadline_seconds": args.renew_deadline,
        "retry_period_seconds": args.retry_period,
        "advertise_url": args.advertise_url
        or (
            f"{'https' if args.client_ca else 'http'}://{os.environ['POD_IP']}:{args.port}"
            if os.environ.get("POD_IP")
            else ""
        ),
        "scheduling_gates": args.scheduling_gates,
        "bind_dry_run": args.bind_dry_run,
    }
    if args.cluster:
        return Settings(mode="standalone", cluster_file=Path(args.cluster), **common)
    if args.demo:
        return Settings(mode="standalone", demo=True, **common)
    from app.k8s.config import kube_access_available

    if args.in_cluster or args.kubeconfig or kube_access_available(None):
        return Settings(
            mode="cluster", kubeconfig=args.kubeconfig, in_cluster=args.in_cluster, **common
        )
    return Settings(mode="standalone", demo=True, **common)


def serve(args: argparse.Namespace) -> int:
    """Run the extender, with TLS files the webhook (HTTPS), and with ``--ops-listen`` the
    operations listener, until interrupted (``app.server.plan_listeners``)."""
    from app.main import create_app
    from app.server import MusterServer, plan_listeners

    if bool(args.tls_cert) != bool(args.tls_key):
        log.error("--tls-cert and --tls-key go together")
        return 2
    settings = _serve_settings(args)
    if settings.demo and not args.demo:
        log.warning(
            "no --cluster file and no Kubernetes access (no in-cluster service account, "
            "$KUBECONFIG or ~/.kube/config): running on the built-in demo cluster"
        )
    try:
        listeners = plan_listeners(settings, args.host, args.port)
        app = create_app(settings)
    except MusterError as exc:
        log.error("cannot start: %s", exc)
        return 2
    server = MusterServer(app, listeners, log_level=args.log_level.lower(),
                          access_log=args.access_log)  # fmt: skip
    log.info("Muster %s: %s, listening on %s", __version__, settings.describe(),
             ", ".join(listener.describe() for listener in listeners))  # fmt: skip
    try:
        server.run()
    except MusterError as exc:
        log.error("cannot start: %s", exc)
        return 2
    return 0


def certs(args: argparse.Namespace) -> int:
    """Make the webhook's CA and serving certificate; print (and optionally patch) the caBundle."""
    from app.certs import command

    return command(args)


def simulate(args: argparse.Namespace) -> int:
    """Simulate gang workloads through a model of kube-scheduler, or the openb GPU-sharing
    experiment (``simulate openb``); see ``app.sim``."""
    from app.sim.command import run

    return run(args)


def _topology_text(from_file: str | None) -> tuple[str, str]:
    """``(where from, text)`` of ``nvidia-smi topo -m``: a file, stdin (``-``) or the command."""
    import subprocess

    if from_file:
        source = "stdin" if from_file == "-" else from_file
        try:
            return source, sys.stdin.read() if from_file == "-" else Path(from_file).read_text()
        except OSError as exc:
            raise MusterError(f"cannot read {source}: {exc.strerror or exc}") from exc
    try:
        done = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
    except FileNotFoundError as exc:
        raise MusterError("nvidia-smi not found (is the NVIDIA driver installed here? "
                          "--from-file reads saved output)") from exc  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise MusterError("nvidia-smi topo -m did not answer within 60 s") from exc
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        raise MusterError(f"nvidia-smi topo -m failed: {why}")
    return "nvidia-smi topo -m", done.stdout


def probe_node(args: argparse.Namespace) -> int:
    """Print the GPU topology annotation from ``nvidia-smi topo -m``; patch it onto the Node."""
    import socket

    from app.core.gpu.links import from_nvidia_smi, to_annotation
    from app.core.model.labels import GPU_TOPOLOGY

    try:
        source, text = _topology_text(args.from_file)
        try:
            annotation = to_annotation(from_nvidia_smi(text))
        except ValueError as exc:
            raise MusterError(f"cannot parse the output of {source}: {exc}") from exc
        sys.stdout.write(annotation + "\n")
        if args.dry_run:
            return 0
        node = args.node or os.environ.get("NODE_NAME") or socket.gethostname()
        from app.k8s.config import close_api_client, load_api_client
        from app.k8s.nodes import patch_node_annotation

        api = load_api_client(args.kubeconfig)
        try:
            patch_node_annotation(api, node, GPU_TOPOLOGY, annotation)
        finally:
            close_api_client(api)
    except MusterError as exc:
        log.error("%s", exc)
        return 2
    log.info("annotated node %s with %s", node, GPU_TOPOLOGY)
    return 0


def _label_keys(text: str) -> tuple[str, ...]:
    """``"a,b"`` -> ``("a", "b")`` (blanks dropped)."""
    return tuple(k.strip() for k in text.split(",") if k.strip())


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = argparse.ArgumentParser(prog="muster", description="Muster scheduler extender")
    parser.add_argument("--version", action="version", version=f"muster {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="run the kube-scheduler extender HTTP server")
    s.add_argument(
        "--cluster", metavar="FILE", help="standalone mode: nodes from a YAML or openb CSV file"
    )
    s.add_argument(
        "--demo", action="store_true", help="standalone mode on the built-in demo cluster"
    )
    s.add_argument("--kubeconfig", metavar="FILE", help="cluster mode through this kubeconfig")
    s.add_argument(
        "--in-cluster", action="store_true", help="cluster mode with the pod's service account"
    )
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8888, help="port to listen on (default 8888)")
    s.add_argument("--strategy", choices=sorted(STRATEGIES), default="muster",
                   help="how prioritize ranks nodes (default muster: GPU-share and "
                        "fragmentation-aware for GPU clusters, binpack otherwise)")  # fmt: skip
    s.add_argument("--assume-ttl", type=float, default=30.0, metavar="SECONDS",
                   help="forget an unconfirmed bind after this long (default 30)")  # fmt: skip
    s.add_argument("--bind-barrier", type=float, default=4.0, metavar="SECONDS",
                   help="how long a gang member's bind waits for its gang (default 4; "
                        "keep below the extender httpTimeout)")  # fmt: skip
    s.add_argument("--plan-ttl", type=float, default=60.0, metavar="SECONDS",
                   help="how long a gang plan holds its nodes (default 60)")  # fmt: skip
    s.add_argument("--group-discovery", type=float, default=30.0, metavar="SECONDS",
                   help="how often to look for PodGroup/Workload APIs the cluster serves "
                        "(Volcano, coscheduling, scheduling.k8s.io; default 30)")  # fmt: skip
    s.add_argument(
        "--mirror-unresolvable",
        action="store_true",
        help="copy unresolvable reasons to FailedNodes (for kube-scheduler 1.20)",
    )
    s.add_argument("--no-sole-pick", action="store_true",
                   help="always answer filter with every feasible node, so kube-scheduler "
                        "scores them (default: Muster's pick alone for a pod on its own with "
                        "no soft preferences)")  # fmt: skip
    s.add_argument("--min-runtime", type=float, default=0.0, metavar="SECONDS",
                   help="gangs younger than this are never preempted, unless their pods, "
                        "PriorityClass or queue say otherwise (default 0)")  # fmt: skip
    s.add_argument("--no-preemption", action="store_true",
                   help="never evict gangs for higher-priority gangs or reclaim")  # fmt: skip
    s.add_argument("--default-runtime", type=float, default=3600.0, metavar="SECONDS",
                   help="expected runtime of pods that declare none (default 3600)")  # fmt: skip
    s.add_argument("--gang-order", choices=GANG_ORDERS, default="longest-first",
                   help="order of equal-priority gangs in a queue: longest-first (declared "
                        "runtime counts as extra age, up to --longest-first-window) or fifo "
                        "(default longest-first)")  # fmt: skip
    s.add_argument("--longest-first-window", type=float, default=600.0, metavar="SECONDS",
                   help="most queue position a declared runtime buys (default 600)")  # fmt: skip
    s.add_argument("--queues", metavar="FILE",
                   help="queue configuration (YAML; reloaded when it changes)")  # fmt: skip
    s.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    s.add_argument("--access-log", action="store_true", help="log every HTTP request")
    s.add_argument("--tls-cert", metavar="FILE",
                   help="serving certificate: also listen on --webhook-port over HTTPS "
                        "(the admission webhook); reloaded when it changes")  # fmt: skip
    s.add_argument("--tls-key", metavar="FILE", help="the key of --tls-cert")
    s.add_argument("--webhook-port", type=int, default=8443,
                   help="HTTPS port when --tls-cert is given (default 8443)")  # fmt: skip
    s.add_argument("--client-ca", metavar="FILE",
                   help="require client certificates signed by this CA on --port, which then "
                        "speaks HTTPS with --tls-cert (kube-scheduler's extender tlsConfig); "
                        "the extender verbs are then served only there")  # fmt: skip
    s.add_argument("--ops-listen", metavar="HOST:PORT",
                   help="serve /healthz, /readyz, /metrics, /debug/*, /explain, /whatif and "
                        "/openapi.json on this plain-HTTP address only (default: on every "
                        "listener)")  # fmt: skip
    s.add_argument("--scheduler-name", default="muster",
                   help="schedulerName the webhook sets (default muster)")  # fmt: skip
    s.add_argument("--muster-namespace", default=os.environ.get("POD_NAMESPACE") or "muster-system",
                   help="Muster's namespace, never touched by the webhook "
                        "(default $POD_NAMESPACE, else muster-system)")  # fmt: skip
    s.add_argument("--topology-keys", type=_label_keys, default=DEFAULT_KEYS, metavar="K1,K2,...",
                   help="node label keys of the network topology levels, broadest first "
                        "(default " + ",".join(DEFAULT_KEYS) + "; empty: no topology)")  # fmt: skip
    s.add_argument("--leader-elect", action="store_true",
                   help="cluster mode: several replicas elect a leader on a Lease; only the "
                        "leader decides, followers forward the extender verbs to it")  # fmt: skip
    s.add_argument("--lease-name", default="muster-leader",
                   help="the Lease in --muster-namespace (default muster-leader)")  # fmt: skip
    s.add_argument("--identity", default=os.environ.get("POD_NAME") or "",
                   help="this replica on the Lease (default $POD_NAME, else host-pid)")  # fmt: skip
    s.add_argument("--lease-duration", type=float, default=3.0, metavar="SECONDS",
                   help="a Lease not renewed for this long may be taken (default 3)")  # fmt: skip
    s.add_argument("--renew-deadline", type=float, default=2.0, metavar="SECONDS",
                   help="the leader stops deciding when it could not renew for this long "
                        "(default 2; below --lease-duration)")  # fmt: skip
    s.add_argument("--retry-period", type=float, default=0.5, metavar="SECONDS",
                   help="how often replicas try or renew the Lease (default 0.5)")  # fmt: skip
    s.add_argument("--advertise-url", default="", metavar="URL",
                   help="where the other replicas reach this one (default "
                        "http://$POD_IP:PORT, https with --client-ca; used to forward verbs to "
                        "the leader)")  # fmt: skip
    s.add_argument("--scheduling-gates", choices=["auto", "on", "off"], default="auto",
                   help="create gang members behind Muster's scheduling gate, removed once the "
                        "gang is planned (default auto: where the API server serves gates, "
                        "Kubernetes 1.27+)")  # fmt: skip
    s.add_argument("--bind-dry-run", choices=["auto", "always"], default="auto",
                   help="send a gang's Bindings as dry runs before binding any member (default "
                        "auto: while an admission webhook or policy may see Bindings, or that "
                        "cannot be read)")  # fmt: skip
    s.set_defaults(func=serve)
    c = sub.add_parser("certs", help="make the webhook's CA and serving certificate")
    from app.certs import add_arguments

    add_arguments(c)
    c.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    c.set_defaults(func=certs)
    m = sub.add_parser(
        "simulate", help="simulate gang workloads vs kube-scheduler, or `simulate openb` (GPUs)"
    )
    from app.sim.command import add_arguments as add_simulate_arguments

    add_simulate_arguments(m)
    m.set_defaults(func=simulate)
    p = sub.add_parser("probe-node", help="annotate this node with its GPU topology (nvidia-smi)")
    p.add_argument("--from-file", metavar="PATH",
                   help="read saved `nvidia-smi topo -m` output instead ('-': stdin)")  # fmt: skip
    p.add_argument("--node", help="the Node to annotate (default $NODE_NAME, else the hostname)")
    p.add_argument("--dry-run", action="store_true", help="only print the annotation")
    p.add_argument("--kubeconfig", metavar="FILE",
                   help="cluster access (default: in-cluster, else $KUBECONFIG)")  # fmt: skip
    p.set_defaults(func=probe_node)
    client.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``muster`` console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(args, "log_level", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Each request the client commands make would otherwise print a log line among the answer.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    code: int = args.func(args)  # every subcommand's function returns the exit status
    return code


if __name__ == "__main__":
    sys.exit(main())
