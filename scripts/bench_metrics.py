"""Benchmark one ``/metrics`` scrape in process, against a forced planner cycle as baseline.

Usage::

    .venv/bin/python scripts/bench_metrics.py                  # 1213 nodes, 2000 gangs x 10
    .venv/bin/python scripts/bench_metrics.py --nodes 500 --gangs 200

The cache holds ``--nodes`` nodes of 8 GPUs and ``--gangs`` gangs of ``--size`` one-GPU pods
(as ``scripts/bench_planner.py``), planned by one cycle: what fits gets a plan, the rest waits
(``capacity``). Measured, ``--repeat`` times (median and best):

* **first scrape**: ``generate_latest`` of the app's registry on a cold census (it explains
  waiting gangs within its time budget; the rest are counted as unjudged);
* **scrape, nothing changed**: again, on the same cache (judgements are reused);
* **scrape after a cycle**: after a forced planner cycle (what changed is judged again);
* **baseline**: one forced planner cycle on the same cache (what Muster does every second).

Prints figures and ratios against the baseline; it is not a pass/fail test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "scripts"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench_planner import make_gangs, make_nodes, table, timed  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402

from app.api.metrics import Metrics  # noqa: E402
from app.core.state.gateway import InMemoryGateway  # noqa: E402
from app.services import Services  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.wiring import build_cache, build_graph  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1213)
    parser.add_argument("--gangs", type=int, default=2000)
    parser.add_argument("--size", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    settings = Settings(strategy="binpack")
    cache = build_cache(settings)
    cache.upsert_nodes(make_nodes(args.nodes))
    cache.upsert_pods(make_gangs(args.gangs, args.size, 1))
    cache.mark_synced()
    gateway = InMemoryGateway(cache)
    graph = build_graph(settings, cache, gateway)
    planned = len(graph.planner.cycle(force=True))
    services = Services(
        settings,
        cache,
        gateway,
        graph.extender,
        journal=graph.journal,
        timings=graph.timings,
        census=graph.census,
    )
    registry = Metrics(services).registry
    cold = timed(lambda: generate_latest(registry))
    first = graph.census.take()
    steady, churned, base = [], [], []
    for _ in range(args.repeat):
        steady.append(timed(lambda: generate_latest(registry)))
        base.append(timed(lambda: graph.planner.cycle(force=True)))
        churned.append(timed(lambda: generate_latest(registry)))
    last = graph.census.take()
    print(
        f"/metrics scrape: {args.nodes} nodes x 8 GPUs, {args.gangs} gangs x {args.size} pods; "
        f"{planned} planned, {first.states['waiting']} waiting; census budget "
        f"{graph.census.budget:g} s"
    )
    print(
        f"after the first scrape: {first.unjudged} unjudged, {first.stale} stale; "
        f"after {2 * args.repeat + 2} scrapes: {last.unjudged} unjudged, {last.stale} stale"
    )
    table(
        [
            ("first scrape (cold)", [cold]),
            ("scrape, nothing changed", steady),
            ("scrape after a cycle", churned),
            ("baseline (forced cycle)", base),
        ],
        base,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
