"""Benchmark the extender's filter and prioritize verbs against a do-nothing baseline.

Usage::

    .venv/bin/python scripts/bench_extender.py                      # sizes 100,500,5000; 2000 pods
    .venv/bin/python scripts/bench_extender.py --sizes 500 --requests 500

For each size N it generates an N-node cluster (``gen_cluster.build_cluster``) and measures,
per pod (requesting 1 GPU; ``NodeNames`` = all N nodes; a fresh name and uid each time):

* **HTTP, Muster**: ``POST /filter`` then, if filter left more than one node (not with
  Muster's sole pick; see ``--no-sole-pick``), ``POST /prioritize`` against
  ``create_app(Settings(cluster_file=...))`` served by uvicorn;
* **HTTP, null**: the same requests against a "null" FastAPI app whose handlers parse the body
  with the same pydantic model (``wire.ExtenderArgs.model_validate_json``) and answer the
  trivial result serialised the same way as the real handlers (all nodes feasible; every score
  0). The ratio Muster/null is the price of the scheduling work and Muster's handler extras;
* **inside the server app**: both apps are wrapped in the same tiny ASGI timer that reports,
  per request, the time from "whole body received" to the response start (decode, handler,
  encode) in a header, so client-side figures split into app time and the rest (uvicorn's
  HTTP parsing, socket I/O, the client);
* **in-process**: the core calls (``Extender.filter`` / ``Extender.prioritize``) timed without
  HTTP, plus the wire decoding and encoding around them, so the HTTP figures can be split into
  server/protocol overhead and scheduling work.

Design choices:

* Both servers run in **subprocesses** (uvicorn defaults, access log off), so the client does
  not share a GIL with them; each binds 127.0.0.1 port 0 and reports the port on stdout. They
  are terminated when the run ends (also on error). The listening socket is created with
  ``IPPROTO_TCP`` so that asyncio sets TCP_NODELAY on accepted connections, as it does for
  ``uvicorn.run(host=..., port=...)``: on a plain ``socket.socket()`` it does not, and uvicorn
  writes headers and body separately, so Nagle's algorithm and delayed ACKs add ~40 ms to
  every answer.
* One ``httpx.Client`` per server (one keep-alive connection each; TCP_NODELAY, as Go's
  client sets it), strictly sequential requests; Muster and null pods alternate, so drift and
  noise hit both alike. A warm-up precedes every measurement.
* Bodies come from a template built once per size; the per-pod name/uid substitution happens
  before the timer starts, so client-side JSON encoding is not measured.
* The latency measured is the client's view (send, server work, receive), so it includes the
  httpx client's own cost; the ``HTTP floor`` line (an empty ``GET`` on the null server) shows
  that constant share.
* Nothing is bound; Muster's cache learns one pending pod per filter call, as it would from
  kube-scheduler, and holds the node it picks for it (the sole pick, or prioritize's pick),
  so every pod sees one node's usage changed since the pod before. Every pod has the same
  shape, so Muster answers from its memos patched for that one node (``FilterMemo``, the GPU
  ranking): what the pods of one workload cost, pod after pod. The in-process table also
  times ``filter_nodes`` without the memo (what the first pod of a shape pays).
* ``--openb`` adds the openb node list (1213 nodes, ``app.sim.tracedata``) empty and full:
  every pod of the openb trace that the simulator's default policy places is loaded bound
  where it placed it, with its devices, so a 1-GPU pod fits nowhere and filter gives a
  reason for each of the 1213 nodes.

This prints figures and the project's targets next to them; it is not a pass/fail test.
Runtime is bounded by ``--requests`` and by ``--time-limit``: per size, at most that many seconds
of HTTP measurement and half as many in-process (defaults: under about two minutes in all).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import importlib.util
import json
import os
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from fastapi import FastAPI, Request, Response  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

from app.api import wire  # noqa: E402
from app.core.gpu.table import GpuTable  # noqa: E402
from app.core.model.clusterfile import load_cluster_file  # noqa: E402
from app.core.model.errors import GatewayError  # noqa: E402
from app.core.model.labels import GPU_IDS  # noqa: E402
from app.core.model.parse import pod_from_dict  # noqa: E402
from app.core.model.values import Pod  # noqa: E402
from app.core.verbs.filter import filter_nodes  # noqa: E402
from scripts.benchproc import Latency, child_server  # noqa: E402
from scripts.gen_cluster import write_cluster  # noqa: E402

if TYPE_CHECKING:
    from app.k8s.gateway import KubeGateway

#: p50 targets (ms) for filter+prioritize over HTTP, by node count; ratio target for all sizes.
TARGET_P50_MS: dict[int, float] = {500: 0.5, 5000: 1.5}
TARGET_RATIO = 1.5
DEFAULT_SIZES = (100, 500, 5000)
JSON_HEADERS = {"Content-Type": "application/json"}
SERVER_START_TIMEOUT = 60.0
APP_TIME_HEADER = "x-bench-app-ns"
VERBS = ("filter", "prioritize")
#: A soft preference that matches nothing: the probe for feasible nodes gets them all.
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
SOFT_TERM = {"weight": 1, "preference": {"matchExpressions": [
    {"key": "muster.io/bench-probe", "operator": "Exists"}]}}  # fmt: skip
BOTH = "filter+prioritize"
ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]
#: Go's net/http (kube-scheduler's client) sets TCP_NODELAY on every connection; so do we.
NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
_NAME = "@@POD_NAME@@"
_UID = "@@POD_UID@@"
_PRIORITIES = TypeAdapter(list[wire.HostPriorityDict])

# -- payloads ------------------------------------------------------------------------------

#: The pod of tests/fixtures/kube-scheduler-v1.32/filter-nodecache.json (kubectl-created, 1 GPU),
#: shipped as loadtest/pod.json for the load test too.
FIXTURE_POD: dict[str, Any] = json.loads((ROOT / "loadtest" / "pod.json").read_text())


@dataclass(frozen=True, slots=True)
class BodyTemplate:
    """An ExtenderArgs body with placeholders for the pod's name and uid."""

    text: str

    def render(self, index: int) -> tuple[bytes, str]:
        """The body for pod number ``index`` (its own name and uid, the same for every body
        rendered for that index: filter and prioritize of one pod), and that uid."""
        uid = str(uuid.UUID(int=index % (1 << 64)))
        name = f"bench-pod-{index}"
        return self.text.replace(_NAME, name).replace(_UID, uid).encode(), uid


