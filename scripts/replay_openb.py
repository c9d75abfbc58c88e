"""Replay the openb trace through a live ``muster serve`` over HTTP and check it against the
simulator.

Usage::

    .venv/bin/python scripts/replay_openb.py                   # default trace, seed 0, all pods
    .venv/bin/python scripts/replay_openb.py --limit 400 --json

What it does:

1. Starts ``muster serve --cluster <nodes csv>`` (the ``muster`` command's own entry point,
   ``app.cli.main``) as a child process on a free 127.0.0.1 port and waits for ``/readyz``;
   also a "null" extender child (``bench_extender.create_null_app`` plus a ``/bind`` that
   only parses its body) for the baseline. Both are stopped at the end, also on error.
2. Computes the arrival order of ``--seed`` (``app.sim.openb.arrival_order``: sorted by name,
   shuffled, inflated to 130 % of GPU capacity), cut to ``--limit`` pods.
3. Runs the simulator loop in process on the nodes in FILE order (the server's row order;
   ``app.sim.openb.simulate`` shuffles rows per seed for its tie-breaks, which the live server
   does not): ``default_policy()``, each ask observed once before it is ranked, one attempt
   per pod, ``table.apply`` of the pick.
4. Replays the same arrivals as kube-scheduler would with ``nodeCacheCapable: true`` and the
   GPUs managed by the extender: ``POST /filter`` with every node name; if no node is
   feasible the pod is dropped (one attempt, as in the experiment); with exactly one feasible
   node kube-scheduler skips scoring and binds it; otherwise ``POST /prioritize`` with the
   feasible names and the pod goes to the highest score (the first in feasible-list order
   among equals); then ``POST /bind``. Every body is sent to the null server too, right
   after Muster's, so drift and noise hit both alike.
5. Compares, pod by pod, the node the server bound with the simulator's pick and the device
   indices it wrote (``/debug/pods``) with the simulator's; the final allocated GPU % of
   capacity both ways; from ``/debug/nodes``, that no device's free share is below 0 (or
   above 1) and that every node's per-device free shares, cpu used and pod count equal the
   simulator's; from ``/debug/pods``, that every bound pod holds as many devices as it asks
   for and - independently of the server's own counters - that the shares of the pods
   holding each device add up to at most one GPU. Both sides choose devices by the one rule
   (``app.core.gpu.links.choose``: NVLink and NUMA for whole GPUs, with each node's
   topology; the policy's device for a share), so device indices must agree too.

Exit status: 0 if everything agrees; 1 if any pod lands elsewhere or on other devices, a
node's usage or the allocation differs, a device is over-committed, a pod holds the wrong
number of devices or a bind fails; 2 for bad arguments.

How a trace row becomes a Pod: see ``scripts/openb_pods.py``.

Latency is client-observed (sequential keep-alive httpx with TCP_NODELAY, like
kube-scheduler's Go client); request bodies are built before the timer starts. There is no
warm-up for Muster (any filter call would teach its policy an extra pod), so the first calls'
cold costs are in the figures; the null server gets a short warm-up.
"""

from __future__ import annotations

import argparse
import gc
import json
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from fastapi import Request, Response  # noqa: E402

from app.api import wire  # noqa: E402
from app.core.gpu.ask import MILLI  # noqa: E402
from app.core.gpu.table import GpuTable  # noqa: E402
from app.core.model.clusterfile import load_cluster_file  # noqa: E402
from app.core.model.quantity import parse_milli  # noqa: E402
from app.sim.openb import (  # noqa: E402
    DEFAULT_NODES,
    DEFAULT_TRACE,
    Trace,
    arrival_order,
    load_trace,
)
from app.sim.tracedata import TraceDataMissing, openb_dir  # noqa: E402
from scripts.bench_extender import create_null_app, make_client, timed_post  # noqa: E402
from scripts.benchproc import Latency, child_server  # noqa: E402
from scripts.openb_pods import (  # noqa: E402
    NAMESPACE,
    SimResult,
    arrival_identity,
    pod_json,
    simulate_file_order,
)

HOST = "127.0.0.1"
START_TIMEOUT = 60.0
VERBS = ("filter", "prioritize", "bind")
#: Per-pod total: every call made for that pod.
POD = "pod (all calls)"
SERVERS = ("muster", "null")
#: Mismatches listed in the report.
SHOW = 5

