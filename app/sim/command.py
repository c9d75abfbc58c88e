"""``muster simulate``: options, building the runs from them, printing the table."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO

from app.core.model.errors import InvalidInput
from app.core.model.queues import OPEN, QueueConfig
from app.core.policies.gangorder import GANG_ORDERS
from app.core.state.queuefile import QueueFile
from app.sim.engine import SimConfig, Simulation
from app.sim.kubescheduler import SchedulerConfig
from app.sim.metrics import Result
from app.sim.openb import policy_list
from app.sim.policies import POLICIES, PolicyConfig
from app.sim.report import plot, queue_table, table, to_json
from app.sim.scenarios import SCENARIOS, scale_queues
from app.sim.workload import (
    SEED_CLUSTER,
    SEED_WORKLOAD,
    Arrival,
    ClusterSpec,
    MixSpec,
    WorkloadSpec,
)

PRESETS: dict[str, tuple[ClusterSpec, WorkloadSpec]] = {"seed": (SEED_CLUSTER, SEED_WORKLOAD)}
Workload = WorkloadSpec | MixSpec

# option -> (spec, field); a given option overrides the preset's value.
_CLUSTER = {"nodes": "nodes", "node_cpu": "cpu", "node_gpus": "gpus", "node_memory": "memory_gib"}
_WORKLOAD = {
    "jobs": "jobs", "pods_per_job": "pods_per_job", "min_member": "min_member",
    "pod_cpu": "pod_cpu", "pod_gpus": "pod_gpus", "pod_memory": "pod_memory_gib",
    "runtime": "runtime", "jitter": "jitter", "arrival": "arrival", "deadline": "deadline",
    "seed": "seed", "queue": "queue", "priority": "priority",
}  # fmt: skip
_MIX = {"jobs": "jobs", "seed": "seed"}  # what a mixed preset takes from the options


def _floats(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas: {text!r}") from exc
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers: {text!r}")
    return values


def _arrival(text: str) -> Arrival:
    try:
        return Arrival.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``muster simulate``."""
    p.add_argument("--preset", choices=sorted({*PRESETS, *SCENARIOS}),
                   help="start from a preset (seed: the issue's seed experiment; queues, "
                        "backfill, preemption: mixed GPU workloads, of whose workload options "
                        "only --jobs and --seed apply); other options override it")  # fmt: skip
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply nodes and jobs (e.g. 0.1 for a quick look; default 1)",
    )
    c = p.add_argument_group("cluster (identical nodes)")
    c.add_argument("--nodes", type=int)
    c.add_argument("--node-cpu", type=float, metavar="CORES")
    c.add_argument("--node-gpus", type=int)
    c.add_argument("--node-memory", type=float, metavar="GIB")
    w = p.add_argument_group("workload (gang jobs)")
    w.add_argument("--jobs", type=int)
    w.add_argument("--pods-per-job", type=int)
    w.add_argument("--min-member", type=int, help="gang size (default: every pod of the job)")
    w.add_argument("--pod-cpu", type=float, metavar="CORES")
    w.add_argument("--pod-gpus", type=int)
    w.add_argument("--pod-memory", type=float, metavar="GIB")
    w.add_argument("--runtime", type=float, metavar="SECONDS", help="mean training time")
    w.add_argument(
        "--jitter",
        type=float,
        metavar="FRACTION",
        help="runtime is uniform within +-FRACTION (0.5: 3 min +- 50%%)",
    )
    w.add_argument(
        "--arrival", type=_arrival, help="all | uniform:SECONDS | poisson:JOBS_PER_SECOND"
    )
    w.add_argument(
        "--deadline",
        type=float,
        metavar="SECONDS",
        help="a job not fully started this long after submission fails (0: none)",
    )
    w.add_argument("--seed", type=int, help="random seed of the workload")
    w.add_argument("--queue", help="muster.io/queue of every job (default: the default queue)")
    w.add_argument("--priority", type=int, help="priority (PriorityClass value) of every job")
    w.add_argument(
        "--declare-runtime",
        nargs="?",
        const="max",
        choices=["max", "own"],
        help="jobs declare muster.io/expected-runtime: max (alone: every job the longest "
        "runtime it may have) or own (each job its own runtime, rounded up)",
    )
    q = p.add_argument_group("queues, backfill, preemption (Muster)")
    q.add_argument(
        "--queues",
        type=Path,
        metavar="FILE",
        help="Muster's queue file (the --queues YAML of `muster serve`)",
    )
    q.add_argument(
        "--backfill",
        choices=["on", "off", "both"],
        help="off: strip muster.io/expected-runtime from every pod, so nothing "
        "backfills reserved room (Muster has no switch); both: run each "
        "(default: on, or the preset's)",
    )
    q.add_argument(
        "--min-runtime",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="Muster's --min-runtime: younger gangs are never preempted (default 0)",
    )
    q.add_argument("--no-preemption", action="store_true", help="Muster's --no-preemption")
    q.add_argument(
        "--default-runtime",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="Muster's --default-runtime for pods that declare none (default 3600)",
    )
    q.add_argument(
        "--reservation-slack",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="the largest job is on time if it starts within its reservation's "
        "estimate plus this (default 60)",
    )
    q.add_argument(
        "--sample-interval",
        type=float,
        metavar="SECONDS",
        help="how often the cluster and queues are sampled (default 1, presets 10)",
    )
    s = p.add_argument_group("scheduling")
    s.add_argument(
        "--policies",
        type=policy_list(POLICIES),
        default=["muster", "default"],
        help=f"comma-separated, from {', '.join(POLICIES)} (default: muster,default; "
        "muster-gated is an experiment: members gated until planned)",
    )
    s.add_argument(
        "--initial-backoff",
        type=_floats,
        default=[1.0],
        metavar="S[,S..]",
        help="podInitialBackoffSeconds (default 1); several values run each",
    )
    s.add_argument(
        "--max-backoff",
        type=_floats,
        default=[10.0],
        metavar="S[,S..]",
        help="podMaxBackoffSeconds (default 10); e.g. 10,2 compares both",
    )
    s.add_argument(
        "--attempt-cost",
        type=float,
        default=0.002,
        metavar="SECONDS",
        help="simulated time one scheduling attempt takes (default 0.002)",
    )
    s.add_argument(
        "--bind-latency",
        type=float,
        default=0.005,
        metavar="SECONDS",
        help="decision to Binding created (default 0.005)",
    )
    s.add_argument(
        "--barrier-timeout",
        type=float,
        default=4.0,
        metavar="SECONDS",
        help="Muster's bind barrier (default 4)",
    )
    s.add_argument("--plan-ttl", type=float, default=60.0, metavar="SECONDS")
    s.add_argument(
        "--planner-poll",
        type=float,
        default=0.05,
        metavar="SECONDS",
        help="Muster's planner loop poll interval (default 0.05)",
    )
    s.add_argument(
        "--gang-order",
        choices=GANG_ORDERS,
        default="longest-first",
        help="Muster's --gang-order (default longest-first)",
    )
    s.add_argument(
        "--longest-first-window",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="Muster's --longest-first-window (default 600)",
    )
    s.add_argument(
        "--strategy",
        choices=["binpack", "spread"],
        default="binpack",
        help="Muster's packing strategy (default binpack)",
    )
    o = p.add_argument_group("output")
    o.add_argument(
        "--plot",
        type=Path,
        metavar="PNG",
        help="utilisation and queue length over time (needs matplotlib)",
    )
    o.add_argument("--json", type=Path, metavar="FILE", help="also write the figures as JSON")
    o.add_argument(
        "--max-time",
        type=float,
        metavar="SECONDS",
        help="stop the simulation here (default: generous, from the workload)",
    )
    o.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    _add_openb(p)


