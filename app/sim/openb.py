"""The openb GPU-allocation experiment of the FGD paper (ATC'23), policies side by side.

Method (the paper's, as its public simulator runs it): the 1213 GPU nodes with their cpu and
memory; pods sorted by name, shuffled with the seed, then inflated by drawing pods uniformly with
replacement until the requested GPU reaches 130 % of capacity (or random pods removed if the
trace asks for more); each pod gets one attempt in order and is dropped if nothing fits;
ties go to a node order that is random per seed. The figure is allocated GPU / capacity when
the arrived GPU request reaches 130 % of capacity (also reported at 100 %), mean over seeds.

Policies: ``random``, ``best-fit`` and ``gpu-packing`` (``app.core.policies.gpushare``);
``fgd`` with the paper's target workload (the whole trace's pod classes by GPU shape and cpu,
known in advance, as the paper does); ``muster-default``, exactly what the extender runs live
(``app.core.policies.fgd.default_policy()``): it knows nothing of the trace and learns the
mix from the pods it is shown, each arriving pod being observed once BEFORE it is ranked;
``muster-oracle``, the same ``MusterPolicy`` given the whole trace's mix instead (for
comparison: what learning the mix costs).

Usage (``muster simulate openb`` takes the same options)::

    python -m app.sim.openb [--trace openb_pod_list_default.csv] \\
        [--nodes openb_node_list_gpu_node.csv] [--seeds 10] [--policies fgd,muster-default] \\
        [--plot out.png] [--jobs 2]

``--trace`` and ``--nodes`` default to the files of the openb trace where
``app.sim.tracedata.openb_dir()`` finds them (``$MUSTER_OPENB_DIR``, ``../shared/traces/openb``
next to the repository, or the user cache that ``python scripts/fetch_openb.py`` fills). Pure
numpy; matplotlib is imported only for ``--plot``.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from app.core.gpu.ask import MILLI, GpuAsk, PodAsk
from app.core.gpu.table import GpuTable
from app.core.model.clusterfile import load_cluster_file
from app.core.model.values import Node
from app.core.policies.fgd import FgdPolicy, MusterPolicy, WorkloadMix, default_policy
from app.core.policies.gpushare import (
    BestFitPolicy,
    GpuPackingPolicy,
    PlacementPolicy,
    RandomPolicy,
    choose,
)
from app.sim.tracedata import FETCH_COMMAND, TraceDataMissing, openb_dir

POLICIES = ("random", "best-fit", "gpu-packing", "fgd", "muster-default", "muster-oracle")
TARGET = 1.30
DEFAULT_TRACE = "openb_pod_list_default.csv"
DEFAULT_NODES = "openb_node_list_gpu_node.csv"
MISSING = f", not found: run `{FETCH_COMMAND}`"
#: x axis of the allocation curve: arrived GPU request, % of capacity.
GRID = np.arange(0, int(TARGET * 100) + 1)
#: The paper's figures (% allocated at 130 % arrived, mean of 10 seeds), by trace file name.
PUBLISHED = {
    "openb_pod_list_default.csv": {
        "random": 87.47,
        "best-fit": 93.08,
        "gpu-packing": 92.00,
        "fgd": 95.39,
    },
}


@dataclass(frozen=True)
class Trace:
    """An openb pod list as columns (one entry per pod, in file order)."""

    names: tuple[str, ...]
    cpu: np.ndarray
    memory: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray
    gpu_spec: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.names)

    def ask(self, i: int) -> PodAsk:
        """Pod ``i`` as a placement ask."""
        gpu = GpuAsk.from_openb(int(self.num_gpu[i]), int(self.gpu_milli[i]), self.gpu_spec[i])
        return PodAsk(gpu, int(self.cpu[i]), int(self.memory[i]))

    @property
    def gpu_request(self) -> np.ndarray:
        """Milli-GPU asked by each pod."""
        asked: np.ndarray = self.num_gpu * self.gpu_milli
        return asked


def load_trace(path: str | Path) -> Trace:
    """Read an openb pod list (``gpu_spec`` optional: multigpu50 has no such column)."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path}: no pods")
    missing = {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"} - set(rows[0])
    if missing:
        raise ValueError(f"{path}: missing columns {sorted(missing)}")

    def column(key: str) -> np.ndarray:
        return np.array([int(r[key]) for r in rows], dtype=np.int64)

    num_gpu = column("num_gpu")
    milli = np.where(num_gpu > 0, column("gpu_milli"), 0)
    return Trace(
        tuple(r["name"] for r in rows),
        column("cpu_milli"),
        column("memory_mib"),
        num_gpu,
        milli,
        tuple(r.get("gpu_spec") or "" for r in rows),
    )


def arrival_order(trace: Trace, capacity: int, seed: int, target: float = TARGET) -> np.ndarray:
    """Indices into ``trace`` in arrival order for ``seed`` (sorted, shuffled, inflated)."""
    rng = np.random.default_rng([seed, 0])
    order = np.array(sorted(range(len(trace)), key=trace.names.__getitem__), dtype=np.int64)
    order = order[rng.permutation(len(order))]
    request = trace.gpu_request
    goal = target * capacity
    total = int(request[order].sum())
    if total > goal:
        # drop random pods until the rest asks for no more than the goal
        victims = rng.permutation(len(order))
        removed = np.cumsum(request[order[victims]])
        cut = int(np.searchsorted(removed, total - goal, side="left")) + 1
        keep = np.ones(len(order), dtype=bool)
        keep[victims[:cut]] = False
        return order[keep]
    extra: list[np.ndarray] = []
    while total < goal:
        draw = rng.integers(0, len(trace), size=256)
        need = np.cumsum(request[draw]) + total
        stop = int(np.searchsorted(need, goal, side="left"))
        if stop < len(draw):
            draw = draw[: stop + 1]
        extra.append(draw)
        total = int(need[len(draw) - 1])
    return np.concatenate([order, *extra])


def make_policy(name: str, trace: Trace, seed: int) -> PlacementPolicy:
    """A fresh policy by name. ``fgd`` and ``muster-oracle`` target the whole trace's mix
    (as the paper does for FGD); ``muster-default`` is the live policy, which learns it."""
    if name == "random":
        return RandomPolicy(np.random.default_rng([seed, 2]))
    if name == "best-fit":
        return BestFitPolicy()
    if name == "gpu-packing":
        return GpuPackingPolicy()
    if name == "muster-default":
        return default_policy()
    if name in ("fgd", "muster-oracle"):
        asks = [trace.ask(i) for i in range(len(trace))]
        if name == "fgd":  # the paper's classes: GPU shape and cpu
            return FgdPolicy(WorkloadMix.of(asks, memory=False))
        return MusterPolicy(WorkloadMix.of(asks), name="muster-oracle")
    raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")


@dataclass(frozen=True)
class Run:
    """One policy on one seed: allocated % of capacity at each ``GRID`` point of arrival."""

    policy: str
    seed: int
    curve: np.ndarray
    placed: int
    failed: int
    seconds: float

    def at(self, percent: int) -> float:
        """Allocated % of capacity when ``percent`` % has arrived."""
        return float(self.curve[int(np.searchsorted(GRID, percent))])


def simulate(
    nodes: Sequence[Node],
    trace: Trace,
    policy: str,
    seed: int,
    *,
    factory: Callable[[str, Trace, int], PlacementPolicy] = make_policy,
) -> Run:
    """One attempt per pod in arrival order; returns the allocation curve.

    Each arrival is a new pod (a draw with replacement is another pod with the same ask). A
    policy that learns (has ``observe``, as the live ``muster-default``) is shown each pod
    once, BEFORE ranking it: the extender's protocol (``app.core.policies.gpuplacement``).
    """
    started = time.perf_counter()
    order_rng = np.random.default_rng([seed, 1])
    shuffled = [nodes[i] for i in order_rng.permutation(len(nodes))]
    table = GpuTable.from_nodes(shuffled)
    capacity = table.gpu_capacity
    arrivals = arrival_order(trace, capacity, seed)
    chosen = factory(policy, trace, seed)
    observe = getattr(chosen, "observe", None)  # a policy that learns the mix as pods arrive
    request = trace.gpu_request
    asks: dict[int, PodAsk] = {}
    allocated = np.zeros(len(arrivals), dtype=np.int64)
    done = 0
    placed = 0
    for n, i in enumerate(arrivals.tolist()):
        ask = asks.get(i)
        if ask is None:
            ask = asks[i] = trace.ask(i)
        if observe is not None:
            observe(ask)
        pick = choose(chosen, table, ask)
        if pick is not None:
            table.apply(pick.row, ask, pick.devices)
            done += int(request[i])
            placed += 1
        allocated[n] = done
    assert table.gpu_allocated == done
    arrived = np.cumsum(request[arrivals])
    # allocation when arrival first reaches each grid point (the end if it never does)
    at = np.minimum(np.searchsorted(arrived, GRID / 100 * capacity, side="left"), len(arrived) - 1)
    curve = 100.0 * allocated[at] / capacity
    elapsed = time.perf_counter() - started
    return Run(policy, seed, curve, placed, len(arrivals) - placed, elapsed)


def _task(args: tuple[Sequence[Node], Trace, str, int]) -> Run:
    return simulate(*args)


def iter_runs(
    nodes: Sequence[Node],
    trace: Trace,
    policies: Sequence[str],
    seeds: Sequence[int],
    jobs: int = 1,
) -> Iterator[Run]:
    """Every policy on every seed (in ``jobs`` processes), yielded in (policy, seed) order
    as they finish."""
    tasks = [(nodes, trace, p, s) for p in policies for s in seeds]
    if jobs <= 1 or len(tasks) <= 1:
        yield from map(_task, tasks)
        return
    with ProcessPoolExecutor(min(jobs, len(tasks))) as pool:
        yield from pool.map(_task, tasks)


def run_all(
    nodes: Sequence[Node],
    trace: Trace,
    policies: Sequence[str],
    seeds: Sequence[int],
    jobs: int = 1,
) -> list[Run]:
    """Every policy on every seed (in ``jobs`` processes), in (policy, seed) order."""
    return list(iter_runs(nodes, trace, policies, seeds, jobs))


def summary(
    runs: Sequence[Run], policies: Sequence[str], published: dict[str, float] | None = None
) -> str:
    """The allocation table: mean ± std over seeds at 130 % and 100 % arrived, and the
    paper's figure where ``published`` has one."""
    lines = [
        f"{'policy':<16}{'alloc @130%':>16}{'alloc @100%':>16}{'failed pods':>13}"
        f"{'paper':>8}{'s/run':>8}",
    ]
    for p in policies:
        mine = [r for r in runs if r.policy == p]
        hi = np.array([r.at(130) for r in mine])
        lo = np.array([r.at(100) for r in mine])
        failed = np.mean([r.failed for r in mine])
        paper = f"{published[p]:.2f}" if published and p in published else "-"
        secs = np.mean([r.seconds for r in mine])
        lines.append(
            f"{p:<16}{hi.mean():>9.2f} ± {hi.std():<4.2f}{lo.mean():>9.2f} ± {lo.std():<4.2f}"
            f"{failed:>13.0f}{paper:>8}{secs:>8.1f}"
        )
    return "\n".join(lines)


def plot(
    runs: Sequence[Run],
    policies: Sequence[str],
    path: str | Path,
    title: str,
    published: dict[str, float] | None = None,
) -> None:
    """Allocated % against arrived % (mean over seeds), one line per policy (dashed: an
    oracle variant); the paper's figures at 130 % as crosses of the same colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for p in policies:
        curves = np.array([r.curve for r in runs if r.policy == p])
        style = "--" if p.endswith("-oracle") else "-"  # drawn over its live twin
        label = f"{p} ({curves[:, -1].mean():.2f} %)"
        (line,) = ax.plot(GRID, curves.mean(axis=0), style, label=label)
        if published and p in published:
            ax.plot([GRID[-1]], [published[p]], "x", color=line.get_color(), markersize=8)
    ax.plot(GRID, np.minimum(GRID, 100), color="grey", linestyle=":", linewidth=1, label="ideal")
    if published and set(published) & set(policies):
        ax.plot([], [], "x", color="grey", label="the paper's figure (ATC'23)")
    ax.set_xlabel("arrived GPU request (% of capacity)")
    ax.set_ylabel("allocated GPU (% of capacity)")
    ax.set_xlim(60, GRID[-1] + 2)
    ax.set_ylim(60, 100)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def policy_list(known: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse ``type`` for comma-separated policy names out of ``known``."""

    def parse(text: str) -> list[str]:
        names = [p.strip() for p in text.split(",") if p.strip()]
        unknown = [p for p in names if p not in known]
        if not names or unknown:
            raise argparse.ArgumentTypeError(
                f"unknown policy {', '.join(unknown) or repr(text)}; choose from {', '.join(known)}"
            )
        return names

    return parse


def _default_file(name: str) -> str | None:
    try:
        return str(openb_dir() / name)
    except TraceDataMissing:
        return None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the experiment (``python -m app.sim.openb``, ``muster simulate openb``)."""
    trace, nodes = _default_file(DEFAULT_TRACE), _default_file(DEFAULT_NODES)
    parser.add_argument(
        "--trace",
        default=trace,
        required=trace is None,
        metavar="CSV",
        help=f"openb pod list (default: {trace or DEFAULT_TRACE + MISSING})",
    )
    parser.add_argument(
        "--nodes",
        default=nodes,
        required=nodes is None,
        metavar="CSV",
        help=f"openb node list, GPU nodes (default: {nodes or DEFAULT_NODES + MISSING})",
    )
    parser.add_argument(
        "--seeds", type=int, default=10, help="number of seeds, 0..N-1 (default 10, as the paper)"
    )
    parser.add_argument(
        "--policies",
        type=policy_list(POLICIES),
        default=list(POLICIES),
        metavar="P[,P..]",
        help=f"comma-separated, from {', '.join(POLICIES)} (default: all)",
    )
    parser.add_argument(
        "--plot", metavar="PNG", help="write allocation against arrived workload (needs matplotlib)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run the experiment the options describe; print the table (to ``out``, default stdout)
    and write the plot. 2 when the files cannot be read or the options make no sense."""
    out = out or sys.stdout
    if args.seeds < 1 or args.jobs < 1:
        print("openb: --seeds and --jobs must be at least 1", file=sys.stderr)
        return 2
    try:
        nodes = load_cluster_file(args.nodes)
        trace = load_trace(args.trace)
    except (OSError, ValueError) as exc:  # MusterError (bad node file) is a ValueError too
        print(f"openb: {exc}", file=sys.stderr)
        return 2
    policies = list(args.policies)
    gpus = sum(n.allocatable.gpu for n in nodes) // MILLI
    print(f"{Path(args.trace).name}: {len(trace)} pods; {len(nodes)} nodes, {gpus} GPUs; "
          f"{args.seeds} seeds", file=out)  # fmt: skip
    started = time.perf_counter()
    runs: list[Run] = []
    for r in iter_runs(nodes, trace, policies, range(args.seeds), jobs=args.jobs):
        runs.append(r)
        if not args.quiet:
            print(f"  {r.policy} seed {r.seed}: {r.at(130):.2f} % ({r.seconds:.1f} s)",
                  file=sys.stderr, flush=True)  # fmt: skip
    published = PUBLISHED.get(Path(args.trace).name)
    print(summary(runs, policies, published), file=out)
    print(f"wall time {time.perf_counter() - started:.1f} s", file=out)
    if args.plot:
        plot(runs, policies, args.plot, Path(args.trace).name, published)
        print(f"plot written to {args.plot}", file=out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(
        prog="python -m app.sim.openb", description=__doc__.split("\n")[0]
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