# -- pods on the wire ----------------------------------------------------------------------


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def args_body(pod: str, names_json: str) -> bytes:
    """An ExtenderArgs body (nodeCacheCapable: ``Nodes`` null) from pre-encoded parts."""
    return f'{{"Pod":{pod},"Nodes":null,"NodeNames":{names_json}}}'.encode()


def bind_body(name: str, uid: str, node: str) -> bytes:
    """An ExtenderBindingArgs body."""
    return _dumps(
        {"PodName": name, "PodNamespace": NAMESPACE, "PodUID": uid, "Node": node}
    ).encode()


# -- servers -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def serve_muster(cluster: Path) -> int:
    """Child process: ``muster serve --cluster FILE`` on a free loopback port (announced as
    ``PORT n`` first; the parent waits for ``/readyz``)."""
    from app.cli import main as muster

    port = _free_port()
    print(f"PORT {port}", flush=True)
    argv = ["serve", "--cluster", str(cluster), "--host", HOST, "--port", str(port)]
    return muster([*argv, "--log-level", "WARNING"])


def serve_null() -> int:
    """Child process: the benchmarks' null extender, plus a ``/bind`` that parses its body."""
    import uvicorn

    app = create_null_app()

    @app.post("/bind")
    async def null_bind(request: Request) -> Response:
        wire.ExtenderBindingArgs.model_validate_json(await request.body())
        answer = wire.ExtenderBindingResult(Error="")
        return Response(answer.model_dump_json(), media_type="application/json")

    # IPPROTO_TCP: asyncio then sets TCP_NODELAY on accepted connections (bench_extender.serve)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, 0))
    sock.listen(64)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    gc.collect()
    gc.freeze()  # as MusterServer does, so neither side pays for collecting import garbage
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def wait_ready(client: httpx.Client, timeout: float = START_TIMEOUT) -> dict[str, Any]:
    """Poll ``/readyz`` until it answers 200; its body."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = client.get("/readyz")
            if response.status_code == 200:
                return dict(response.json())
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"muster serve was not ready within {timeout:.0f} s")
        time.sleep(0.1)


@contextmanager
def servers(cluster: Path, baseline: bool = True) -> Iterator[dict[str, str]]:
    """``muster serve`` (and the null server) as child processes; yields their base URLs."""
    script = Path(__file__).resolve()
    with ExitStack() as stack:
        urls = {
            "muster": stack.enter_context(
                child_server(
                    script, ["--serve", "muster", "--cluster", str(cluster)], START_TIMEOUT
                )
            )
        }
        if baseline:
            urls["null"] = stack.enter_context(
                child_server(script, ["--serve", "null"], START_TIMEOUT)
            )
        yield urls


# -- latency -------------------------------------------------------------------------------


def _per_verb() -> dict[str, list[int]]:
    return {verb: [] for verb in (*VERBS, POD)}


# -- the replay ----------------------------------------------------------------------------


@dataclass
class Mismatch:
    """A pod placed differently by the server and the simulator."""

    arrival: int
    pod: str
    sim: str | None
    live: str | None
    why: str


@dataclass
class Report:
    """Everything one replay found (``--json`` prints it)."""

    trace: str
    seed: int
    nodes: int
    gpus: int
    arrivals: int
    placed_sim: int
    placed_live: int
    single_feasible: int
    mismatches: int
    first_mismatches: list[Mismatch]
    bind_errors: list[str]
    gpu_ids_wrong: list[str]
    other_device_indices: int
    first_other_device_indices: list[str]
    nodes_permuted: int
    max_pods_per_node: int
    alloc_sim_milli: int
    alloc_live_milli: int
    alloc_sim_percent: float
    alloc_live_percent: float
    nodes_differing: int
    first_node_differences: list[str]
    overcommitted: list[str]
    latency: dict[str, dict[str, Latency]]
    sim_seconds: float
    replay_seconds: float
    total_seconds: float

    @property
    def ok(self) -> bool:
        """Whether the server matched the simulator exactly (nodes and devices) and
        over-committed nothing."""
        return (
            self.mismatches == 0
            and not self.bind_errors
            and not self.gpu_ids_wrong
            and self.alloc_sim_milli == self.alloc_live_milli
            and self.nodes_differing == 0
            and self.other_device_indices == 0
            and self.nodes_permuted == 0
            and not self.overcommitted
        )


class Replayer:
    """Drives one pod at a time through filter -> prioritize -> bind on Muster (and null)."""

    def __init__(self, clients: dict[str, httpx.Client], node_names: Sequence[str]) -> None:
        self.clients = clients
        self.names_json = _dumps(list(node_names))
        self.samples = {server: _per_verb() for server in clients}
        self.single_feasible = 0
        self.bind_errors: list[str] = []

    def _post(self, verb: str, body: bytes, spent: dict[str, int]) -> bytes:
        """POST ``body`` to Muster and then the null server; returns Muster's answer."""
        answer = b""
        for server, client in self.clients.items():
            ns, _, content = timed_post(client, f"/{verb}", body)
            self.samples[server][verb].append(ns)
            spent[server] += ns
            if server == "muster":
                answer = content
        return answer

    def place(self, pod: dict[str, Any], name: str, uid: str) -> tuple[str | None, dict[str, str]]:
        """One scheduling attempt: the node bound (None: dropped) and, for reports, the
        filter's reason for every node it rejected."""
        spent = dict.fromkeys(self.clients, 0)
        body = args_body(_dumps(pod), self.names_json)
        answer = json.loads(self._post("filter", body, spent))
        if answer.get("Error"):
            raise RuntimeError(f"/filter of {name}: {answer['Error']}")
        feasible: list[str] = answer.get("NodeNames") or []
        rejected = {**answer.get("FailedNodes", {}), **answer.get("FailedAndUnresolvableNodes", {})}
        node: str | None = None
        if len(feasible) == 1:
            node = feasible[0]  # kube-scheduler does not score a single feasible node
            self.single_feasible += 1
        elif feasible:
            body = args_body(_dumps(pod), _dumps(feasible))
            scores = {
                h["Host"]: h["Score"] for h in json.loads(self._post("prioritize", body, spent))
            }
            best = max(scores.get(n, 0) for n in feasible)
            node = next(n for n in feasible if scores.get(n, 0) == best)
        if node is not None:
            result = json.loads(self._post("bind", bind_body(name, uid, node), spent))
            if result.get("Error"):
                self.bind_errors.append(f"{name} -> {node}: {result['Error']}")
                node = None
        for server, ns in spent.items():
            self.samples[server][POD].append(ns)
        return node, rejected


