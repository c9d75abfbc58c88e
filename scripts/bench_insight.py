"""Benchmark ``/explain`` and ``/whatif`` on the openb cluster against baselines of the same run.

Usage::

    .venv/bin/python scripts/bench_insight.py                 # 1213 nodes, 10 000 pods
    .venv/bin/python scripts/bench_insight.py --nodes 100 --pods 600 --calls 50

The cluster is the openb node list (``app.sim.tracedata``; ``--nodes`` takes its first N).
Muster's cache knows ``--pods`` pods: ``--bound`` of them (default 80 %) are openb trace pods
in arrival order (``app.sim.openb.arrival_order``), bound where the trace simulator's loop put
them (``scripts/openb_pods.simulate_file_order``), running for a while with declared
runtimes; the rest are pending gangs of 2 to 16 members of 1 to 8 GPUs. One planner cycle
runs, so some gangs are planned, one holds room at the head of the line and the rest wait.

Measured, each over ``--calls`` calls (p50/p99, milliseconds):

* **in-process**: ``planner.look()`` plus ``explain_gang`` / ``explain_pod`` on a waiting gang
  (a different one each call), and ``planner.look()`` plus ``what_if`` on a gang of 8 pods
  (shapes vary per call), after one pass over every waiting gang (the steady state of an
  unchanged cluster: what explain keeps per snapshot is there). Baseline: ``planner.look()``
  alone, the snapshot any answer reads. **cold** rows (``--calls`` / 3 each): the same
  calls, each right after the cache changed (a pending pod comes and goes), so nothing kept per
  snapshot helps: the cost after most events in a live cluster. **running** rows (as many):
  each call right after a running pod changed without moving (its annotations: a new pod
  object, as a status or label update makes), so what is derived from the running pods must
  be checked again. **start/end** rows (as many): each call right after a running pod ended
  (it goes) or started (it comes back): node usage changes, so what is derived from the
  running pods is found again: the cost after a pod starts or ends.
* **HTTP** (both servers are uvicorn subprocesses, same client): ``GET /explain/...`` and
  ``POST /whatif`` on a Muster server whose cache holds the same pods, against a *null*
  server that answers the same routes with a canned answer of the same size (taken from
  Muster), parsed and serialised through the same pydantic models: the protocol's own price.
  Both run as ``muster serve`` does once loaded (heap frozen, 0.5 ms thread switch interval);
  Muster's planner loop runs its cycles meanwhile, as in a live server. A first pass asks
  about every waiting gang once (not measured), as the in-process rows do.

Targets (issue 13): explain <= 20 ms p99, what-if <= 100 ms p99. Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from fastapi import FastAPI, Request  # noqa: E402

from app.api.errors import parse_body  # noqa: E402
from app.api.explain import ExplanationOut, WhatIfOut, WhatIfRequest  # noqa: E402
from app.core.cycle.planner import Planner  # noqa: E402
from app.core.gpu.table import GpuTable  # noqa: E402
from app.core.insight.explain import explain_gang, explain_pod  # noqa: E402
from app.core.insight.whatif import proposal_from, what_if  # noqa: E402
from app.core.model.clusterfile import load_cluster_file  # noqa: E402
from app.core.model.parse import pod_from_dict  # noqa: E402
from app.core.model.runtime import EXPECTED_RUNTIME  # noqa: E402
from app.core.model.values import Node, Pod  # noqa: E402
from app.core.state.cache import ClusterCache  # noqa: E402
from app.sim.openb import DEFAULT_NODES, DEFAULT_TRACE, arrival_order, load_trace  # noqa: E402
from app.sim.tracedata import openb_dir  # noqa: E402
from scripts.bench_extender import make_client  # noqa: E402
from scripts.benchproc import Latency, child_server, serve_on_loopback  # noqa: E402
from scripts.openb_pods import arrival_identity, pod_json, simulate_file_order  # noqa: E402

NAMESPACE = "bench"
TARGET_P99_MS = {"explain gang": 20.0, "explain pod": 20.0, "what-if": 100.0,
                 "explain gang, cold": 20.0, "explain pod, cold": 20.0,
                 "what-if, cold": 100.0, "explain gang, running": 20.0,
                 "explain pod, running": 20.0, "what-if, running": 100.0,
                 "explain gang, start/end": 20.0, "explain pod, start/end": 20.0,
                 "what-if, start/end": 100.0}  # fmt: skip
START_TIMEOUT = 120.0
#: Gang shapes (members, GPUs each), cycled.
SHAPES = ((2, 8), (4, 4), (8, 1), (16, 2), (4, 8), (8, 2))
SEED = 0


# -- the workload (built the same way in this process and in the Muster server) -------------


@dataclass(frozen=True)
class Workload:
    """The nodes, the pods the cache knows, and the pending gangs' names."""

    nodes: list[Node]
    pods: list[Pod]
    gangs: list[str]


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_workload(nodes_path: Path, trace_path: Path, node_count: int, pods: int,
                   bound: int, now: float) -> Workload:  # fmt: skip
    """``bound`` trace pods placed by the trace simulator, then pending gangs up to ``pods``."""
    nodes = load_cluster_file(nodes_path)[:node_count]
    trace = load_trace(trace_path)
    arrivals = arrival_order(trace, GpuTable.from_nodes(nodes).gpu_capacity, SEED).tolist()
    arrivals = arrivals[: 2 * bound]  # the loop places in order: a prefix is placed alike
    sim = simulate_file_order(nodes, trace, arrivals)
    out: list[Pod] = []
    for k, (i, node) in enumerate(zip(arrivals, sim.nodes, strict=True)):
        if len(out) >= bound:
            break
        if node is None:
            continue
        name, uid = arrival_identity(k, trace, i)
        data = pod_json(trace, i, name, uid)
        data["metadata"]["namespace"] = NAMESPACE
        # Started up to 30 minutes ago, each expected to run 30 minutes to 3 hours more.
        data["metadata"].setdefault("annotations", {})[EXPECTED_RUNTIME] = f"{3600 + k % 9000}s"
        data["metadata"]["creationTimestamp"] = _stamp(now - 3600 - k)
        data["spec"]["nodeName"] = node
        data["status"] = {"phase": "Running", "startTime": _stamp(now - k % 1800)}
        out.append(pod_from_dict(data))
    gangs: list[str] = []
    g = 0
    while len(out) < pods:
        size, gpus = SHAPES[g % len(SHAPES)]
        size = min(size, pods - len(out))
        name = f"job-{g}"
        gangs.append(name)
        for m in range(size):
            out.append(pod_from_dict(_member(name, m, size, gpus, now - 1800 + g)))
        g += 1
    return Workload(nodes, out, gangs)


