"""Benchmark the admission webhooks (/mutate, /validate) against a do-nothing baseline.

Usage::

    .venv/bin/python scripts/bench_webhook.py                 # 2000 requests per payload
    .venv/bin/python scripts/bench_webhook.py --requests 500 --pods 20000

What is measured, per request (client's view: send, server work, receive):

* **muster**: ``create_app`` in standalone mode on the demo cluster, with the webhook's
  cluster readers wired as in cluster mode (``OwnerLister`` / ``NamespaceLister`` with their
  TTL caches) over an in-memory API that holds the payloads' Job, JobSet and namespace. So the
  steady state is measured: owners come from the cache, as for every pod of a gang but the
  first. The cluster cache holds ``--pods`` running pods in gangs of 8 (a steady cluster: the
  planner's background loop has nothing to place); /validate and the sticky min-member look
  their gang up in it.
* **null**: a FastAPI app whose handlers parse the body with the same pydantic model
  (``AdmissionReview``) and answer ``allowed`` with the uid, serialised the same way. Same
  payloads, same client. The difference is Muster's decision and patch.
* **in-process**: ``app.core.admission.pods.mutate`` / ``validate`` alone, on the same pods.

Both servers run in subprocesses (uvicorn, access log off) on 127.0.0.1 with TCP_NODELAY; one
keep-alive client each; requests strictly sequential, alternating between the servers. Payloads
are real AdmissionReviews (tests/fixtures, captured from kube-apiserver 1.20) with the pods each
controller creates. The API server calls over HTTPS; this measures plain HTTP (TLS adds the
same constant to both servers).

Prints figures and the target (p99 <= 5 ms per /mutate call); it is not a pass/fail test.
"""

from __future__ import annotations

import argparse
import copy
import functools
import gc
import json
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from fastapi import FastAPI, Request, Response  # noqa: E402

from app.api.webhook import AdmissionReview  # noqa: E402
from app.core.admission.pods import (  # noqa: E402
    AdmissionConfig,
    Fetched,
    NamespaceMeta,
    agreed_min_member,
    mutate,
    validate,
)
from app.core.admission.workloads import WorkloadKind  # noqa: E402
from app.core.model.values import Pod, Resources  # noqa: E402
from scripts.benchproc import Latency, child_server, serve_on_loopback  # noqa: E402
from tests.reviews import (  # noqa: E402
    job_obj,
    job_pod,
    jobset_obj,
    jobset_pod,
    pod,
    review,
)

TARGET_P99_MS = 5.0
NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
JSON_HEADERS = {"Content-Type": "application/json"}
SERVER_START_TIMEOUT = 60.0
_UID = "@@UID@@"


# -- payloads -------------------------------------------------------------------------------


def payloads() -> dict[str, tuple[str, dict[str, Any]]]:
    """name -> (path, AdmissionReview), one per kind of pod the webhook meets."""
    gang = {"muster.io/pod-group": "gang-0", "muster.io/min-member": "8"}
    return {
        "Job pod (owner read, cached)": ("/mutate", review(job_pod("train"))),
        "JobSet pod (owner read, cached)": ("/mutate", review(jobset_pod("llama", "workers", 1))),
        "Volcano convention": (
            "/mutate",
            review(
                pod(
                    gpu=1,
                    scheduler="volcano",
                    annotations={
                        "scheduling.k8s.io/group-name": "vj",
                        "scheduling.volcano.sh/group-min-member": "4",
                        "scheduling.volcano.sh/queue-name": "research",
                    },
                )
            ),  # fmt: skip
        ),
        "explicit Muster labels": ("/mutate", review(pod(gpu=1, labels=gang))),
        "untouched CPU pod": ("/mutate", review(pod(namespace="web", labels={"app": "web"}))),
        "validate, gang of 8": ("/validate", review(pod(gpu=1, labels=gang))),
    }


OWNERS: dict[str, dict[str, Any]] = {
    "Job/ml/train": job_obj("train", parallelism=4),
    "JobSet/ml/llama": jobset_obj("llama", [("driver", 1, 1), ("workers", 2, 4)]),
}


class MemoryReader:
    """An in-memory API for ``OwnerLister``/``NamespaceLister`` (the benchmark has no cluster)."""

    def owner(self, kind: WorkloadKind, namespace: str, name: str) -> dict[str, Any]:
        return OWNERS[f"{kind.kind}/{namespace}/{name}"]

    def namespace(self, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "annotations": {"muster.io/default-queue": "team"}}}