def args_template(node_names: Sequence[str]) -> BodyTemplate:
    """kube-scheduler's filter/prioritize body (nodeCacheCapable) for all ``node_names``."""
    pod = copy.deepcopy(FIXTURE_POD)
    pod["metadata"]["name"] = _NAME
    pod["metadata"]["uid"] = _UID
    body = {"Pod": pod, "Nodes": None, "NodeNames": list(node_names)}
    return BodyTemplate(json.dumps(body, separators=(",", ":")))


def cluster_node_names(path: Path) -> list[str]:
    """Node names of a cluster file, in file order."""
    from app.core.model.clusterfile import load_cluster_file

    return [node.name for node in load_cluster_file(path)]


# -- the servers ---------------------------------------------------------------------------


def create_null_app(gateway: KubeGateway | None = None, *, sole_pick: bool = False) -> FastAPI:
    """An extender that schedules nothing but pays the same protocol cost as Muster.

    With ``gateway`` and ``sole_pick`` it is the floor of any extender on a real
    kube-scheduler (``bench_e2e``'s null system): it binds as Muster does (the Binding created
    through the same ``KubeGateway`` in a worker thread) and answers ``/readyz``; with
    ``sole_pick`` filter answers one node, the first candidate, as Muster answers a pod on its
    own with its pick alone (``app.core.policies.solepick``), so kube-scheduler skips scoring
    and prioritize as it does for Muster. Without, filter answers every candidate (the
    in-process verb benchmark)."""
    app = FastAPI(title="null extender")

    @app.post("/filter")
    async def null_filter(request: Request) -> Response:
        args = wire.ExtenderArgs.model_validate_json(await request.body())
        names = list(args.NodeNames or ())
        answer = wire.ExtenderFilterResult(NodeNames=names[:1] if sole_pick else names)
        return Response(answer.model_dump_json(), media_type="application/json")

    @app.post("/prioritize")
    async def null_prioritize(request: Request) -> Response:
        args = wire.ExtenderArgs.model_validate_json(await request.body())
        body = _PRIORITIES.dump_json([{"Host": h, "Score": 0} for h in args.NodeNames or ()])
        return Response(body, media_type="application/json")

    @app.get("/ping")
    async def ping() -> Response:
        return Response(b"")

    if gateway is not None:

        @app.post("/bind")
        async def null_bind(request: Request) -> Response:
            args = wire.ExtenderBindingArgs.model_validate_json(await request.body())
            error = ""
            try:
                await asyncio.to_thread(
                    gateway.bind, args.PodNamespace, args.PodName, args.PodUID, args.Node
                )
            except GatewayError as exc:
                error = str(exc)
            answer = wire.ExtenderBindingResult(Error=error)
            return Response(answer.model_dump_json(), media_type="application/json")

        @app.get("/readyz")
        async def ready() -> Response:
            return Response(b"ok")

    return app