def _member(gang: str, index: int, size: int, gpus: int, created: float) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{gang}-{index}",
            "namespace": NAMESPACE,
            "uid": f"uid-{gang}-{index}",
            "labels": {"muster.io/pod-group": gang, "muster.io/min-member": str(size)},
            "annotations": {EXPECTED_RUNTIME: "1h"},
            "creationTimestamp": _stamp(created),
        },
        "spec": _spec(gpus),
        "status": {"phase": "Pending"},
    }


def _spec(gpus: int) -> dict[str, Any]:
    requests = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "schedulerName": "muster",
        "containers": [{"name": "main", "resources": {"requests": requests, "limits": requests}}],
    }


def whatif_body(k: int) -> dict[str, Any]:
    """What-if request ``k``: a gang of 8 pods, GPUs per pod cycling through 1, 2, 4, 8."""
    return {
        "namespace": NAMESPACE,
        "name": f"whatif-{k}",
        "replicas": 8,
        "pod": {"metadata": {"annotations": {EXPECTED_RUNTIME: "30m"}},
                "spec": _spec((1, 2, 4, 8)[k % 4])},  # fmt: skip
    }


def fill(cache: ClusterCache, workload: Workload) -> None:
    """Load ``workload`` into ``cache``."""
    cache.upsert_nodes(workload.nodes)
    cache.upsert_pods(workload.pods)
    cache.mark_synced()


# -- in-process ------------------------------------------------------------------------------


def _ns(action: Callable[[], object]) -> int:
    start = time.perf_counter_ns()
    action()
    return time.perf_counter_ns() - start


