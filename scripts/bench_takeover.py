"""Benchmark the takeover: from the leader's SIGKILL until the new leader completes a bind.

Usage::

    .venv/bin/python scripts/bench_takeover.py              # 5 kills
    .venv/bin/python scripts/bench_takeover.py --rounds 10

Runs the e2e control plane (etcd + kube-apiserver + kube-scheduler 1.20, tests/e2e), two real
``muster serve --leader-elect`` processes and a loopback proxy playing the Service (it routes
new connections round robin to the replicas whose ``/readyz`` answers, polled every 100 ms;
the follower forwards the verbs to the leader). Each round
SIGKILLs the leader, at once creates a 4-pod gang (1 GPU each), and times:

* **leads**: when the other replica reports itself leader (it won the Lease and took over);
* **first bind** and **whole**: when the watch sees the first / last member bound.

The killed replica then rejoins as a follower, and the roles swap every round. The baseline,
measured in the same run, is the same gang created while a healthy leader serves. Figures
and ratios are printed; it is not a pass/fail test (the target, issue 15, is a takeover of at
most 5 s to the first bind). The lease settings are Muster's defaults (3 s lease, 2 s renew
deadline, 0.5 s retry period) unless ``--lease-duration`` etc. say otherwise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "tests" / "e2e"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from controlplane import create_gpu_node, wait_for  # noqa: E402
from ha import HaCluster, ha_cluster  # noqa: E402
from harness import BindingWatch, delete_now, gpu_pod  # noqa: E402

GROUP = "bench"
SIZE = 4


def gang(name: str, ns: str) -> list[dict[str, object]]:
    labels = {"muster.io/pod-group": name, "muster.io/min-member": str(SIZE), "job": name}
    return [gpu_pod(f"{name}-{i}", 1, ns, GROUP, labels) for i in range(SIZE)]


def timed_gang(
    ha: HaCluster, seen: BindingWatch, ns: str, name: str, start: float
) -> tuple[float, float]:
    """Create gang ``name``; seconds from ``start`` to its first and its last member bound."""
    for body in gang(name, ns):
        ha.core.create_namespaced_pod(ns, body)
    members = [f"{name}-{i}" for i in range(SIZE)]
    wait_for(lambda: all(m in seen.current for m in members), 120, f"gang {name}", 0.01)
    times = [seen.bound_at[m] - start for m in members]
    for m in members:
        delete_now(ha.core, ns, m)
    return min(times), max(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="leader kills (default 5)")
    parser.add_argument("--lease-duration", type=float, default=3.0)
    parser.add_argument("--renew-deadline", type=float, default=2.0)
    parser.add_argument("--retry-period", type=float, default=0.5)
    args = parser.parse_args(argv)
    flags = (
        f"--lease-duration={args.lease_duration}",
        f"--renew-deadline={args.renew_deadline}",
        f"--retry-period={args.retry_period}",
    )
    rows: list[tuple[str, str, float, float, float]] = []
    baseline: list[float] = []
    with ha_cluster(*flags) as ha:
        ns = "bench"
        ha.core.create_namespace({"metadata": {"name": ns}})
        for i in range(2):
            create_gpu_node(ha.core, f"{GROUP}-{i}", gpus=8, labels={"e2e": GROUP})
        with BindingWatch(ha.core, ns) as seen:
            for r in range(args.rounds):
                wait_for(ha.followers_synced, 60, "the follower to sync")
                start = time.monotonic()
                baseline.append(timed_gang(ha, seen, ns, f"base{r}", start)[0])
                dead = ha.kill_leader()
                killed = time.monotonic()
                other = next(x for x in ha.replicas if x is not dead)
                for body in gang(f"kill{r}", ns):
                    ha.core.create_namespaced_pod(ns, body)
                wait_for(other.leads, 60, "the follower to take over", 0.01)
                ready = time.monotonic() - killed
                members = [f"kill{r}-{i}" for i in range(SIZE)]
                wait_for(lambda m=members: all(x in seen.current for x in m), 120, "the gang")
                times = [seen.bound_at[m] - killed for m in members]
                rows.append((dead.identity, other.identity, ready, min(times), max(times)))
                for m in members:
                    delete_now(ha.core, ns, m)
                dead.start()
                wait_for(dead.synced, 60, "the killed replica to rejoin")
    print(
        f"takeover after SIGKILL of the leader ({args.rounds} rounds; lease "
        f"{args.lease_duration:g}s, renew deadline {args.renew_deadline:g}s, retry "
        f"{args.retry_period:g}s; gang of {SIZE} x 1 GPU created right after the kill)"
    )
    print(f"{'killed':<10} {'new leader':<11} {'leads':>7} {'first bind':>11} {'whole':>7}")
    for killed_id, new_id, ready_s, first, last in rows:
        print(f"{killed_id:<10} {new_id:<11} {ready_s:>6.2f}s {first:>10.2f}s {last:>6.2f}s")
    firsts = [r[3] for r in rows]
    base = statistics.median(baseline)
    print(
        f"takeover to first bind: median {statistics.median(firsts):.2f}s, "
        f"max {max(firsts):.2f}s (target <= 5 s)"
    )
    print(f"baseline (healthy leader, same gang): median {base:.2f}s to first bind")
    print(f"ratio takeover/baseline: {statistics.median(firsts) / base:.1f}x (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
