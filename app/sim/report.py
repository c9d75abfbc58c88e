"""Side-by-side figures of simulation runs, as a text table, JSON, or a PNG plot."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from app.sim.metrics import Result


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _extra(key: str, fmt: str = "{:.0f}") -> Callable[[Result], str]:
    return lambda r: fmt.format(r.extra[key]) if key in r.extra else "-"


def _wall_ms(r: Result) -> str:
    mean, worst = r.extra.get("attempt_wall_ms_mean", 0.0), r.extra.get("attempt_wall_ms_max", 0.0)
    return f"{mean:.2f}/{worst:.0f}"


#: (row label, how to show it); the README explains each row.
ROWS: list[tuple[str, Callable[[Result], str]]] = [
    ("makespan (s)", lambda r: _seconds(r.makespan)),
    ("capacity lower bound (s)", lambda r: _seconds(r.lower_bound)),
    ("makespan / lower bound", lambda r: f"{r.ratio:.3f}"),
    ("FCFS greedy reference (s)", lambda r: _seconds(r.greedy_reference)),
    (
        "makespan / reference",
        lambda r: f"{r.makespan / r.greedy_reference:.3f}" if r.greedy_reference else "-",
    ),
    ("jobs completed", lambda r: f"{r.completed}/{r.jobs}"),
    ("jobs failed (deadline)", lambda r: str(r.failed)),
    ("jobs unfinished (time limit)", lambda r: str(r.unfinished)),
    ("partial-gang pod-seconds", lambda r: f"{r.partial_pod_seconds:.0f}"),
    ("reserved-idle pod-seconds", lambda r: f"{r.reserved_pod_seconds:.0f}"),
    ("time to full start p50 (s)", lambda r: _seconds(r.start_p50)),
    ("time to full start p99 (s)", lambda r: _seconds(r.start_p99)),
    ("CPU utilisation", lambda r: _percent(r.cpu_util)),
    ("GPU utilisation", lambda r: _percent(r.gpu_util)),
    ("scheduling attempts", lambda r: str(r.attempts)),
    ("failed binds", lambda r: str(r.bind_failures)),
    ("  of which barrier timeouts", _extra("barrier_timeouts")),
    ("planner cycles", _extra("planner_cycles")),
    ("nudges", _extra("nudges")),
    ("attempt wall ms (mean/max)", lambda r: _wall_ms(r)),
    ("simulation wall time (s)", lambda r: f"{r.wall_seconds:.1f}"),
]


def table(results: Sequence[Result]) -> str:
    """One column per run, one row per figure."""
    header = ["", *(r.label for r in results)]
    rows = [header] + [[label, *(show(r) for r in results)] for label, show in ROWS]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])]
        cells += [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def to_json(results: Sequence[Result]) -> list[dict[str, Any]]:
    """The figures (no samples or job records) as plain data."""
    out = []
    for r in results:
        row = {
            "label": r.label,
            "policy": r.policy,
            "makespan": r.makespan,
            "lowerBound": r.lower_bound,
            "ratio": r.ratio,
            "greedyReference": r.greedy_reference,
            "jobs": r.jobs,
            "completed": r.completed,
            "failed": r.failed,
            "unfinished": r.unfinished,
            "partialGangPodSeconds": r.partial_pod_seconds,
            "reservedIdlePodSeconds": r.reserved_pod_seconds,
            "startP50": r.start_p50,
            "startP99": r.start_p99,
            "cpuUtilisation": r.cpu_util,
            "gpuUtilisation": r.gpu_util,
            "attempts": r.attempts,
            "bindFailures": r.bind_failures,
            "wallSeconds": r.wall_seconds,
            **r.extra,
        }
        out.append({k: (None if isinstance(v, float) and math.isnan(v) else v)
                    for k, v in row.items()})  # fmt: skip
    return out


def plot(results: Sequence[Result], path: Path) -> None:
    """Utilisation and queue length over time, one line per run, as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpus = any(r.gpu_util is not None for r in results)
    fig, axes = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    util, queue = axes
    for r in results:
        times = [s.time for s in r.samples]
        (line,) = util.plot(times, [s.cpu_util * 100 for s in r.samples], label=f"{r.label} cpu")
        if gpus and r.gpu_util is not None:
            util.plot(times, [(s.gpu_util or 0) * 100 for s in r.samples], linestyle="--",
                      color=line.get_color(), label=f"{r.label} gpu")  # fmt: skip
        queue.plot(times, [s.pending_pods for s in r.samples], color=line.get_color(),
                   label=r.label)  # fmt: skip
    util.set_ylabel("allocated (%)")
    util.set_ylim(0, 105)
    util.set_title("Utilisation (resources held by bound pods)")
    util.legend(loc="lower left", fontsize="small")
    queue.set_ylabel("pending pods")
    queue.set_xlabel("simulated time (s)")
    queue.set_title("Queue length (pods created but not bound)")
    queue.legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