def timed(app: ASGIApp) -> ASGIApp:
    """Wrap an ASGI app to report its own time per request in an ``x-bench-app-ns`` header.

    The time runs from the moment the app has the whole request body (so waiting for the
    client's bytes is excluded) to the response start: decoding, the handler and encoding the
    answer; not uvicorn's HTTP parsing or the socket write. Both servers get the same wrapper.
    """

    async def wrapper(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        start = time.perf_counter_ns()

        async def receive_timed() -> dict[str, Any]:
            nonlocal start
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body"):
                start = time.perf_counter_ns()  # the whole body is here: stop waiting time
            return message

        async def send_timed(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                elapsed = str(time.perf_counter_ns() - start).encode()
                headers = [*message.get("headers", ()), (APP_TIME_HEADER.encode(), elapsed)]
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive_timed, send_timed)

    return wrapper


def serve(
    kind: str,
    cluster: Path | None,
    fill: Path | None = None,
    kubeconfig: Path | None = None,
    sole_pick: bool = True,
) -> None:
    """Child process: serve ``kind`` ("muster" or "null") on an ephemeral loopback port;
    Muster's cache first learns the bound pods of ``fill`` (see ``fill_pods``); the null
    extender binds through the API server of ``kubeconfig`` if given."""
    import uvicorn

    if kind == "muster":
        from app.main import create_app
        from app.settings import Settings

        app = create_app(Settings(mode="standalone", cluster_file=cluster, sole_pick=sole_pick))
        if fill is not None:
            app.state.muster.cache.upsert_pods(load_fill(fill))
    elif kubeconfig is not None:
        from app.k8s.config import load_api_client
        from app.k8s.gateway import KubeGateway

        app = create_null_app(KubeGateway(load_api_client(str(kubeconfig))), sole_pick=True)
    else:
        app = create_null_app()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(timed(app), log_level="warning", access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


@contextmanager
def server_process(
    kind: str, cluster: Path | None = None, fill: Path | None = None, sole_pick: bool = True
) -> Iterator[str]:
    """Run a server in a subprocess for the duration of the block; yields its base URL."""
    args = ["--serve", kind, *(["--cluster", str(cluster)] if cluster is not None else [])]
    args += ["--fill", str(fill)] if fill is not None else []
    args += [] if sole_pick else ["--no-sole-pick"]
    with child_server(Path(__file__).resolve(), args, SERVER_START_TIMEOUT) as url:
        yield url


# -- measuring -----------------------------------------------------------------------------


def _per_verb() -> dict[str, list[int]]:
    return {verb: [] for verb in VERBS}


@dataclass
class Latencies:
    """Per-pod latencies in nanoseconds by verb: seen by the client, and inside the app."""

    client: dict[str, list[int]] = field(default_factory=_per_verb)
    app: dict[str, list[int]] = field(default_factory=_per_verb)

    def add(self, verb: str, client_ns: int, app_ns: int) -> None:
        """Record one request."""
        self.client[verb].append(client_ns)
        self.app[verb].append(app_ns)

    def count(self) -> int:
        """Pods recorded."""
        return len(self.client["filter"])


def verb_stats(samples: dict[str, list[int]]) -> dict[str, Latency]:
    """Stats per verb and for filter + prioritize of the same pod."""
    stats = {verb: Latency.of(samples[verb]) for verb in VERBS}
    both = [sum(per_pod) for per_pod in zip(*(samples[verb] for verb in VERBS), strict=True)]
    stats[BOTH] = Latency.of(both)
    return stats


def make_client(base_url: str) -> httpx.Client:
    """A keep-alive client with TCP_NODELAY, like kube-scheduler's."""
    transport = httpx.HTTPTransport(socket_options=NODELAY)
    return httpx.Client(base_url=base_url, timeout=30.0, transport=transport)


def timed_post(client: httpx.Client, path: str, body: bytes) -> tuple[int, int, bytes]:
    """POST; returns (client ns, app ns, response body). Raises on a non-200 answer."""
    start = time.perf_counter_ns()
    response = client.post(path, content=body, headers=JSON_HEADERS)
    elapsed = time.perf_counter_ns() - start
    if response.status_code != 200:
        raise RuntimeError(f"{path}: HTTP {response.status_code}: {response.text[:300]}")
    return elapsed, int(response.headers.get(APP_TIME_HEADER, 0)), response.content


def one_pod(
    client: httpx.Client,
    template: BodyTemplate,
    ranked: BodyTemplate,
    index: int,
    into: Latencies,
) -> None:
    """filter (``template``) then, as kube-scheduler does, prioritize (``ranked``: the feasible
    nodes) only if filter left more than one node (Muster's sole pick leaves one: prioritize
    is recorded as 0) for one fresh pod; records both in ``into``."""
    body, _ = template.render(index)
    f_ns, f_app, answer = timed_post(client, "/filter", body)
    if json.loads(answer).get("Error"):
        raise RuntimeError(f"/filter answered an error: {answer[:300]!r}")
    p_ns = p_app = 0
    if len(json.loads(answer)["NodeNames"]) > 1:  # one node: kube-scheduler asks no scores
        p_ns, p_app, _ = timed_post(client, "/prioritize", ranked.render(index)[0])
    into.add("filter", f_ns, f_app)
    into.add("prioritize", p_ns, p_app)


def drive(
    clients: dict[str, httpx.Client],
    template: BodyTemplate,
    ranked: BodyTemplate,
    requests: int,
    warmup: int,
    time_limit: float,
) -> dict[str, Latencies]:
    """Alternate pods between the servers: ``warmup`` unmeasured, then up to ``requests``."""
    scratch = {name: Latencies() for name in clients}
    for i in range(warmup):
        for name, client in clients.items():
            one_pod(client, template, ranked, -1 - i, scratch[name])
    results = {name: Latencies() for name in clients}
    gc.collect()
    deadline = time.monotonic() + time_limit
    for i in range(requests):
        for name, client in clients.items():
            one_pod(client, template, ranked, i, results[name])
        if time.monotonic() > deadline:
            break
    return results


def feasible_names(client: httpx.Client, template: BodyTemplate) -> list[str]:
    """The nodes the server's filter finds feasible for a probe pod (one with a soft
    preference, so that filter answers every fitting node rather than Muster's pick alone)."""
    body, _ = template.render(-1_000_000)
    args = json.loads(body)
    args["Pod"]["spec"]["affinity"] = {"nodeAffinity": {PREFERRED: [SOFT_TERM]}}
    _, _, answer = timed_post(client, "/filter", json.dumps(args).encode())
    names: list[str] = json.loads(answer)["NodeNames"]
    return names


def http_floor(client: httpx.Client, requests: int) -> Latency:
    """Round trip of an empty GET on the null server: client + uvicorn + routing only."""
    samples = []
    for _ in range(min(requests, 500) + 20):
        start = time.perf_counter_ns()
        client.get("/ping")
        samples.append(time.perf_counter_ns() - start)
    return Latency.of(samples[20:])


def measure_in_process(
    case: Case,
    template: BodyTemplate,
    ranked_template: BodyTemplate,
    requests: int,
    warmup: int,
    time_limit: float,
    sole_pick: bool = True,
) -> dict[str, Latency]:
    """Time the core verbs and the wire work around them, without HTTP."""
    from app.api.extender import _ANSWERS, _RANKINGS
    from app.services import build_services
    from app.settings import Settings

    settings = Settings(mode="standalone", cluster_file=case.cluster, sole_pick=sole_pick)
    services = build_services(settings)
    if case.fill is not None:
        services.cache.upsert_pods(load_fill(case.fill))
    extender = services.extender
    ranked = json.loads(ranked_template.text)["NodeNames"]
    stages: dict[str, list[int]] = {
        k: [] for k in ("decode", "filter", "prioritize", "encode", "uncached")
    }
    clock = time.perf_counter_ns
    deadline = time.monotonic() + time_limit
    for i in range(-warmup, requests):
        body, _ = template.render(i)
        t0 = clock()
        args = wire.ExtenderArgs.model_validate_json(body)
        pod = pod_from_dict(args.Pod, "Pod")
        t1 = clock()
        result = extender.filter(pod, args.NodeNames)
        t2 = clock()
        scores = extender.prioritize(pod, ranked) if len(result.feasible) > 1 else None
        t3 = clock()
        # What the handlers do (NodeNames mode; memoised like the answers they encode).
        _ANSWERS.encode(result, False)
        if scores is not None:
            _RANKINGS.encode(scores)
        t4 = clock()
        # What the first pod after a change pays: the decision without the extender's memo.
        filter_nodes(services.cache.view(), pod, args.NodeNames or [])
        t5 = clock()
        if i >= 0:
            times = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)
            for key, ns in zip(stages, times, strict=True):
                stages[key].append(ns)
            if time.monotonic() > deadline:
                break
    stats = {key: Latency.of(values) for key, values in stages.items()}
    both = [f + p for f, p in zip(stages["filter"], stages["prioritize"], strict=True)]
    stats[BOTH] = Latency.of(both)
    return stats


# -- one size, the whole run ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Case:
    """One cluster to measure on: a cluster file, bound pods to load first (``fill``), and
    how the report names it."""

    label: str
    nodes: int
    cluster: Path
    fill: Path | None = None


@dataclass
class SizeResult:
    """Everything measured for one case; stats are keyed server -> verb."""

    label: str
    nodes: int
    feasible: int
    http: dict[str, dict[str, Latency]]
    app: dict[str, dict[str, Latency]]
    core: dict[str, Latency]

    @property
    def pods(self) -> int:
        """Pods measured over HTTP (per server)."""
        return self.http["muster"]["filter"].count


def generated_case(nodes: int, workdir: Path) -> Case:
    """An empty generated cluster of ``nodes`` nodes (``gen_cluster``)."""
    return Case(str(nodes), nodes, write_cluster(nodes, workdir / f"nodes-{nodes}.yaml", seed=0))


def openb_cases(workdir: Path, seed: int = 0) -> list[Case]:
    """The openb node list (1213 GPU nodes) empty, and full: every pod of the openb trace
    (arrival order of ``seed``) the simulator's default policy places, bound where it placed
    it with the devices it chose (96 % of the GPUs allocated; most nodes then fail a 1-GPU
    pod, each with its own reason). Needs the openb trace (``app.sim.tracedata``)."""
    from app.sim.openb import DEFAULT_NODES, DEFAULT_TRACE, arrival_order, load_trace
    from app.sim.tracedata import openb_dir
    from scripts.openb_pods import arrival_identity, pod_json, simulate_file_order

    folder = openb_dir()
    cluster = folder / DEFAULT_NODES
    nodes = load_cluster_file(cluster)
    trace = load_trace(folder / DEFAULT_TRACE)
    arrivals = arrival_order(trace, GpuTable.from_nodes(nodes).gpu_capacity, seed).tolist()
    sim = simulate_file_order(nodes, trace, arrivals)
    bound = []
    for k, (i, node, devices) in enumerate(zip(arrivals, sim.nodes, sim.devices, strict=True)):
        if node is None:
            continue
        name, uid = arrival_identity(k, trace, i)
        pod = pod_json(trace, i, name, uid)
        pod["spec"]["nodeName"] = node
        pod["status"]["phase"] = "Running"
        if devices:
            notes = pod["metadata"].setdefault("annotations", {})
            notes[GPU_IDS] = ",".join(map(str, devices))
        bound.append(pod)
    fill = workdir / "openb-full.json"
    fill.write_text(json.dumps(bound, separators=(",", ":")))
    count = len(nodes)
    return [
        Case(f"{count} openb", count, cluster),
        Case(f"{count} openb full", count, cluster, fill),
    ]


def load_fill(path: Path) -> list[Pod]:
    """The bound pods of a ``Case.fill`` file."""
    return [pod_from_dict(item) for item in json.loads(path.read_text())]


def measure_size(
    case: Case,
    null_url: str,
    requests: int,
    warmup: int,
    time_limit: float,
    sole_pick: bool = True,
) -> SizeResult:
    """Start Muster on ``case`` and measure both servers; prioritize is asked about the nodes
    Muster's filter lets through, as kube-scheduler does (both servers get the same body), and
    only when filter left more than one."""
    names = cluster_node_names(case.cluster)
    template = args_template(names)
    with ExitStack() as stack:
        muster_url = stack.enter_context(
            server_process("muster", case.cluster, case.fill, sole_pick)
        )
        clients = {
            "muster": stack.enter_context(make_client(muster_url)),
            "null": stack.enter_context(make_client(null_url)),
        }
        feasible = feasible_names(clients["muster"], template)
        ranked = args_template(feasible)
        latencies = drive(clients, template, ranked, requests, warmup, time_limit)
    core = measure_in_process(case, template, ranked, requests, warmup, time_limit / 2, sole_pick)
    http = {server: verb_stats(lat.client) for server, lat in latencies.items()}
    app = {server: verb_stats(lat.app) for server, lat in latencies.items()}
    return SizeResult(case.label, case.nodes, len(feasible), http, app, core)


def run(
    sizes: Sequence[int],
    requests: int,
    warmup: int = 100,
    time_limit: float = 25.0,
    out: Callable[[str], None] = print,
    openb: bool = False,
    sole_pick: bool = True,
) -> tuple[list[SizeResult], Latency]:
    """Measure every size (and, with ``openb``, the openb cases) and print the tables;
    returns the results and the HTTP floor."""
    results: list[SizeResult] = []
    started = time.monotonic()
    out(environment())
    out(f"Muster's sole pick: {'on' if sole_pick else 'off (--no-sole-pick)'}")
    with tempfile.TemporaryDirectory(prefix="muster-bench-") as tmp, server_process("null") as url:
        with make_client(url) as client:
            floor = http_floor(client, requests)
        cases = [generated_case(nodes, Path(tmp)) for nodes in sizes]
        if openb:
            cases += openb_cases(Path(tmp))
        for case in cases:
            out(f"... measuring {case.label} nodes")
            results.append(measure_size(case, url, requests, warmup, time_limit, sole_pick))
    for line in report(results, floor, warmup):
        out(line)
    out(f"total run time {time.monotonic() - started:.0f} s")
    return results, floor


# -- the report ----------------------------------------------------------------------------


def _target_note(label: str, verb: str, p50: float) -> str:
    target = TARGET_P50_MS.get(int(label)) if label.isdigit() else None
    if verb != BOTH or target is None:
        return ""
    return f"p50 <= {target:g} ms: {'met' if p50 <= target else 'MISSED'}"


def _ratio_note(verb: str, r50: float, r99: float) -> str:
    if verb != BOTH:
        return ""
    ok = r50 <= TARGET_RATIO and r99 <= TARGET_RATIO
    return f"ratio <= {TARGET_RATIO:g}: {'met' if ok else 'MISSED'}"


def comparison_table(
    results: Sequence[SizeResult],
    pick: Callable[[SizeResult], dict[str, dict[str, Latency]]],
    with_targets: bool,
) -> list[str]:
    """Muster vs null per size and verb: p50/p99 and their ratios (and target notes)."""
    head = (
        f"{'nodes':>15} {'verb':<18} {'muster p50':>10} {'p99':>7} {'null p50':>9} {'p99':>7}"
        f" {'ratio p50':>9} {'p99':>6}  {'targets' if with_targets else ''}"
    )
    lines = [head.rstrip(), "-" * 89]
    for res in results:
        stats = pick(res)
        for verb in (*VERBS, BOTH):
            m, n = stats["muster"][verb], stats["null"][verb]
            r50, r99 = m.p50 / n.p50, m.p99 / n.p99
            notes = (_target_note(res.label, verb, m.p50), _ratio_note(verb, r50, r99))
            tail = "; ".join(x for x in notes if x) if with_targets else ""
            line = (
                f"{res.label:>15} {verb:<18} {m.p50:>10.3f} {m.p99:>7.3f} {n.p50:>9.3f}"
                f" {n.p99:>7.3f} {r50:>9.2f} {r99:>6.2f}  {tail}"
            )
            lines.append(line.rstrip())
    return lines


def core_table(results: Sequence[SizeResult]) -> list[str]:
    """The in-process table: wire decode, core filter/prioritize, wire encode."""
    head = f"{'nodes':>15} {'stage (in-process, no HTTP)':<34} {'p50':>8} {'p99':>8}"
    lines = [head, "-" * len(head)]
    labels = {
        "decode": "decode 1 body (pydantic + Pod)",
        "filter": "Extender.filter",
        "prioritize": "Extender.prioritize",
        BOTH: "Extender.filter + prioritize",
        "encode": "encode both answers",
        "uncached": "filter_nodes, no memo (1st of shape)",
    }
    for res in results:
        for key, label in labels.items():
            s = res.core[key]
            lines.append(f"{res.label:>15} {label:<34} {s.p50:>8.3f} {s.p99:>8.3f}")
    return lines


def environment() -> str:
    """What the figures depend on: uvicorn's HTTP parser and loop, CPUs, load."""
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"uvicorn http={http} loop={loop}; Python {sys.version.split()[0]}; "
        f"{os.cpu_count()} CPUs; load average {load}"
    )