def _add_openb(p: argparse.ArgumentParser) -> None:
    """``muster simulate openb``: the FGD paper's GPU-sharing experiment (``app.sim.openb``)."""
    from app.sim import openb

    experiments = p.add_subparsers(
        dest="experiment",
        metavar="{openb}",
        help="instead of gang workloads: openb, the FGD paper's GPU-allocation experiment",
    )
    o = experiments.add_parser(
        "openb",
        help="GPU allocation of each policy on the openb trace, with the paper's figures",
        description=openb.__doc__.split("\n\n")[0] if openb.__doc__ else None,
    )
    openb.add_arguments(o)


def build_specs(args: argparse.Namespace) -> tuple[ClusterSpec, Workload]:
    """The cluster and workload the options describe (preset, then overrides, then scale)."""
    workload: Workload
    if args.preset in SCENARIOS:
        scenario = SCENARIOS[args.preset]
        cluster, workload = scenario.cluster, replace(scenario.mix, **_given(args, _MIX))
    else:
        cluster, single = PRESETS[args.preset] if args.preset else (ClusterSpec(), WorkloadSpec())
        workload = replace(single, **_given(args, _WORKLOAD))
        if args.declare_runtime is not None:
            own = args.declare_runtime == "own"
            workload = replace(workload, declare_runtime=True, declare_own_runtime=own)
    cluster = replace(cluster, **_given(args, _CLUSTER))
    if args.scale != 1.0:
        if args.scale <= 0:
            raise ValueError("--scale must be positive")
        cluster = replace(cluster, nodes=max(1, round(cluster.nodes * args.scale)))
        workload = replace(workload, jobs=max(1, round(workload.jobs * args.scale)))
    return cluster, workload


def build_queues(args: argparse.Namespace) -> QueueConfig:
    """``--queues FILE`` (validated as Muster validates it), else the preset's tree scaled
    with ``--scale``, else the open queue."""
    if args.queues is not None:
        try:
            return QueueFile(args.queues).config
        except InvalidInput as exc:
            raise ValueError(f"--queues {args.queues}: {exc}") from exc
    scenario = SCENARIOS.get(args.preset or "")
    if scenario is not None and scenario.queues is not None:
        return scale_queues(scenario.queues, args.scale)
    return OPEN


