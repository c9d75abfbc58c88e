"""deploy/prometheus and deploy/grafana against a real Prometheus scraping a real Muster.

Muster serves over uvicorn on loopback with a staged state: a queue at its limit with more work
waiting on quota, a preemption, two half-used nodes and a gang that waits for fragmentation
(past the start first promised to it), a queue below its guarantee with demand that cannot
fit, a refused bind, an admission review. Debian's Prometheus scrapes it every second with
deploy/prometheus/muster-rules.yaml loaded; the recording rules and alerts must say what the
staged state is, and every query of the Grafana dashboard must return data.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml

from app.main import create_app
from app.settings import Settings
from tests.conftest import running
from tests.factories import EPOCH, pod_json
from tests.prometheus import Prometheus, prometheus, promtool
from tests.reviews import review

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "deploy" / "prometheus" / "muster-rules.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "muster-rules.test.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "muster-dashboard.json"

CLUSTER = {"nodes": [{"namePrefix": "n", "count": 6, "gpus": 8}]}
NODES = [f"n{i}" for i in range(6)]
QUEUES = {
    "defaultQueue": "batch",
    "queues": [
        {"name": "batch"},
        {"name": "research", "guaranteed": {"nvidia.com/gpu": 8}, "limit": {"nvidia.com/gpu": 16}},
        {"name": "prod", "guaranteed": {"nvidia.com/gpu": 16}},
        {"name": "starved", "guaranteed": {"nvidia.com/gpu": 16}},
    ],
}
#: Waiting gangs were created two minutes ago.
AGE = 120.0


# -- the rules files on their own ---------------------------------------------------------


def test_promtool_checks_the_rules() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout


def test_promtool_unit_tests_of_the_alerts_pass() -> None:
    tested = promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # Every alert of the rules file has a unit test.
    alerts = {
        r["alert"]
        for g in yaml.safe_load(RULES.read_text())["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    covered = {t["alertname"] for case in tests for t in case.get("alert_rule_test", [])}
    assert alerts <= covered, alerts - covered


def test_the_dashboard_imports_cleanly() -> None:
    """One data source input, unique panel ids, every panel queried through it, no overlap."""
    board = json.loads(DASHBOARD.read_text())
    (source,) = board["__inputs"]
    assert (source["name"], source["pluginId"]) == ("DS_PROMETHEUS", "prometheus")
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, (panel["title"], cells[(x, y)])
                cells[(x, y)] = panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${DS_PROMETHEUS}"


# -- staging ----------------------------------------------------------------------------------


def _filter(client: httpx.Client, pod: dict[str, Any]) -> list[str]:
    body = {"Pod": pod, "NodeNames": NODES}
    names: list[str] = client.post("/filter", content=json.dumps(body)).json()["NodeNames"]
    return names


def _bind(client: httpx.Client, pod: dict[str, Any], node: str) -> str:
    meta = pod["metadata"]
    body = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"]}
    error: str = client.post("/bind", content=json.dumps(body | {"Node": node})).json()["Error"]
    return error


def _created() -> float:
    """``pod_json``'s ``created`` for a pod made ``AGE`` seconds ago."""
    return time.time() - AGE - EPOCH.timestamp()


def _gang(name: str, size: int, gpu: int, queue: str, priority: int = 0) -> list[dict[str, Any]]:
    labels = {
        "muster.io/pod-group": name,
        "muster.io/min-member": str(size),
        "muster.io/queue": queue,
    }
    return [
        pod_json(
            f"{name}-{i}",
            gpu=gpu,
            labels=labels,
            priority=priority,
            namespace="ml",
            created=_created(),
        )
        for i in range(size)
    ]


def _learn(client: httpx.Client, pods: list[dict[str, Any]]) -> None:
    """Standalone Muster learns pods from filter calls (a cluster's watch would)."""
    for pod in pods:
        _filter(client, pod)