def report(results: Sequence[SizeResult], floor: Latency, warmup: int) -> list[str]:
    """All result lines."""
    counts = ", ".join(f"{r.label} nodes: {r.pods} pods, {r.feasible} feasible" for r in results)
    return [
        "",
        "Muster extender benchmark. Pod requests 1 GPU; NodeNames = all nodes; times in ms.",
        f"measured: {counts} (after {warmup} warm-up pods)",
        environment(),
        "",
        "1. Over HTTP, as the client sees it (sequential keep-alive httpx; uvicorn subprocesses)",
        f"   HTTP floor, empty GET on the null server: p50 {floor.p50:.3f}, p99 {floor.p99:.3f}",
        *comparison_table(results, lambda r: r.http, with_targets=True),
        "",
        "2. Inside the server app (whole body received -> response start: decode, handler,",
        "   encode; excludes uvicorn's HTTP parsing, socket I/O and the client)",
        *comparison_table(results, lambda r: r.app, with_targets=False),
        "",
        "3. In-process, no HTTP (the same wire models and Extender calls, timed directly)",
        *core_table(results),
        "",
        "targets: filter+prioritize p50 <= "
        + ", ".join(f"{v:g} ms at {k} nodes" for k, v in TARGET_P50_MS.items())
        + f"; Muster/null ratio <= {TARGET_RATIO:g} (figures, not a pass/fail test)",
    ]


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers: {text!r}") from exc
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("sizes must be positive integers")
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="pods per size (2000)")
    parser.add_argument(
        "--sizes", type=_sizes, default=list(DEFAULT_SIZES), help="node counts (100,500,5000)"
    )
    parser.add_argument("--warmup", type=int, default=100, help="warm-up pods per size (100)")
    parser.add_argument(
        "--time-limit", type=float, default=25.0, help="max seconds of HTTP timing per size (25)"
    )
    parser.add_argument(
        "--openb",
        action="store_true",
        help="also the openb node list (1213 nodes), empty and full (needs the openb trace)",
    )
    parser.add_argument(
        "--no-sole-pick",
        action="store_true",
        help="run Muster with --no-sole-pick (filter answers every fitting node; prioritize "
        "is then asked for every pod)",
    )
    parser.add_argument("--serve", choices=("muster", "null"), help=argparse.SUPPRESS)
    parser.add_argument("--cluster", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--fill", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.cluster, args.fill, args.kubeconfig, not args.no_sole_pick)
        return 0
    if args.requests < 1:
        parser.error("--requests must be at least 1")
    run(args.sizes, args.requests, args.warmup, args.time_limit, openb=args.openb,
        sole_pick=not args.no_sole_pick)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