def _given(args: argparse.Namespace, mapping: dict[str, str]) -> dict[str, Any]:
    return {spec: getattr(args, opt) for opt, spec in mapping.items()
            if getattr(args, opt) is not None}  # fmt: skip


def build_configs(args: argparse.Namespace, workload: Workload) -> list[SimConfig]:
    """One run per policy, backoff setting and backfill setting."""
    backoffs = list(itertools.product(args.initial_backoff, args.max_backoff))
    policy_config = PolicyConfig(
        bind_latency=args.bind_latency,
        strategy=args.strategy,
        barrier_timeout=args.barrier_timeout,
        plan_ttl=args.plan_ttl,
        planner_poll=args.planner_poll,
        seed=workload.seed,
        queues=build_queues(args),
        min_runtime=args.min_runtime,
        preemption=not args.no_preemption,
        default_runtime=args.default_runtime,
        gang_order=args.gang_order,
        longest_first_window=args.longest_first_window,
    )
    scenario = SCENARIOS.get(args.preset or "")
    backfill = args.backfill or (scenario.backfill if scenario else "on")
    modes = {"on": [True], "off": [False], "both": [True, False]}[backfill]
    interval = args.sample_interval or (scenario.sample_interval if scenario else 1.0)
    configs = []
    for policy, (initial, maximum), mode in itertools.product(args.policies, backoffs, modes):
        label = policy if len(backoffs) == 1 else f"{policy} {initial:g}/{maximum:g}s"
        if len(modes) > 1 or not mode:
            label += " backfill" if mode else " no-backfill"
        scheduler = SchedulerConfig(
            initial_backoff=initial, max_backoff=maximum, attempt_cost=args.attempt_cost
        )
        configs.append(SimConfig(policy=policy, scheduler=scheduler,
                                 policy_config=policy_config, max_time=args.max_time,
                                 label=label, backfill=mode, sample_interval=interval,
                                 reservation_slack=args.reservation_slack))  # fmt: skip
    return configs


def describe(cluster: ClusterSpec, workload: Workload) -> str:
    """One paragraph saying what is simulated."""
    gpus = f", {cluster.gpus} GPUs" if cluster.gpus else ""
    if isinstance(workload, MixSpec):
        classes = "; ".join(_describe_class(s) for s in workload.specs())
        return f"{cluster.nodes} nodes x {cluster.cpu:g} CPU{gpus}; {classes}"
    pod_gpus = f", {workload.pod_gpus} GPU" if workload.pod_gpus else ""
    gang = workload.min_member or workload.pods_per_job
    deadline = f"{workload.deadline:g} s deadline" if workload.deadline else "no deadline"
    return (
        f"{cluster.nodes} nodes x {cluster.cpu:g} CPU{gpus}; {workload.jobs} jobs x "
        f"{workload.pods_per_job} pods x {workload.pod_cpu:g} CPU{pod_gpus}, gang of {gang}, "
        f"runtime {workload.runtime:g} s +- {100 * workload.jitter:g}%{_declared(workload)}, "
        f"arrival {workload.arrival}, {deadline}, seed {workload.seed}"
    )


def _declared(spec: WorkloadSpec) -> str:
    if spec.declare_own_runtime:
        return " (each job declares its own)"
    return " (longest declared)" if spec.declare_runtime else ""


def _describe_class(spec: WorkloadSpec) -> str:
    pod_gpus = f", {spec.pod_gpus} GPU" if spec.pod_gpus else ""
    queue = f" in queue {spec.queue}" if spec.queue else ""
    priority = f", priority {spec.priority}" if spec.priority else ""
    start = f" from {spec.offset:g} s" if spec.offset else ""
    declared = ", runtime declared" if spec.declare_runtime else ""
    return (
        f"{spec.jobs} {spec.prefix} jobs{queue} x {spec.pods_per_job} pods x {spec.pod_cpu:g} "
        f"CPU{pod_gpus}{priority}, runtime {spec.runtime:g} s +- {100 * spec.jitter:g}%"
        f"{declared}, arrival {spec.arrival}{start}"
    )


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run every configured simulation and print the table (to stdout); 2 on bad options."""
    out = out or sys.stdout
    if getattr(args, "experiment", None) == "openb":
        from app.sim import openb

        return openb.run(args, out)
    try:
        cluster, workload = build_specs(args)
        configs = build_configs(args, workload)
    except ValueError as exc:
        print(f"muster simulate: {exc}", file=sys.stderr)
        return 2
    results: list[Result] = []
    for config in configs:
        if not args.quiet:
            print(f"simulating {config.label} ...", file=sys.stderr, flush=True)
        results.append(Simulation(cluster, workload, config).run())
    print(describe(cluster, workload), file=out)
    print(file=out)
    print(table(results), file=out)
    for result in results:
        if result.queues:
            print(f"\nqueues ({result.label}):", file=out)
            print(queue_table(result), file=out)
    if args.json:
        args.json.write_text(json.dumps(to_json(results), indent=2) + "\n")
    if args.plot:
        plot(results, args.plot)
        print(f"\nplot written to {args.plot}", file=out)
    return 0