def _why(sim: str | None, live: str | None, rejected: dict[str, str]) -> str:
    """Why the server did not take the simulator's node, as far as the client can tell."""
    if sim is None:
        return "the simulator found no node; the server bound one"
    if sim in rejected:
        return f"the server's filter rejected {sim}: {rejected[sim]}"
    if live is None:
        return "the server dropped the pod (nothing feasible)"
    return f"both feasible; prioritize ranked {live} first"


@dataclass
class NodeCheck:
    """``/debug/nodes`` against the simulator's final table."""

    differing: int = 0
    notes: list[str] = field(default_factory=list)
    overcommitted: list[str] = field(default_factory=list)
    allocated: int = 0
    permuted: int = 0
    max_pods: int = 0


def check_nodes(debug_nodes: dict[str, Any], sim: SimResult) -> NodeCheck:
    """Compare the server's nodes with the simulator's table.

    A node differs if its GPU usage as a multiset of per-device free shares, its cpu used or
    its pod count differs; a node with the same multiset on other device indices is counted
    apart (``permuted``: the same usage, other devices chosen). Memory is not compared:
    ``/debug/nodes`` rounds it for display.
    """
    table = sim.table
    row_of = {name: row for row, name in enumerate(table.names)}
    out = NodeCheck()
    seen = set()
    for item in debug_nodes["nodes"]:
        name = item["name"]
        devices = item["gpus"]["devices"]
        free = [round(d["free"] * MILLI) for d in devices]
        for d, f in zip(devices, free, strict=True):
            if f < 0 or f > MILLI:
                out.overcommitted.append(f"{name} GPU {d['index']}: free {f / MILLI:g}")
        out.allocated += len(free) * MILLI - sum(free)
        out.max_pods = max(out.max_pods, int(item["pods"]))
        row = row_of.get(name)
        if row is None:
            out.differing += 1
            out.notes.append(f"{name}: not in the simulator's table")
            continue
        seen.add(name)
        expect = [int(f) for f in table.free[row, : table.devices[row]]]
        cpu_used = parse_milli(item["used"]["cpu"], "cpu")
        expect_cpu = int(table.cpu_cap[row] - table.cpu_free[row])
        problems = []
        if sorted(free) != sorted(expect):
            problems.append(f"device free {free} vs simulator {expect}")
        elif free != expect:
            out.permuted += 1
        if cpu_used != expect_cpu:
            problems.append(f"cpu used {cpu_used}m vs simulator {expect_cpu}m")
        if item["pods"] != int(sim.pods[row]):
            problems.append(f"{item['pods']} pods vs simulator {int(sim.pods[row])}")
        if problems:
            out.differing += 1
            if len(out.notes) < SHOW:
                out.notes.append(f"{name}: " + "; ".join(problems))
    missing = sorted(set(table.names) - seen)
    out.differing += len(missing)
    out.notes.extend(
        f"{n}: missing on the server" for n in missing[: max(0, SHOW - len(out.notes))]
    )
    return out


