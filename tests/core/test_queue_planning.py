"""The planner with queues: quota reasons vs capacity reasons, DRF order, non-gang quota."""

from __future__ import annotations

import json
from pathlib import Path

from app.core.state.queuefile import QueueFile
from app.main import create_app
from app.settings import Settings
from tests.conftest import running
from tests.core.gangsim import Cluster
from tests.factories import node, pod, pod_json

QUEUES = """
queues:
  - {name: default}
  - {name: a, guaranteed: {nvidia.com/gpu: 4}, limit: {nvidia.com/gpu: 6}}
  - {name: b, guaranteed: {nvidia.com/gpu: 4}, limit: {nvidia.com/gpu: 8}}
"""


def cluster(tmp_path: Path, gpus: int = 8, text: str = QUEUES) -> Cluster:
    path = tmp_path / "queues.yaml"
    path.write_text(text)
    c = Cluster([node("n", gpus=gpus)], planner_options={"queues": QueueFile(path)})
    return c


def gang(name: str, size: int, gpu: int, queue: str, created: int = 0) -> list:
    labels = {
        "muster.io/pod-group": name,
        "muster.io/min-member": str(size),
        "muster.io/queue": queue,
    }
    return [pod(f"{name}-{i}", gpu=gpu, labels=labels, created=created) for i in range(size)]


def test_quota_reason_is_distinct_from_capacity_reason(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    running_a = gang("a1", 3, 2, "a")  # 6 GPUs: a at its limit
    c.cache.upsert_pods(running_a)
    c.cache.reserve({p.uid: "n" for p in running_a})
    more_a = gang("a2", 1, 1, "a", created=5)
    big_b = gang("b1", 2, 2, "b", created=6)  # 4 GPUs, only 2 free: capacity
    c.cache.upsert_pods(more_a + big_b)
    c.extender.planner.cycle(force=True)
    reasons = {r["gang"]: r["reason"] for r in c.extender.planner.describe()}
    assert reasons["default/a2"] == "queue a: nvidia.com/gpu 6/6 at limit (needs 1)"
    assert (
        reasons["default/b1"]
        == "1 of 2 members placeable; needs 1 more node with 2 free nvidia.com/gpu"
    )


def test_drf_serves_the_queue_with_the_smaller_share_first(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    held = gang("a0", 2, 2, "a")  # a holds 4 GPUs
    c.cache.upsert_pods(held)
    c.cache.reserve({p.uid: "n" for p in held})
    older_a = gang("a1", 1, 2, "a", created=1)
    newer_b = gang("b1", 1, 2, "b", created=9)
    extra_b = gang("b2", 1, 4, "b", created=10)  # would not fit after b1 anyway
    c.cache.upsert_pods(older_a + newer_b + extra_b)
    planned = c.extender.planner.cycle(force=True)
    assert planned[0] == "default/b1"  # b's share 0 < a's share, despite a1 being older


def test_non_gang_pod_is_held_to_its_queue(tmp_path: Path) -> None:
    c = cluster(tmp_path)
    held = [pod(f"h{i}", gpu=2, labels={"muster.io/queue": "a"}, node="n") for i in range(3)]
    c.cache.upsert_pods(held)
    one_more = pod("x", gpu=1, labels={"muster.io/queue": "a"})
    result = c.extender.filter(one_more, ["n"])
    assert result.unresolvable == {"n": "queue a: nvidia.com/gpu 6/6 at limit (needs 1)"}
    ghost = pod("y", gpu=1, labels={"muster.io/queue": "ghost"})
    assert c.extender.filter(ghost, ["n"]).unresolvable == {"n": "queue ghost does not exist"}
    other_scheduler = pod("z", gpu=1)  # default-scheduler pod, no queue: not held to quotas
    assert c.extender.filter(other_scheduler, ["n"]).feasible == ["n"]


def test_debug_queues_over_http(tmp_path: Path) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(QUEUES)
    app = create_app(Settings(demo=True, queue_file=path))
    with running(app) as client:
        body = json.dumps(
            {"Pod": pod_json("t", gpu=4, labels={"muster.io/queue": "b"}), "NodeNames": ["h100-0"]}
        )
        assert client.post("/filter", content=body).json()["NodeNames"] == ["h100-0"]
        uid = json.loads(body)["Pod"]["metadata"]["uid"]
        bind = {"PodName": "t", "PodNamespace": "default", "PodUID": uid, "Node": "h100-0"}
        assert client.post("/bind", content=json.dumps(bind)).json() == {"Error": ""}
        answer = client.get("/debug/queues").json()
    rows = {q["name"]: q for q in answer["queues"]}
    assert answer["file"] == str(path) and answer["configError"] == ""
    assert rows["b"]["usage"]["nvidia.com/gpu"] == "4"
    assert rows["b"]["limit"]["nvidia.com/gpu"] == "8" and rows["a"]["limit"]["cpu"] == "unlimited"
    assert rows["b"]["guaranteed"]["nvidia.com/gpu"] == "4"
    assert set(rows["b"]) >= {"borrowed", "lent", "fairShare", "pending", "weight"}