def measure_in_process(planner: Planner, waiting: Sequence[str], calls: int) -> dict[str, Latency]:
    """Latencies of look (baseline), explain gang and pod, and what-if; ``waiting`` gangs."""
    samples: dict[str, list[int]] = {"baseline: look()": [], "explain gang": [],
                                     "explain pod": [], "what-if": []}  # fmt: skip
    gc.collect()
    for k in range(calls):
        gang = waiting[k % len(waiting)]
        samples["baseline: look()"].append(_ns(planner.look))
        samples["explain gang"].append(
            _ns(lambda: explain_gang(planner.look(), NAMESPACE, gang))  # noqa: B023
        )
        samples["explain pod"].append(
            _ns(lambda: explain_pod(planner.look(), NAMESPACE, f"{gang}-0"))  # noqa: B023
        )
        body = whatif_body(k)

        def ask() -> None:
            outlook = planner.look()
            what_if(outlook, proposal_from(body, scheduler_name="muster", now=outlook.now))  # noqa: B023

        samples["what-if"].append(_ns(ask))
    return {name: Latency.of(values) for name, values in samples.items()}


def measure_after_change(
    cache: ClusterCache,
    planner: Planner,
    waiting: Sequence[str],
    calls: int,
    now: float,
    *,
    running: Sequence[str] = (),
    moves: bool = False,
) -> dict[str, Latency]:
    """Explain of a gang, of a pod, and what-if, each call first after the cache changed (a
    pending pod comes and goes: rows ``..., cold``), so nothing kept from an earlier snapshot
    helps: the cost after most events in a live cluster. With ``running`` (uids of running
    pods), the change is instead one of them updated (rows ``..., running``); with ``moves``
    too, one of them ends or (the next change) starts again (rows ``..., start/end``)."""
    suffix = ("start/end" if moves else "running") if running else "cold"
    gone: list[Pod] = []
    names = [f"explain gang, {suffix}", f"explain pod, {suffix}", f"what-if, {suffix}"]
    samples: dict[str, list[int]] = {name: [] for name in names}
    gc.collect()
    step = 0

    def change() -> None:
        nonlocal step
        if gone:
            cache.upsert_pods([gone.pop()])  # it starts again, where it ran
        elif moves:
            pod = cache.pod(running[(step * 7919) % len(running)])
            assert pod is not None
            cache.delete_pod(pod.uid)
            gone.append(pod)
        elif running:
            pod = cache.pod(running[(step * 7919) % len(running)])
            assert pod is not None
            cache.upsert_pods([replace(pod, annotations={**pod.annotations, "step": str(step)})])
        else:
            toggle = pod_from_dict(_member(f"toggle-{step}", 0, 1, 1, now))
            cache.upsert_pods([toggle])
            cache.delete_pod(toggle.uid)
        step += 1

    for k in range(calls):
        gang = waiting[(k * 37) % len(waiting)]
        change()
        samples[names[0]].append(
            _ns(lambda: explain_gang(planner.look(), NAMESPACE, gang))  # noqa: B023
        )
        change()
        samples[names[1]].append(
            _ns(lambda: explain_pod(planner.look(), NAMESPACE, f"{gang}-0"))  # noqa: B023
        )
        change()
        body = whatif_body(k)

        def ask() -> None:
            outlook = planner.look()
            what_if(outlook, proposal_from(body, scheduler_name="muster", now=outlook.now))  # noqa: B023

        samples[names[2]].append(_ns(ask))
    if gone:
        cache.upsert_pods(gone)
    return {name: Latency.of(values) for name, values in samples.items()}


# -- the servers -----------------------------------------------------------------------------


def serve(kind: str, args: argparse.Namespace) -> None:
    """Child process: the Muster server holding the workload, or the null server answering
    with the canned answers in ``--canned``."""
    if kind == "muster":
        from app.main import create_app
        from app.settings import Settings

        app = create_app(Settings(mode="standalone", cluster_file=args.cluster))
        services = app.state.muster
        workload = build_workload(args.cluster, args.trace, args.nodes, args.pods, args.bound,
                                  args.now)  # fmt: skip
        services.cache.upsert_pods(workload.pods)
        services.extender.planner.cycle(force=True)
    else:
        app = null_app(json.loads(Path(args.canned).read_text()))
    serve_on_loopback(app, as_serve=True)


