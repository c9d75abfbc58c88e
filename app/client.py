"""``muster explain`` and ``muster whatif``: ask a running Muster and print the answer, as a
short table for people or as the server's JSON (``-o json``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

import httpx
import yaml

from app.core.model.errors import MusterError

#: Where ``--server`` points by default (``make demo``, or a port-forward to the Service).
DEFAULT_SERVER = "http://127.0.0.1:8888"


def get_json(
    server: str, path: str, body: dict[str, Any] | None = None, timeout: float = 10.0
) -> dict[str, Any]:
    """``GET server+path`` (``POST`` with ``body``) as JSON; ``MusterError`` naming the
    server or the refusal."""
    url = server.rstrip("/") + path
    try:
        if body is None:
            response = httpx.get(url, timeout=timeout)
        else:
            response = httpx.post(url, json=body, timeout=timeout)
    except httpx.HTTPError as exc:
        raise MusterError(f"cannot reach Muster at {server}: {exc}") from exc
    if response.status_code != 200:
        raise MusterError(f"{url}: HTTP {response.status_code}: {response.text[:300]}")
    answer: dict[str, Any] = response.json()
    return answer


def explain_path(subject: str, gang: bool) -> str:
    """``NAMESPACE/NAME`` (or a bare ``NAME`` in ``default``) as an ``/explain`` path."""
    namespace, _, name = subject.rpartition("/")
    namespace = namespace or "default"
    if not name or "/" in namespace:
        raise MusterError(f"expected NAMESPACE/NAME, got {subject!r}")
    return f"/explain/{namespace}/gang/{name}" if gang else f"/explain/{namespace}/{name}"


def render_explanation(body: dict[str, Any], out: TextIO) -> None:
    """The short human table of an ``/explain`` answer."""
    eta = body.get("eta_seconds")
    rows = [
        ("subject", body["subject"]),
        ("state", body["state"]),
        ("blocked by", f"{body['category']}: {body['summary']}"),
        ("expected start", "unknown" if eta is None else f"in {eta:.0f}s"),
    ]
    gang = body.get("gang")
    if gang:
        rows.append(("members", f"{gang['seen']} seen, {gang['needed']} needed, "
                                f"{gang['bound']} bound"))  # fmt: skip
    position = body.get("position")
    if position:
        rows.append(("position", f"{position['index']} of {position['of']} in queue "
                                 f"{position['queue']}"))  # fmt: skip
    for level in body.get("queue", []):
        usage = level.get("usage", {}).get("nvidia.com/gpu", "0")
        limit = level.get("limit", {}).get("nvidia.com/gpu", "none")
        rows.append((f"queue {level['name']}", f"{usage} GPU used, limit {limit}"))
    gpus = body.get("gpus") or {}
    largest = gpus.get("largestNode")
    if largest:
        rows.append(("GPUs", f"{gpus['free']} free; most whole free on one node: "
                             f"{largest['wholeGpus']} ({largest['node']})"))  # fmt: skip
    for item in body.get("nodes", [])[:5]:
        rows.append(("nodes", f"{item['count']}: {item['reason']}"))
    for i, fix in enumerate(body.get("fixes", [])):
        rows.append(("fix" if i == 0 else "", f"{fix['change']}: {fix['effect']}"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        out.write(f"{key:<{width}}  {value}\n")


def explain(args: argparse.Namespace) -> int:
    """``muster explain``: print why a pod or gang is pending."""
    try:
        body = get_json(args.server, explain_path(args.subject, args.gang))
    except MusterError as exc:
        sys.stderr.write(f"muster explain: {exc}\n")
        return 2
    if args.output == "json":
        sys.stdout.write(json.dumps(body, indent=2) + "\n")
    else:
        render_explanation(body, sys.stdout)
    return 0


def whatif_body(args: argparse.Namespace) -> dict[str, Any]:
    """The ``/whatif`` request for ``-f FILE`` (a Pod, a pod template or a workload) and the
    overrides given on the command line."""
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        doc = yaml.safe_load(text)
    except (OSError, yaml.YAMLError) as exc:
        raise MusterError(f"cannot read {args.file}: {exc}") from exc
    if not isinstance(doc, dict):
        raise MusterError(f"{args.file}: expected one YAML object (a Pod or a workload)")
    kind = doc.get("kind")
    body: dict[str, Any] = {"pod": doc} if kind in (None, "Pod") else {"workload": doc}
    if kind is None and args.replicas is None and "replicas" in doc:
        body = {
            "pod": {k: v for k, v in doc.items() if k != "replicas"},
            "replicas": doc["replicas"],
        }
    overrides = {
        "replicas": args.replicas, "namespace": args.namespace, "queue": args.queue,
        "priority": args.priority, "minMember": args.min_member,
    }  # fmt: skip
    body.update({k: v for k, v in overrides.items() if v is not None})
    if args.topology_required:
        body["topology"] = {"required": args.topology_required}
    elif args.topology_preferred:
        body["topology"] = {"preferred": args.topology_preferred}
    return body


def render_whatif(body: dict[str, Any], out: TextIO) -> None:
    """The short human table of a ``/whatif`` answer."""
    eta = body.get("eta_seconds")
    victims = body.get("victims") or []
    verdict = "yes" if body["fits_now"] else "after evicting" if victims else "no"
    rows = [
        ("subject", body["subject"]),
        ("fits now", verdict),
        ("min-member", f"{body['min_member']} ({body['basis']})"),
        ("expected start", "unknown" if eta is None else "now" if eta == 0 else f"in {eta:.0f}s"),
    ]
    for name, member in body.get("placement", {}).items():
        gpus = ",".join(map(str, member["gpus"]))
        rows.append((name, member["node"] + (f" (GPUs {gpus})" if gpus else "")))
    for victim in victims:
        rows.append(("evicts", f"{victim['unit']}: {len(victim['pods'])} pods, "
                               f"{victim['gpus']:g} GPUs, {victim['workLostSeconds']:.0f} "
                               "pod-seconds of work lost"))  # fmt: skip
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        out.write(f"{key:<{width}}  {value}\n")
    if body.get("explanation"):
        out.write("\n")
        render_explanation(body["explanation"], out)


def whatif(args: argparse.Namespace) -> int:
    """``muster whatif``: print what Muster would do with a job (nothing is submitted)."""
    try:
        body = get_json(args.server, "/whatif", whatif_body(args))
    except MusterError as exc:
        sys.stderr.write(f"muster whatif: {exc}\n")
        return 2
    if args.output == "json":
        sys.stdout.write(json.dumps(body, indent=2) + "\n")
    else:
        render_whatif(body, sys.stdout)
    return 0


def add_commands(sub: Any) -> None:
    """Register ``explain`` and ``whatif`` on the ``muster`` subcommand parser."""
    e = sub.add_parser("explain", help="why a pod or gang is pending (asks a running Muster)")
    e.add_argument("subject", metavar="NAMESPACE/NAME", help="a pod, or with --gang a gang")
    e.add_argument("--gang", action="store_true", help="NAME is a gang (muster.io/pod-group)")
    e.add_argument("--server", default=DEFAULT_SERVER,
                   help=f"Muster's address (default {DEFAULT_SERVER})")  # fmt: skip
    e.add_argument("-o", "--output", choices=("table", "json"), default="table")
    e.set_defaults(func=explain)
    w = sub.add_parser("whatif", help="what Muster would do with a job (nothing is submitted)")
    w.add_argument("-f", "--file", required=True,
                   help="a Pod, a pod template or a Job/JobSet/PyTorchJob/RayCluster/"
                        "LeaderWorkerSet manifest ('-': stdin)")  # fmt: skip
    w.add_argument("--replicas", type=int, help="pods from a pod template (a gang if > 1)")
    w.add_argument("--namespace", help="default: the manifest's, else default")
    w.add_argument("--queue")
    w.add_argument("--priority", type=int)
    w.add_argument("--min-member", type=int)
    w.add_argument("--topology-required", metavar="LEVEL")
    w.add_argument("--topology-preferred", metavar="LEVEL")
    w.add_argument("--server", default=DEFAULT_SERVER,
                   help=f"Muster's address (default {DEFAULT_SERVER})")  # fmt: skip
    w.add_argument("-o", "--output", choices=("table", "json"), default="table")
    w.set_defaults(func=whatif)