@dataclass
class PodDevices:
    """``/debug/pods`` device ids against the simulator's and the pods' asks."""

    wrong_count: list[str] = field(default_factory=list)
    other_indices: int = 0
    first_other_indices: list[str] = field(default_factory=list)
    overcommitted: list[str] = field(default_factory=list)


def check_devices(
    debug_pods: dict[str, Any], trace: Trace, arrivals: Sequence[int], sim: SimResult
) -> PodDevices:
    """Per bound pod: ``gpuIds`` must name as many devices as it asks for; ids other than the
    simulator's (on the same node) are counted; and, independently of the server's own
    counters, the shares of the pods holding each device must add up to at most one GPU."""
    by_name = {p["name"]: p for p in debug_pods["pods"] if p["namespace"] == NAMESPACE}
    held: dict[tuple[str, int], int] = {}
    out = PodDevices()
    for k, i in enumerate(arrivals):
        name, _ = arrival_identity(k, trace, i)
        pod = by_name.get(name)
        if pod is None or not pod["node"]:
            continue
        ids = tuple(int(d) for d in pod["gpuIds"])
        num_gpu, milli = int(trace.num_gpu[i]), int(trace.gpu_milli[i])
        if len(ids) != num_gpu or len(set(ids)) != len(ids):
            out.wrong_count.append(f"{name}: asks {num_gpu} GPU(s), holds devices {list(ids)}")
        if sim.nodes[k] == pod["node"] and tuple(sim.devices[k]) != ids:
            out.other_indices += 1
            if len(out.first_other_indices) < SHOW:
                out.first_other_indices.append(
                    f"#{k} {name} on {pod['node']}: devices {list(ids)}, simulator"
                    f" {list(sim.devices[k])}"
                )
        share = milli if num_gpu == 1 and milli < MILLI else MILLI
        for d in ids:
            held[(pod["node"], d)] = held.get((pod["node"], d), 0) + share
    out.overcommitted = [
        f"{node} GPU {d}: its pods hold {m / MILLI:g} GPU"
        for (node, d), m in held.items()
        if m > MILLI
    ]
    return out