def _start(client: httpx.Client, pods: list[dict[str, Any]]) -> None:
    """kube-scheduler's part for a gang: filter each member to its planned node, bind all."""
    _learn(client, pods)
    placed = [(pod, _until(f"a plan for {pod['metadata']['name']}", client, pod)) for pod in pods]
    with ThreadPoolExecutor(len(pods)) as pool:  # the barrier holds each until all arrive
        errors = list(pool.map(lambda pn: _bind(client, *pn), placed))
    assert errors == [""] * len(pods)


def _until(what: str, client: httpx.Client, pod: dict[str, Any], timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while True:
        nodes = _filter(client, pod)
        if len(nodes) == 1:
            return nodes[0]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def stage(client: httpx.Client) -> None:
    """The state the rules are checked against (see the module docstring)."""
    # research runs at its limit (16 of 16 GPUs), and more of its work waits on quota.
    _start(client, _gang("train", 2, 8, "research", priority=10))
    _learn(client, _gang("more", 1, 8, "research"))
    # Low-priority batch work fills the rest; urgent prod work preempts it (the planner loop
    # evicts it whole, then the urgent gang binds).
    _start(client, _gang("low", 4, 8, "batch"))
    _start(client, _gang("urgent", 2, 8, "prod", priority=100))
    # Half of each of the two nodes left: 8 GPUs free, none whole on one node. The halves
    # should have ended a second after they started, so the gang waiting for 8 GPUs on one
    # node is promised an immediate start that does not come.
    free = [n["name"] for n in client.get("/debug/nodes").json()["nodes"] if n["gpus"]["free"]]
    assert len(free) == 2, free
    for i, node in enumerate(free):
        half = pod_json(
            f"half-{i}",
            gpu=4,
            priority=50,
            namespace="ml",
            labels={"muster.io/queue": "batch"},
            annotations={"muster.io/expected-runtime": "1s"},
        )
        _learn(client, [half])
        assert _bind(client, half, node) == ""
    _learn(client, _gang("wide", 1, 8, "batch"))
    # starved is below its guarantee, and its demand fits no node.
    _learn(client, _gang("huge", 1, 16, "starved"))
    answer = client.post("/mutate", json=review(pod_json("web", namespace="ml")))
    assert answer.status_code == 200


def refuse_a_bind(client: httpx.Client) -> None:
    """A bind the cache refuses: n0 is full."""
    stray = pod_json("stray", gpu=8, namespace="ml")
    _learn(client, [stray])
    assert "no longer fits" in _bind(client, stray, "n0")


# -- the real thing ---------------------------------------------------------------------------


def _one(prom: Prometheus, expr: str) -> dict[tuple[tuple[str, str], ...], float] | None:
    values = prom.value(expr)
    return values or None


def _if(value: T, ok: Callable[[T], bool]) -> T | None:
    return value if ok(value) else None


def _by(values: dict[tuple[tuple[str, str], ...], float], label: str) -> dict[str, float]:
    return {dict(k)[label]: v for k, v in values.items()}


def test_rules_alerts_and_dashboard_against_a_real_prometheus(tmp_path: Path) -> None:
    cluster, queues = tmp_path / "cluster.yaml", tmp_path / "queues.yaml"
    cluster.write_text(yaml.safe_dump(CLUSTER))
    queues.write_text(yaml.safe_dump(QUEUES))
    app = create_app(Settings(cluster_file=cluster, queue_file=queues))
    with ExitStack() as server:
        client = server.enter_context(running(app))
        target = str(client.base_url).removeprefix("http://").rstrip("/")
        with prometheus(tmp_path, {"muster": target}, [RULES]) as prom:
            prom.poll("a first scrape of Muster", lambda: _one(prom, 'up{job="muster"} == 1'))
            stage(client)
            refuse_a_bind(client)  # after a scrape saw muster_bind_errors_total at 0
            lost = client.get("/debug/events").json()["totals"]["gpuSecondsLost"]["preemption"]
            assert lost > 0
            _check_recording_rules(prom, lost)
            _check_alerts(prom)
            _check_dashboard(prom)
            server.close()  # Muster stops: up turns 0 and MusterDown goes pending
            prom.poll("up == 0", lambda: _one(prom, 'up{job="muster"} == 0'))
            alerts = prom.poll(
                "MusterDown", lambda: _if(prom.alerts(), lambda a: "MusterDown" in a)
            )
            (down,) = alerts["MusterDown"]
            assert down["state"] == "pending" and down["labels"]["instance"] == target


def _check_recording_rules(prom: Prometheus, lost: float) -> None:
    health = prom.poll(
        "every rule evaluated",
        lambda: _if(prom.rule_health(), lambda h: bool(h) and "unknown" not in h.values()),
    )
    assert set(health.values()) == {"ok"}, health
    starved = prom.poll("the starved queue", lambda: _one(prom, "muster:queue_starved_gpus"))
    assert _by(starved, "queue") == {"starved": 16.0}
    used = _by(prom.value("muster:queue_gpu_guarantee_used:ratio"), "queue")
    assert used == {"research": 2.0, "prod": 1.0, "starved": 0.0}
    waiting = prom.poll(
        "the waiting gangs by category",
        lambda: _if(
            _by(prom.value("muster:gangs_waiting:sum"), "category"),
            lambda w: w.get("fragmentation") == 1,
        ),
    )
    assert {k: v for k, v in waiting.items() if v} == {
        "quota": 1.0,
        "fragmentation": 1.0,
        "capacity": 1.0,
    }
    overdue = prom.poll(
        "wide past its ETA",
        lambda: _if(
            _by(prom.value("muster:gang_overdue_seconds:max"), "queue"),
            lambda v: v.get("batch", 0) > 0,
        ),
    )
    assert "starved" not in overdue  # huge fits no node: no ETA, no promise
    assert overdue["research"] < 0  # more waits on quota: due once research's own work ends
    errors = prom.poll("the refused bind", lambda: _one(prom, "muster:bind_errors:rate5m > 0"))
    assert len(errors) == 1
    victims = _by(prom.value("muster:preemption_victims:increase1h"), "kind")
    assert 1.0 <= victims["preemption"] < 2.0 and victims["reclaim"] == 0
    gpu_seconds = _by(prom.value("muster:preemption_gpu_seconds_lost:increase1h"), "kind")
    assert lost <= gpu_seconds["preemption"] < 2 * lost
    cycles = prom.value("muster:planner_cycle_duration_seconds:p99")
    assert len(cycles) == 1 and next(iter(cycles.values())) > 0
    webhook = _by(prom.value("muster:webhook_request_duration_seconds:p99"), "webhook")
    assert set(webhook) == {"mutate"}
    verbs = _by(prom.value("muster:extender_request_duration_seconds:p99"), "verb")
    assert set(verbs) == {"filter", "bind"}


def _check_alerts(prom: Prometheus) -> None:
    expected = {"MusterGangWaitingPastETA", "MusterQueueStarved", "MusterGpuFragmentation",
                "MusterBindErrors"}  # fmt: skip
    alerts = prom.poll(
        "the staged alerts", lambda: _if(prom.alerts(), lambda a: expected <= set(a))
    )
    assert [a["labels"]["gang"] for a in alerts["MusterGangWaitingPastETA"]] == ["wide"]
    assert [a["labels"]["queue"] for a in alerts["MusterQueueStarved"]] == ["starved"]
    (fragmentation,) = alerts["MusterGpuFragmentation"]
    assert float(fragmentation["value"]) == 1.0  # all 8 free GPUs are in halves of nodes
    for quiet in ("MusterDown", "MusterAbsent", "MusterCensusFailing", "MusterGangRollbacks"):
        assert quiet not in alerts, alerts[quiet]


def _check_dashboard(prom: Prometheus) -> None:
    board = json.loads(DASHBOARD.read_text())
    (variable,) = board["templating"]["list"]
    match = re.fullmatch(r"label_values\((\w+), (\w+)\)", variable["definition"])
    assert match is not None
    queues = {row["metric"][match[2]] for row in prom.query(match[1])}
    assert queues == {"batch", "research", "prod", "starved"}
    exprs = [
        (panel["title"], target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]
    assert len(exprs) >= 25
    empty = [
        (title, expr)
        for title, expr in exprs
        if not prom.query(expr.replace("$queue", variable["allValue"]))
    ]
    assert empty == []