def cached_pods(count: int, nodes: Sequence[str] = ()) -> list[Pod]:
    """``count`` running pods in gangs of 8 (``gang-0`` is the payloads' gang), bound round-robin
    to ``nodes``: a steady cluster, where the planner has no gang left to place."""
    return [
        Pod(uid=f"uid-{i}", namespace="ml", name=f"p-{i}", requests=Resources(),
            node_name=nodes[i % len(nodes)] if nodes else "", phase="Running",
            labels={"muster.io/pod-group": f"gang-{i // 8}", "muster.io/min-member": "8"})
        for i in range(count)
    ]  # fmt: skip


def body_template(review_: dict[str, Any]) -> str:
    review_ = copy.deepcopy(review_)
    review_["request"]["uid"] = _UID
    return json.dumps(review_, separators=(",", ":"))


def render(template: str) -> bytes:
    return template.replace(_UID, str(uuid.uuid4())).encode()


# -- servers --------------------------------------------------------------------------------


def create_null_app() -> FastAPI:
    """Webhooks that decide nothing but pay the same protocol cost as Muster's."""
    app = FastAPI(title="null webhook")

    async def allow(request: Request) -> Response:
        review_ = AdmissionReview.model_validate_json(await request.body())
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": review_.request.uid, "allowed": True}}  # fmt: skip
        return Response(json.dumps(body, separators=(",", ":")), media_type="application/json")

    app.post("/mutate")(allow)
    app.post("/validate")(allow)
    return app


def create_muster_app(pods: int) -> FastAPI:
    """Muster with the webhook's readers over ``MemoryReader`` and ``pods`` cached pods."""
    from app.k8s.owners import NamespaceLister, OwnerLister
    from app.main import create_app
    from app.services import build_services
    from app.settings import Settings

    services = build_services(Settings(demo=True))
    services.owners = OwnerLister(reader=MemoryReader())
    services.namespaces = NamespaceLister(reader=MemoryReader())
    nodes = [node.name for node in services.cache.view().nodes]
    services.cache.upsert_pods(cached_pods(pods, nodes))
    return create_app(services=services)


def serve(kind: str, pods: int) -> None:
    """Child process: serve ``kind`` ("muster" or "null") on an ephemeral loopback port."""
    import logging

    logging.getLogger("muster").setLevel(logging.WARNING)
    app = create_muster_app(pods) if kind == "muster" else create_null_app()
    serve_on_loopback(app)


@contextmanager
def server_process(kind: str, pods: int) -> Iterator[str]:
    """Run a server in a subprocess for the duration of the block; yields its base URL."""
    args = ["--serve", kind, "--pods", str(pods)]
    with child_server(Path(__file__).resolve(), args, SERVER_START_TIMEOUT) as url:
        yield url


# -- measuring ------------------------------------------------------------------------------


def timed_post(client: httpx.Client, path: str, body: bytes) -> int:
    """POST; return the elapsed nanoseconds. Raises unless the answer is an allowed review
    (the validate payload is consistent, so it is allowed too)."""
    start = time.perf_counter_ns()
    response = client.post(path, content=body, headers=JSON_HEADERS)
    elapsed = time.perf_counter_ns() - start
    if response.status_code != 200 or response.json()["response"]["allowed"] is not True:
        raise RuntimeError(f"{path}: HTTP {response.status_code}: {response.text[:300]}")
    return elapsed


def measure_http(
    urls: dict[str, str], requests: int, warmup: int, time_limit: float
) -> dict[str, dict[str, list[int]]]:
    """server -> payload -> latencies; servers alternate request by request."""
    cases = {name: (path, body_template(r)) for name, (path, r) in payloads().items()}
    results: dict[str, dict[str, list[int]]] = {s: {n: [] for n in cases} for s in urls}
    with ExitStack() as stack:
        clients = {
            server: stack.enter_context(
                httpx.Client(
                    base_url=url,
                    timeout=30.0,
                    transport=httpx.HTTPTransport(socket_options=NODELAY),
                )  # fmt: skip
            )
            for server, url in urls.items()
        }
        deadline = float("inf")
        for i in range(-warmup, requests):
            if i == 0:
                gc.collect()
                deadline = time.monotonic() + time_limit
            for name, (path, template) in cases.items():
                for server, client in clients.items():
                    elapsed = timed_post(client, path, render(template))
                    if i >= 0:
                        results[server][name].append(elapsed)
            if time.monotonic() > deadline:
                break
    return results