def replay(
    trace_path: Path,
    nodes_path: Path,
    seed: int = 0,
    limit: int | None = None,
    baseline: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Run the simulator and the HTTP replay on the same arrivals; compare them."""
    started = time.perf_counter()
    nodes = load_cluster_file(nodes_path)
    trace = load_trace(trace_path)
    capacity = GpuTable.from_nodes(nodes).gpu_capacity
    arrivals = arrival_order(trace, capacity, seed).tolist()
    if limit is not None:
        arrivals = arrivals[:limit]
    sim = simulate_file_order(nodes, trace, arrivals)
    node_names = [n.name for n in nodes]
    with servers(nodes_path, baseline) as urls, ExitStack() as stack:
        clients = {s: stack.enter_context(make_client(urls[s])) for s in SERVERS if s in urls}
        ready = wait_ready(clients["muster"])
        if ready.get("nodes") != len(nodes):
            raise RuntimeError(f"muster serve has {ready.get('nodes')} nodes, not {len(nodes)}")
        if "null" in clients:
            _warm_null(clients["null"], trace, arrivals, node_names)
        replayer = Replayer(clients, node_names)
        live: list[str | None] = []
        mismatches: list[Mismatch] = []
        count = 0
        gc.collect()
        replay_started = time.perf_counter()
        for k, i in enumerate(arrivals):
            name, uid = arrival_identity(k, trace, i)
            node, rejected = replayer.place(pod_json(trace, i, name, uid), name, uid)
            live.append(node)
            if node != sim.nodes[k]:
                count += 1
                if len(mismatches) < SHOW:
                    why = _why(sim.nodes[k], node, rejected)
                    mismatches.append(Mismatch(k, trace.names[i], sim.nodes[k], node, why))
            if progress and (k + 1) % 1000 == 0:
                elapsed = time.perf_counter() - replay_started
                progress(f"... {k + 1}/{len(arrivals)} pods, {elapsed:.0f} s, {count} mismatches")
        replay_seconds = time.perf_counter() - replay_started
        muster = clients["muster"]
        debug_nodes = muster.get("/debug/nodes").raise_for_status().json()
        debug_pods = muster.get("/debug/pods").raise_for_status().json()
    nodes_check = check_nodes(debug_nodes, sim)
    devices_check = check_devices(debug_pods, trace, arrivals, sim)
    latency = {
        server: {verb: Latency.of(s) for verb, s in samples.items()}
        for server, samples in replayer.samples.items()
    }
    alloc_sim = sim.table.gpu_allocated
    return Report(
        trace=str(trace_path),
        seed=seed,
        nodes=len(nodes),
        gpus=capacity // MILLI,
        arrivals=len(arrivals),
        placed_sim=sum(1 for n in sim.nodes if n is not None),
        placed_live=sum(1 for n in live if n is not None),
        single_feasible=replayer.single_feasible,
        mismatches=count,
        first_mismatches=mismatches,
        bind_errors=replayer.bind_errors,
        gpu_ids_wrong=devices_check.wrong_count,
        other_device_indices=devices_check.other_indices,
        first_other_device_indices=devices_check.first_other_indices,
        nodes_permuted=nodes_check.permuted,
        max_pods_per_node=nodes_check.max_pods,
        alloc_sim_milli=alloc_sim,
        alloc_live_milli=nodes_check.allocated,
        alloc_sim_percent=100.0 * alloc_sim / capacity,
        alloc_live_percent=100.0 * nodes_check.allocated / capacity,
        nodes_differing=nodes_check.differing,
        first_node_differences=nodes_check.notes,
        overcommitted=nodes_check.overcommitted + devices_check.overcommitted,
        latency=latency,
        sim_seconds=sim.seconds,
        replay_seconds=replay_seconds,
        total_seconds=time.perf_counter() - started,
    )


def _warm_null(
    client: httpx.Client, trace: Trace, arrivals: Sequence[int], names: Sequence[str]
) -> None:
    """A few unmeasured calls on the null server (Muster gets none: see the docstring)."""
    names_json = _dumps(list(names))
    for k, i in enumerate(arrivals[:20]):
        name, uid = arrival_identity(k, trace, i)
        body = args_body(_dumps(pod_json(trace, i, name, uid)), names_json)
        timed_post(client, "/filter", body)
        timed_post(client, "/prioritize", body)
        timed_post(client, "/bind", bind_body(name, uid, names[0]))


# -- output --------------------------------------------------------------------------------


def render(report: Report) -> list[str]:
    """The human-readable report."""
    r = report
    lines = [
        f"openb replay: {Path(r.trace).name}, seed {r.seed}, {r.arrivals} arrivals; "
        f"{r.nodes} nodes, {r.gpus} GPUs",
        f"placed: simulator {r.placed_sim}, muster serve {r.placed_live} "
        f"(dropped {r.arrivals - r.placed_sim} / {r.arrivals - r.placed_live}; "
        f"{r.single_feasible} pods had a single feasible node, bound without prioritize)",
        f"allocated GPU: simulator {r.alloc_sim_milli / MILLI:.3f} ({r.alloc_sim_percent:.2f} %),"
        f" muster serve {r.alloc_live_milli / MILLI:.3f} ({r.alloc_live_percent:.2f} %)"
        f" - {'equal' if r.alloc_sim_milli == r.alloc_live_milli else 'DIFFERENT'}",
        f"pods on a different node than the simulator's: {r.mismatches}",
    ]
    for m in r.first_mismatches:
        lines.append(f"  #{m.arrival} {m.pod}: simulator {m.sim}, muster {m.live} - {m.why}")
    lines.append(
        f"nodes whose GPU usage, cpu used or pod count differ from the simulator's:"
        f" {r.nodes_differing} (most pods on a node: {r.max_pods_per_node})"
    )
    lines.extend(f"  {note}" for note in r.first_node_differences)
    lines.append(f"pods on other devices than the simulator's: {r.other_device_indices}")
    lines.append(f"nodes with the same usage on other device indices: {r.nodes_permuted}")
    lines.extend(f"  {note}" for note in r.first_other_device_indices)
    lines.append(f"pods holding the wrong number of devices: {len(r.gpu_ids_wrong)}")
    lines.extend(f"  {note}" for note in r.gpu_ids_wrong[:SHOW])
    lines.append(f"over-committed devices: {len(r.overcommitted)}")
    lines.extend(f"  {note}" for note in r.overcommitted[:SHOW])
    lines.append(f"bind errors: {len(r.bind_errors)}")
    lines.extend(f"  {note}" for note in r.bind_errors[:SHOW])
    lines += [
        "",
        "latency, client-observed, ms (sequential keep-alive httpx; muster serve vs null)",
        f"{'verb':<16} {'server':<7} {'calls':>6} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>8}"
        f" {'calls/s':>8} {'x null p50':>10} {'p99':>5}",
    ]
    for verb in (*VERBS, POD):
        null = r.latency.get("null", {}).get(verb)
        for server in SERVERS:
            s = r.latency.get(server, {}).get(verb)
            if s is None:
                continue
            ratio = ""
            if server == "muster" and null is not None and null.count:
                ratio = f" {s.p50 / null.p50:>10.2f} {s.p99 / null.p99:>5.2f}"
            lines.append(
                f"{verb if server == 'muster' else '':<16} {server:<7} {s.count:>6} {s.p50:>7.3f}"
                f" {s.p90:>7.3f} {s.p99:>7.3f} {s.max:>8.3f} {s.per_second:>8.0f}{ratio}"
            )
    lines += [
        "",
        f"time: simulator {r.sim_seconds:.1f} s, HTTP replay {r.replay_seconds:.1f} s "
        f"({r.arrivals / max(r.replay_seconds, 1e-9):.0f} pods/s incl. null calls), "
        f"total {r.total_seconds:.1f} s",
        "RESULT: "
        + (
            "same allocation as the simulator, nothing over-committed"
            if r.ok
            else "DIFFERENT from the simulator or over-committed"
        ),
    ]
    return lines


def as_json(report: Report) -> dict[str, Any]:
    """The report as plain JSON data."""
    data = asdict(report)
    data["ok"] = report.ok
    return data


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    found = "of the openb trace (app.sim.tracedata)"
    parser.add_argument(
        "--trace", type=Path, help=f"openb pod list CSV (default: {DEFAULT_TRACE} {found})"
    )
    parser.add_argument(
        "--cluster",
        type=Path,
        help=f"openb node list CSV, GPU nodes (default: {DEFAULT_NODES} {found})",
    )
    parser.add_argument("--seed", type=int, default=0, help="arrival-order seed (0)")
    parser.add_argument("--limit", type=int, help="replay only the first N arrivals")
    parser.add_argument("--no-baseline", action="store_true", help="skip the null server")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--serve", choices=("muster", "null"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve == "muster":
        return serve_muster(args.cluster)
    if args.serve == "null":
        return serve_null()
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    if args.trace is None or args.cluster is None:
        try:
            folder = openb_dir()
        except TraceDataMissing as exc:
            parser.error(str(exc))
        args.trace = args.trace or folder / DEFAULT_TRACE
        args.cluster = args.cluster or folder / DEFAULT_NODES
    for path in (args.trace, args.cluster):
        if not path.is_file():
            parser.error(f"no such file: {path}")

    def progress(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    report = replay(args.trace, args.cluster, args.seed, args.limit, not args.no_baseline, progress)
    if args.json:
        print(json.dumps(as_json(report), indent=2))
    else:
        print("\n".join(render(report)))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