def null_app(canned: dict[str, Any]) -> FastAPI:
    """The same routes as Muster's, answering ``canned`` answers through the same models."""
    app = FastAPI(title="null insight")

    @app.get("/explain/{namespace}/gang/{name}", response_model=ExplanationOut)
    def gang(namespace: str, name: str) -> ExplanationOut:
        return ExplanationOut.model_validate(canned["gang"])

    @app.get("/explain/{namespace}/{pod}", response_model=ExplanationOut)
    def pod(namespace: str, pod: str) -> ExplanationOut:
        return ExplanationOut.model_validate(canned["pod"])

    @app.post("/whatif", response_model=WhatIfOut)
    async def whatif(request: Request) -> WhatIfOut:
        parse_body(WhatIfRequest, await request.body())
        return WhatIfOut.model_validate(canned["whatif"])

    return app


@contextmanager
def server(kind: str, args: Sequence[str]) -> Iterator[str]:
    """A child server of ``kind``; yields its base URL."""
    with child_server(Path(__file__).resolve(), ["--serve", kind, *args], START_TIMEOUT) as url:
        yield url


def _get(client: httpx.Client, path: str) -> tuple[int, bytes]:
    start = time.perf_counter_ns()
    response = client.get(path)
    elapsed = time.perf_counter_ns() - start
    if response.status_code != 200:
        raise RuntimeError(f"{path}: HTTP {response.status_code}: {response.text[:300]}")
    return elapsed, response.content


def _post(client: httpx.Client, path: str, body: bytes) -> tuple[int, bytes]:
    start = time.perf_counter_ns()
    response = client.post(path, content=body, headers={"Content-Type": "application/json"})
    elapsed = time.perf_counter_ns() - start
    if response.status_code != 200:
        raise RuntimeError(f"{path}: HTTP {response.status_code}: {response.text[:300]}")
    return elapsed, response.content


def measure_http(clients: dict[str, httpx.Client], waiting: Sequence[str], calls: int,
                 warmup: int) -> dict[str, dict[str, Latency]]:  # fmt: skip
    """Per server, per call kind: client-side latencies (servers alternate per call)."""
    samples = {s: {"explain gang": [], "explain pod": [], "what-if": []} for s in clients}
    bodies = [json.dumps(whatif_body(k)).encode() for k in range(4)]
    for k in range(warmup + calls):
        gang = waiting[k % len(waiting)]
        for server_name, client in clients.items():
            took = {
                "explain gang": _get(client, f"/explain/{NAMESPACE}/gang/{gang}")[0],
                "explain pod": _get(client, f"/explain/{NAMESPACE}/{gang}-0")[0],
                "what-if": _post(client, "/whatif", bodies[k % 4])[0],
            }
            if k >= warmup:
                for name, ns in took.items():
                    samples[server_name][name].append(ns)
    return {s: {n: Latency.of(v) for n, v in per.items()} for s, per in samples.items()}


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Report:
    """What ``run`` measured."""

    nodes: int
    pods: int
    bound: int
    gangs: int
    waiting: int
    categories: dict[str, int]
    in_process: dict[str, Latency]
    http: dict[str, dict[str, Latency]]


