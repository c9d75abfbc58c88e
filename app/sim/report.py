"""Side-by-side figures of simulation runs, as a text table, JSON, or a PNG plot."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from app.sim.metrics import QueueFigures, Result


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
    ("evicted pods", _extra("evicted_pods")),
    ("evicted gangs", _extra("evicted_gangs")),
    ("GPU-hours lost to evictions", _extra("gpu_hours_lost", "{:.2f}")),
    ("CPU-hours lost to evictions", _extra("cpu_hours_lost", "{:.2f}")),
    ("high-priority jobs started", lambda r: _started(r)),
    ("preemption latency p50 (s)", _extra("preemption_latency_p50", "{:.1f}")),
    ("preemption latency max (s)", _extra("preemption_latency_max", "{:.1f}")),
    ("largest job: wait (s)", _extra("largest_wait", "{:.1f}")),
    ("largest job: reserved at (s)", _extra("largest_reserved_at", "{:.1f}")),
    ("largest job: estimated start (s)", _extra("largest_estimated_start", "{:.1f}")),
    ("largest job: actual start (s)", _extra("largest_started", "{:.1f}")),
    ("largest job: start - estimate (s)", _extra("largest_start_slip", "{:.1f}")),
    ("largest job: within estimate+slack", lambda r: _yes_no(r.extra.get("largest_on_time"))),
    ("simulation wall time (s)", lambda r: f"{r.wall_seconds:.1f}"),
]


def _started(r: Result) -> str:
    if "high_priority_jobs" not in r.extra:
        return "-"
    return f"{r.extra['high_priority_started']:.0f}/{r.extra['high_priority_jobs']:.0f}"


def _yes_no(value: float | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")


#: Per-queue figures (one row per queue); the README explains each column.
QUEUE_COLUMNS: list[tuple[str, Callable[[QueueFigures], str]]] = [
    ("queue", lambda q: q.name),
    ("jobs", lambda q: str(q.jobs)),
    ("share", lambda q: _percent(q.mean_share)),
    ("deserved", lambda q: _percent(q.mean_deserved)),
    ("fair-share error", lambda q: _percent(q.fair_share_error)),
    ("wait p50", lambda q: _seconds(q.wait_p50)),
    ("wait p99", lambda q: _seconds(q.wait_p99)),
    ("completion p50", lambda q: _seconds(q.completion_p50)),
    ("completion p99", lambda q: _seconds(q.completion_p99)),
]


def queue_table(result: Result) -> str:
    """One row per queue: share and deserved share while saturated, waits, completion times."""
    rows = [[name for name, _ in QUEUE_COLUMNS]]
    rows += [[show(q) for _, show in QUEUE_COLUMNS] for q in result.queues]
    saturated = sum(1 for s in result.queue_samples if s.saturated)
    return _grid(rows) + f"\n(saturated samples: {saturated} of {len(result.queue_samples)})"


def _grid(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])]
        cells += [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def table(results: Sequence[Result]) -> str:
    """One column per run, one row per figure."""
    header = ["", *(r.label for r in results)]
    rows = [header] + [[label, *(show(r) for r in results)] for label, show in ROWS]
    return _grid(rows)


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
            "queues": [_queue_json(q) for q in r.queues],
        }
        out.append({k: (None if isinstance(v, float) and math.isnan(v) else v)
                    for k, v in row.items()})  # fmt: skip
    return out


def _queue_json(q: QueueFigures) -> dict[str, Any]:
    return {
        "name": q.name, "jobs": q.jobs, "share": q.mean_share, "deserved": q.mean_deserved,
        "fairShareError": q.fair_share_error, "waitP50": q.wait_p50, "waitP99": q.wait_p99,
        "completionP50": q.completion_p50, "completionP99": q.completion_p99,
    }  # fmt: skip


def plot(results: Sequence[Result], path: Path) -> None:
    """Utilisation and queue length over time, one line per run, as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpus = any(r.gpu_util is not None for r in results)
    shared = [r for r in results if r.queues]
    fig, axes = plt.subplots(2 + len(shared), 1, figsize=(10, 7 + 3.5 * len(shared)),
                             sharex=True, squeeze=False)  # fmt: skip
    util, queue = axes[0][0], axes[1][0]
    for r, row in zip(shared, axes[2:], strict=True):
        _plot_shares(row[0], r)
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
    queue.xaxis.set_tick_params(labelbottom=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_shares(ax: Any, r: Result) -> None:  # noqa: ANN401 - a matplotlib Axes
    """Each queue's dominant share over time (solid) and its deserved share (dashed)."""
    times = [s.time for s in r.queue_samples]
    for q in r.queues:
        (line,) = ax.plot(times, [100 * s.share[q.name] for s in r.queue_samples], label=q.name)
        ax.plot(times, [100 * s.deserved[q.name] for s in r.queue_samples], linestyle="--",
                color=line.get_color(), label=f"{q.name} deserved")  # fmt: skip
    ax.set_ylabel("dominant share (%)")
    ax.set_ylim(0, 105)
    ax.set_title(f"Queue shares ({r.label}; dashed: deserved by DRF)")
    ax.legend(loc="upper right", fontsize="small", ncol=2)
