"""What explain and what-if keep across cache changes (``SnapshotMemo.steady``) never changes
an answer: after random sequences of events (pending members and gangs coming, changing and
going, pods binding, ending or declaring other runtimes, planner cycles; the clock still or
moving), every gang's explanation, a pod's and a what-if's equal those computed from scratch
on the same outlook."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from app.core.cycle.memos import SnapshotMemo
from app.core.cycle.outlook import Outlook
from app.core.cycle.planner import Planner
from app.core.insight.explain import explain_gang, explain_pod
from app.core.insight.whatif import proposal_from, what_if
from app.core.model.parse import pod_from_dict
from app.core.model.values import Pod
from app.core.state.cache import ClusterCache
from tests.core.scenario import NOW
from tests.factories import node, pod_json

NODES = tuple(f"n{i}" for i in range(4))
RUNTIMES = ("10m", "30m", "1h", "3h")


def _member(gang: str, index: int, size: int, gpu: int, priority: int, runtime: str) -> Pod:
    data = pod_json(
        f"{gang}-{index}",
        uid=f"uid-{gang}-{index}",
        gpu=gpu,
        priority=priority,
        labels={"muster.io/pod-group": gang, "muster.io/min-member": str(size)},
        annotations={"muster.io/expected-runtime": runtime},
        created=float(index),
    )
    return pod_from_dict(data)


def _running(name: str, node_name: str, gpu: int, runtime: str, started: float) -> Pod:
    data = pod_json(
        name,
        uid=f"uid-{name}",
        gpu=gpu,
        node=node_name,
        phase="Running",
        annotations={"muster.io/expected-runtime": runtime},
    )
    data["status"]["startTime"] = _stamp(started)
    return pod_from_dict(data)


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _event(cache: ClusterCache, planner: Planner, rng: random.Random, step: int) -> None:
    pods = list(cache.snapshot().pods.values())
    pending = [p for p in pods if not p.node_name and not p.terminal]
    running = [p for p in pods if p.node_name and not p.terminal]
    kind = rng.choice(
        [
            "gang",
            "member",
            "member",
            "drop",
            "drop",
            "touch",
            "reshape",
            "reshape",
            "bind",
            "runtime",
            "finish",
            "cycle",
        ]
    )
    if kind == "gang" or not pending:
        size, gpu = rng.choice([(1, 8), (2, 4), (2, 8), (4, 2), (3, 1)])
        name, priority = f"g{step}", rng.choice([0, 0, 5])
        runtime = rng.choice(RUNTIMES)
        cache.upsert_pods([_member(name, i, size, gpu, priority, runtime) for i in range(size)])
    elif kind == "member":
        p = rng.choice(pending)
        cache.upsert_pods([replace(p, uid=f"{p.uid}-x{step}", name=f"{p.name}-x{step}")])
    elif kind == "drop":
        cache.delete_pod(rng.choice(pending).uid)
    elif kind == "touch":
        p = rng.choice(pending)
        cache.upsert_pods([replace(p, annotations={**p.annotations, "touched": str(step)})])
    elif kind == "reshape":  # a pending member asks for other GPUs: its gang's core changes
        p = rng.choice(pending)
        gpu = 1000 * rng.choice([1, 2, 4, 8])
        cache.upsert_pods([replace(p, requests=p.requests._replace(gpu=gpu))])
    elif kind == "bind":
        p = rng.choice(pending)
        cache.upsert_pods(
            [
                _running(
                    f"b{step}",
                    rng.choice(NODES),
                    rng.choice([1, 2]),
                    rng.choice(RUNTIMES),
                    NOW - 60 * rng.randrange(60),
                )
            ]
        )
        cache.delete_pod(p.uid)
    elif kind == "runtime" and running:
        p = rng.choice(running)
        runtime = rng.choice(RUNTIMES)
        cache.upsert_pods([replace(p, annotations={"muster.io/expected-runtime": runtime})])
    elif kind == "finish" and running:
        cache.delete_pod(rng.choice(running).uid)
    elif kind == "cycle":
        planner.cycle(force=True)


def _fresh(outlook: Outlook) -> Outlook:
    return replace(outlook, kept=SnapshotMemo(), memo={})


@pytest.mark.parametrize("advance", [False, True], ids=["still clock", "moving clock"])
@pytest.mark.parametrize("seed", range(4))
def test_kept_answers_equal_answers_from_scratch(seed: int, advance: bool) -> None:
    rng = random.Random(seed)
    cache = ClusterCache()
    cache.upsert_nodes([node(n, gpus=8) for n in NODES])
    cache.upsert_pods(
        [
            _running(
                f"r{i}",
                NODES[i % len(NODES)],
                rng.choice([2, 4]),
                rng.choice(RUNTIMES),
                NOW - 60 * rng.randrange(60),
            )
            for i in range(8)
        ]
    )
    cache.mark_synced()
    clock = [NOW]
    planner = Planner(cache, clock=lambda: clock[0], wall=lambda: clock[0], min_runtime=0.0)
    waited = 0
    for step in range(60):
        _event(cache, planner, rng, step)
        if advance:  # answers kept from an earlier call must still be right later
            clock[0] += rng.choice([0.0, 0.0, 1.0, 30.0, 600.0])
        outlook = planner.look()
        fresh = _fresh(outlook)
        for key in sorted(outlook.gangs):
            namespace, name = key.split("/")
            kept = explain_gang(outlook, namespace, name).as_dict()
            assert kept == explain_gang(fresh, namespace, name).as_dict(), (step, key)
            waited += kept["state"] == "waiting"
        for pod in list(outlook.session.snapshot.pods.values())[:3]:
            assert (
                explain_pod(outlook, pod.namespace, pod.name).as_dict()
                == explain_pod(fresh, pod.namespace, pod.name).as_dict()
            )
        body = {
            "name": f"w{step}",
            "replicas": 2,
            "pod": {
                "spec": {
                    "containers": [
                        {
                            "name": "m",
                            "resources": {"requests": {"nvidia.com/gpu": str(2 ** (step % 4))}},
                        }
                    ]
                }
            },
        }
        proposal = proposal_from(body, scheduler_name="muster", now=clock[0])
        assert what_if(outlook, proposal).as_dict() == what_if(fresh, proposal).as_dict(), step
    assert waited > 20  # the answers compared were mostly about waiting gangs


def test_a_line_kept_from_earlier_moves_with_the_clock_when_a_gang_in_it_fits_now() -> None:
    """Gang ``a`` (ahead in line) fits now, so it holds its room from whenever it is asked
    until an hour later; ``b`` waits for that room. Asked again ten minutes later (only a
    pending pod came and went meanwhile), ``b`` still waits an hour, not fifty minutes."""
    cache = ClusterCache()
    cache.upsert_nodes([node("n0", gpus=8)])
    cache.upsert_pods([_running("r", "n0", 4, "30m", NOW - 60)])
    cache.upsert_pods([_member("a", 0, 1, 4, 0, "1h"), _member("b", 0, 1, 8, 0, "10m")])
    clock = [NOW]
    planner = Planner(cache, clock=lambda: clock[0], wall=lambda: clock[0], min_runtime=0.0)
    first = explain_gang(planner.look(), "default", "b")
    assert (first.category, first.eta_seconds) == ("capacity", 3600.0), first.as_dict()
    assert _asked_again_later(cache, planner, clock, "b")["eta_seconds"] == 3600.0


def test_a_planned_gangs_room_frees_an_hour_after_it_is_asked_about() -> None:
    """Gang ``p`` is planned (it starts as soon as kube-scheduler binds it) for an hour; ``w``
    needs its room. Ten minutes later, with ``p`` still not bound, ``w`` still waits an hour."""
    cache = ClusterCache()
    cache.upsert_nodes([node("n0", gpus=8)])
    cache.upsert_pods([_member("p", 0, 1, 8, 0, "1h")])
    clock = [NOW]
    planner = Planner(cache, clock=lambda: clock[0], wall=lambda: clock[0], min_runtime=0.0)
    planner.cycle(force=True)
    assert planner.plan("default/p") is not None
    cache.upsert_pods([_member("w", 0, 1, 8, 0, "10m")])
    first = explain_gang(planner.look(), "default", "w")
    assert (first.category, first.eta_seconds) == ("priority", 3600.0), first.as_dict()
    assert _asked_again_later(cache, planner, clock, "w")["eta_seconds"] == 3600.0


def _asked_again_later(
    cache: ClusterCache, planner: Planner, clock: list[float], gang: str
) -> dict[str, Any]:
    """Gang ``gang``'s answer ten minutes later, after a pending pod came and went (checked
    against one from scratch)."""
    toggle = _member("t", 0, 1, 1, 0, "1h")
    cache.upsert_pods([toggle])
    cache.delete_pod(toggle.uid)
    clock[0] += 600.0
    outlook = planner.look()
    later = explain_gang(outlook, "default", gang).as_dict()
    assert later == explain_gang(_fresh(outlook), "default", gang).as_dict()
    return later
