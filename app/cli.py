"""The ``muster`` command line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from app import __version__
from app.core.errors import MusterError
from app.core.prioritize import STRATEGIES
from app.settings import Settings

log = logging.getLogger("muster")


def _serve_settings(args: argparse.Namespace) -> Settings:
    """Choose the mode: a cluster file, else Kubernetes access, else the demo cluster."""
    common = {
        "strategy": args.strategy,
        "assume_ttl_seconds": args.assume_ttl,
        "bind_barrier_seconds": args.bind_barrier,
        "plan_ttl_seconds": args.plan_ttl,
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
    """Run the extender HTTP server until interrupted."""
    import uvicorn

    from app.main import create_app

    settings = _serve_settings(args)
    if settings.demo and not args.demo:
        log.warning(
            "no --cluster file and no Kubernetes access (no in-cluster service account, "
            "$KUBECONFIG or ~/.kube/config): running on the built-in demo cluster"
        )
    try:
        app = create_app(settings)
    except MusterError as exc:
        log.error("cannot start: %s", exc)
        return 2
    log.info("Muster %s: %s, listening on http://%s:%d", __version__, settings.describe(),
             args.host, args.port)  # fmt: skip
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level.lower(),
                access_log=args.access_log)  # fmt: skip
    return 0


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
    s.add_argument("--strategy", choices=sorted(STRATEGIES), default="binpack",
                   help="how prioritize ranks nodes (default binpack)")  # fmt: skip
    s.add_argument("--assume-ttl", type=float, default=30.0, metavar="SECONDS",
                   help="forget an unconfirmed bind after this long (default 30)")  # fmt: skip
    s.add_argument("--bind-barrier", type=float, default=4.0, metavar="SECONDS",
                   help="how long a gang member's bind waits for its gang (default 4; "
                        "keep below the extender httpTimeout)")  # fmt: skip
    s.add_argument("--plan-ttl", type=float, default=60.0, metavar="SECONDS",
                   help="how long a gang plan holds its nodes (default 60)")  # fmt: skip
    s.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    s.add_argument("--access-log", action="store_true", help="log every HTTP request")
    s.set_defaults(func=serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``muster`` console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(args, "log_level", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