def run(nodes: int, pods: int, bound: int, calls: int, warmup: int, *,
        http: bool = True) -> Report:  # fmt: skip
    """Build the workload, measure in process and (``http``) over HTTP, and print the table."""
    folder = openb_dir()
    nodes_path, trace_path = folder / DEFAULT_NODES, folder / DEFAULT_TRACE
    now = time.time()
    workload = build_workload(nodes_path, trace_path, nodes, pods, bound, now)
    cache = ClusterCache()
    fill(cache, workload)
    planner = Planner(cache, scheduler_name="muster")
    planner.cycle(force=True)
    outlook = planner.look()
    answers = {g: explain_gang(outlook, NAMESPACE, g) for g in workload.gangs}
    waiting = [g for g, a in answers.items() if a.state == "waiting"] or workload.gangs
    categories: dict[str, int] = {}
    for answer in answers.values():
        key = answer.category if answer.state == "waiting" else answer.state
        categories[key] = categories.get(key, 0) + 1
    after_change = measure_after_change(cache, planner, waiting, max(calls // 3, 3), now)
    running = [p.uid for p in workload.pods if p.node_name]
    after_change |= measure_after_change(cache, planner, waiting, max(calls // 3, 3), now,
                                         running=running)  # fmt: skip
    after_change |= measure_after_change(cache, planner, waiting, max(calls // 3, 3), now,
                                         running=running, moves=True)  # fmt: skip
    measure_in_process(planner, waiting, max(warmup, len(waiting)))  # every answer kept once
    in_process = measure_in_process(planner, waiting, calls)
    in_process.update(after_change)
    report = Report(len(workload.nodes), len(workload.pods),
                    sum(1 for p in workload.pods if p.node_name), len(workload.gangs),
                    len(waiting), categories, in_process, {})  # fmt: skip
    if http:
        report.http = _http(nodes_path, trace_path, nodes, pods, bound, now, waiting, calls,
                            max(warmup, len(waiting)))  # fmt: skip
    for line in lines(report):
        print(line)
    return report


def _http(nodes_path: Path, trace_path: Path, nodes: int, pods: int, bound: int, now: float,
          waiting: Sequence[str], calls: int, warmup: int) -> dict[str, dict[str, Latency]]:
    """Both servers in subprocesses, the null one answering what Muster answered first."""
    common = ["--cluster", str(nodes_path), "--trace", str(trace_path), "--nodes", str(nodes),
              "--pods", str(pods), "--bound", str(bound), "--now", repr(now)]  # fmt: skip
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        muster = stack.enter_context(make_client(stack.enter_context(server("muster", common))))
        gang = waiting[0]
        canned = {
            "gang": json.loads(_get(muster, f"/explain/{NAMESPACE}/gang/{gang}")[1]),
            "pod": json.loads(_get(muster, f"/explain/{NAMESPACE}/{gang}-0")[1]),
            "whatif": json.loads(_post(muster, "/whatif", json.dumps(whatif_body(0)).encode())[1]),
        }
        path = Path(tmp) / "canned.json"
        path.write_text(json.dumps(canned))
        null = stack.enter_context(
            make_client(stack.enter_context(server("null", ["--canned", str(path)])))
        )
        return measure_http({"muster": muster, "null": null}, waiting, calls, warmup)


def lines(r: Report) -> list[str]:
    """The printed report."""
    out = [
        f"explain / what-if: openb cluster, {r.nodes} nodes; {r.pods} pods known "
        f"({r.bound} bound, {r.pods - r.bound} pending in {r.gangs} gangs; "
        f"{r.waiting} gangs waiting)",
        "gangs by state or first blocker: "
        + ", ".join(f"{k} {v}" for k, v in sorted(r.categories.items())),
        "",
        "In process (ms; each call includes planner.look())",
        f"{'':20} {'p50':>8} {'p99':>8} {'max':>8} {'p99/base':>9} {'target p99':>11}",
    ]
    base = r.in_process["baseline: look()"]
    for name, stat in r.in_process.items():
        target = TARGET_P99_MS.get(name)
        note = f"{target:9.0f} {'met' if stat.p99 <= target else 'MISSED'}" if target else ""
        out.append(f"{name:20} {stat.p50:8.2f} {stat.p99:8.2f} {stat.max:8.2f} "
                   f"{stat.p99 / base.p99:9.1f} {note:>11}")  # fmt: skip
    if r.http:
        out += ["", "Over HTTP (ms, client side; null = same routes, canned answers, same models)",
                f"{'':20} {'muster p50':>10} {'muster p99':>10} {'null p50':>9} "
                f"{'null p99':>9} {'p99 ratio':>9} {'target p99':>11}"]  # fmt: skip
        for name in r.http["muster"]:
            m, n = r.http["muster"][name], r.http["null"][name]
            target = TARGET_P99_MS[name]
            note = f"{target:.0f} {'met' if m.p99 <= target else 'MISSED'}"
            out.append(f"{name:20} {m.p50:10.2f} {m.p99:10.2f} {n.p50:9.2f} {n.p99:9.2f} "
                       f"{m.p99 / n.p99:9.1f} {note:>11}")  # fmt: skip
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000, help="first N openb nodes")
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--bound", type=int, default=None, help="default: 80%% of --pods")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--no-http", action="store_true")
    parser.add_argument("--serve", choices=("muster", "null"), help=argparse.SUPPRESS)
    parser.add_argument("--cluster", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--trace", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--now", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--canned", help=argparse.SUPPRESS)
    parser.add_argument(
        "--against",
        type=Path,
        help="another copy of the repository (say main's: git archive main | tar -x -C DIR): "
        "its own bench_insight.py runs first with the same arguments, then this one; both "
        "tables are printed, and each row's p50 and p99 side by side with their ratio",
    )
    args = parser.parse_args(argv)
    if args.bound is None:
        args.bound = args.pods * 4 // 5
    if args.serve:
        serve(args.serve, args)
        return 0
    if args.against is None:
        run(args.nodes, args.pods, args.bound, args.calls, args.warmup, http=not args.no_http)
        return 0
    sizes = ["--nodes", str(args.nodes), "--pods", str(args.pods), "--bound", str(args.bound),
             "--calls", str(args.calls), "--warmup", str(args.warmup)]  # fmt: skip
    print(f"== {args.against} (load average {_load()} at its start)")
    theirs = against(args.against, [*sizes, *(["--no-http"] if args.no_http else [])])
    print(theirs, end="")
    print(f"== this tree, {ROOT} (load average {_load()} at its start)")
    report = run(args.nodes, args.pods, args.bound, args.calls, args.warmup,
                 http=not args.no_http)  # fmt: skip
    print(f"(load average {_load()} at the end)")
    for line in compared(report, table_rows(theirs)):
        print(line)
    return 0


def against(tree: Path, arguments: Sequence[str]) -> str:
    """The output of ``tree``'s own benchmark given ``arguments``; it reads the openb trace
    this process reads."""
    env = {**os.environ, "MUSTER_OPENB_DIR": str(openb_dir())}
    script = tree / "scripts" / "bench_insight.py"
    done = subprocess.run([sys.executable, str(script), *arguments], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"{script} failed:\n{done.stderr[-2000:]}")
    return done.stdout


_ROW = re.compile(r"^(?P<name>\S.*?)\s+(?P<p50>\d+\.\d+)\s+(?P<p99>\d+\.\d+)\s+\d+\.\d+\s+\d+\.\d+")


def table_rows(output: str) -> dict[str, tuple[float, float]]:
    """Per row of the printed tables: p50 and p99 (ms; Muster's over HTTP, the row named
    ``HTTP`` and its name)."""
    rows: dict[str, tuple[float, float]] = {}
    prefix = None
    for line in output.splitlines():
        if line.startswith(("In process", "Over HTTP")):
            prefix = "" if line.startswith("In process") else "HTTP "
        elif not line.strip():
            prefix = None
        elif prefix is not None and (found := _ROW.match(line)):
            rows[prefix + found["name"]] = (float(found["p50"]), float(found["p99"]))
    return rows


def compared(report: Report, theirs: dict[str, tuple[float, float]]) -> list[str]:
    """Each row measured here and in the other tree, with the ratios."""
    out = ["", "This tree against the other (ms; ratio = this / other)",
           f"{'':24} {'this p50':>9} {'other p50':>9} {'ratio':>6} {'this p99':>9} "
           f"{'other p99':>9} {'ratio':>6}"]  # fmt: skip
    ours = dict(report.in_process)
    ours.update({f"HTTP {name}": stat for name, stat in report.http.get("muster", {}).items()})
    for name, stat in ours.items():
        if name not in theirs:
            continue
        p50, p99 = theirs[name]
        out.append(f"{name:24} {stat.p50:9.2f} {p50:9.2f} {stat.p50 / p50:6.2f} "
                   f"{stat.p99:9.2f} {p99:9.2f} {stat.p99 / p99:6.2f}")  # fmt: skip
    return out


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