def measure_in_process(pods: int, requests: int) -> dict[str, Latency]:
    """The pure decisions alone, with readers that answer from memory at once."""
    # The cache's gang index, as the server uses it (members found without scanning every pod).
    by_gang: dict[tuple[str, str], list[Pod]] = {}
    for p in cached_pods(pods):
        by_gang.setdefault((p.namespace, p.labels["muster.io/pod-group"]), []).append(p)
    reader = MemoryReader()

    def members(ns: str, group: str) -> list[Pod]:
        return by_gang.get((ns, group), [])

    def owners(kind: WorkloadKind, ns: str, name: str) -> Fetched:
        return Fetched(reader.owner(kind, ns, name))

    def group_min(ns: str, group: str) -> int | None:
        return agreed_min_member(members(ns, group), ns, group)

    ns_meta = NamespaceMeta(annotations={"muster.io/default-queue": "team"})
    config = AdmissionConfig()
    out = {}
    for name, (path, r) in payloads().items():
        obj, namespace = r["request"]["object"], r["request"]["namespace"]
        decide: Callable[[], Any]
        if path == "/mutate":
            decide = functools.partial(mutate, obj, namespace, ns_meta, owners, group_min, config)
        else:
            decide = functools.partial(validate, obj, namespace, members, config)
        samples = []
        for _ in range(requests):
            start = time.perf_counter_ns()
            decide()
            samples.append(time.perf_counter_ns() - start)
        out[name] = Latency.of(samples)
    return out


def run(
    requests: int = 2000,
    warmup: int = 100,
    pods: int = 5000,
    time_limit: float = 60.0,
    out: Callable[[str], None] = print,
) -> dict[str, dict[str, Latency]]:
    """Measure everything and print the table; returns server -> payload -> Latency."""
    with ExitStack() as stack:
        urls = {
            kind: stack.enter_context(server_process(kind, pods)) for kind in ("muster", "null")
        }
        raw = measure_http(urls, requests, warmup, time_limit)
    core = measure_in_process(pods, min(requests, 2000))
    stats = {server: {n: Latency.of(v) for n, v in by.items()} for server, by in raw.items()}
    mutate_names = [n for n, (path, _) in payloads().items() if path == "/mutate"]
    for server, by in raw.items():
        stats[server]["all /mutate"] = Latency.of([x for n in mutate_names for x in by[n]])
    stats["in-process"] = core

    count = stats["muster"]["all /mutate"].count // len(mutate_names)
    out(f"Webhook latency over HTTP, ms ({count} requests per payload, {pods} pods cached)")
    out(f"{'payload':34} {'muster p50':>10} {'p99':>7} {'null p50':>9} {'p99':>7} "
        f"{'ratio p50':>9} {'in-process p50':>15}")  # fmt: skip
    for name in [*payloads(), "all /mutate"]:
        m, n = stats["muster"][name], stats["null"][name]
        c = core.get(name)
        core_text = f"{c.p50:15.3f}" if c else f"{'':>15}"
        out(f"{name:34} {m.p50:10.3f} {m.p99:7.3f} {n.p50:9.3f} {n.p99:7.3f} "
            f"{m.p50 / n.p50:9.2f} {core_text}")  # fmt: skip
    worst = max(stats["muster"][n].p99 for n in mutate_names)
    verdict = "met" if worst <= TARGET_P99_MS else "MISSED"
    out(f"target: /mutate p99 <= {TARGET_P99_MS:.0f} ms per call: worst payload p99 "
        f"{worst:.3f} ms -> {verdict}")  # fmt: skip
    return stats


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="per payload (default 2000)")
    parser.add_argument("--warmup", type=int, default=100, help="unmeasured rounds first")
    parser.add_argument("--pods", type=int, default=5000, help="pods in Muster's cache")
    parser.add_argument("--time-limit", type=float, default=60.0, metavar="SECONDS",
                        help="stop measuring after this long (default 60)")  # fmt: skip
    parser.add_argument("--serve", choices=["muster", "null"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.pods)
        return 0
    run(args.requests, args.warmup, args.pods, args.time_limit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
