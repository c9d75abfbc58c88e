"""Locust load test: replay kube-scheduler's extender traffic against a standalone Muster server.

Each simulated user is a scheduling loop like kube-scheduler's. Per pod (a fresh name and uid,
based on the pod kube-scheduler v1.32 sent in
tests/fixtures/kube-scheduler-v1.32/filter-nodecache.json, requesting 0, 1, 2, 4 or 8 GPUs with
matching cpu and memory, or -- one pod in ``MUSTER_SHARES`` -- a share of one GPU by
``muster.io/gpu-fraction``):

1. ``POST /filter`` with ``NodeNames`` = every node of the cluster file (or a random subset of
   ``MUSTER_CANDIDATES`` nodes);
2. ``POST /prioritize`` with the feasible nodes filter returned (skipped, as kube-scheduler
   does, when only one node is feasible);
3. ``POST /bind`` to the highest-scored node, ties broken at random. A bind answer with a
   non-empty ``Error`` (e.g. another user's pod took the room first) is a failure.

A pod with no feasible node is not bound; it is counted under the name ``unschedulable``
(type ``POD``). Every bound pod is counted under ``scheduled`` with the time of its whole
filter-prioritize-bind cycle. Pods are never deleted (there is no delete verb), so the cluster
fills up and the unschedulable count grows over a run; set ``MUSTER_BIND=0`` to measure the
steady state of filter + prioritize on an empty cluster instead.

How to run (from the repository root)::

    .venv/bin/python scripts/gen_cluster.py --nodes 500        # loadtest/clusters/nodes-500.yaml
    .venv/bin/muster serve --cluster loadtest/clusters/nodes-500.yaml --port 8888 &
    # (without the CLI:
    #  .venv/bin/python -c "import uvicorn; from pathlib import Path; from app.main import \\
    #  create_app; from app.settings import Settings; uvicorn.run(create_app(Settings( \\
    #  cluster_file=Path('loadtest/clusters/nodes-500.yaml'))), host='127.0.0.1', port=8888)" &)
    MUSTER_CLUSTER=loadtest/clusters/nodes-500.yaml .venv/bin/locust -f loadtest/locustfile.py \\
        --headless -u 20 -r 5 -t 30s --host http://127.0.0.1:8888
    kill %1                                                      # stop the server

Environment:

* ``MUSTER_CLUSTER`` (required): the cluster file the server was started with.
* ``MUSTER_CANDIDATES``: send a random subset of this many nodes to filter instead of all.
* ``MUSTER_BIND``: ``0`` skips bind (filter and prioritize only); default ``1``.
* ``MUSTER_SHARES``: the fraction of pods that ask for a share of one GPU (0.1-0.75) instead;
  default ``0.3``.
"""

from __future__ import annotations

import copy
import json
import os
import random
import re
import time
import uuid
from pathlib import Path
from typing import Any

from locust import FastHttpUser, constant, task

from app.core.model.clusterfile import load_cluster_file
from app.core.model.errors import MusterError

JSON_HEADERS = {"Content-Type": "application/json"}
#: A pod exactly as kube-scheduler 1.32 sent it (from the recorded fixtures).
POD_TEMPLATE: dict[str, Any] = json.loads((Path(__file__).parent / "pod.json").read_text())
NAMESPACES = ("team-a", "team-b", "research")
GPU_CHOICES = (0, 1, 2, 4, 8)
SHARE_CHOICES = ("0.1", "0.25", "0.5", "0.75")


def load_node_names() -> list[str]:
    """Node names of the cluster file named by ``MUSTER_CLUSTER``; exits with a clear message."""
    path = os.environ.get("MUSTER_CLUSTER")
    if not path:
        raise SystemExit(
            "set MUSTER_CLUSTER to the cluster file the Muster server was started with"
        )
    try:
        return [node.name for node in load_cluster_file(path)]
    except MusterError as exc:
        raise SystemExit(f"MUSTER_CLUSTER: {exc}") from exc


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    try:
        return int(value) if value else default
    except ValueError as exc:
        raise SystemExit(f"{name} must be an integer, got {value!r}") from exc


NODE_NAMES = load_node_names()
CANDIDATES = _env_int("MUSTER_CANDIDATES", 0)
BIND = _env_int("MUSTER_BIND", 1) != 0
try:
    SHARES = float(os.environ.get("MUSTER_SHARES") or 0.3)
except ValueError as exc:
    raise SystemExit(
        f"MUSTER_SHARES must be a number, got {os.environ['MUSTER_SHARES']!r}"
    ) from exc
if not 0 <= SHARES <= 1:
    raise SystemExit(f"MUSTER_SHARES must be between 0 and 1, got {SHARES}")


def random_shape(rng: random.Random) -> tuple[dict[str, str], dict[str, str]]:
    """Requests and annotations of a random pod: a GPU share (``SHARES`` of the time, with the
    ``muster.io/gpu-share`` marker Muster's webhook would add), else ``random_requests``."""
    if rng.random() < SHARES:
        requests = {"cpu": rng.choice(("1", "2", "4")), "memory": f"{rng.choice((4, 8))}Gi",
                    "muster.io/gpu-share": "1"}  # fmt: skip
        return requests, {"muster.io/gpu-fraction": rng.choice(SHARE_CHOICES)}
    return random_requests(rng), {}


def random_requests(rng: random.Random) -> dict[str, str]:
    """Requests of a random pod: 0/1/2/4/8 GPUs with cpu and memory to match."""
    gpus = rng.choice(GPU_CHOICES)
    if gpus == 0:
        return {
            "cpu": rng.choice(("500m", "1", "2", "4")),
            "memory": f"{rng.choice((1, 2, 4, 8))}Gi",
        }
    return {
        "cpu": str(gpus * rng.choice((4, 8, 12))),
        "memory": f"{gpus * rng.choice((16, 32, 64))}Gi",
        "nvidia.com/gpu": str(gpus),
    }


def make_pod(
    name: str,
    uid: str,
    namespace: str,
    requests: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pending pod as kube-scheduler embeds it in ExtenderArgs (camelCase, no kind): the
    recorded kubectl-created pod of ``pod.json`` with this name, uid, requests and
    annotations."""
    limits = {k: v for k, v in requests.items() if k in ("nvidia.com/gpu", "muster.io/gpu-share")}
    resources = {"limits": limits, "requests": requests} if limits else {"requests": requests}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    pod = copy.deepcopy(POD_TEMPLATE)
    meta = pod["metadata"]
    meta.update(name=name, namespace=namespace, uid=uid, creationTimestamp=now)
    meta.update(resourceVersion=str(random.randint(1000, 10**7)), labels={"app": "muster-load"})
    meta["managedFields"][0]["time"] = now
    if annotations:
        meta["annotations"] = {**meta.get("annotations", {}), **annotations}
    pod["spec"]["containers"][0]["resources"] = resources
    return pod


def candidates(rng: random.Random) -> list[str]:
    """The NodeNames of one filter call: all nodes, or a random ``MUSTER_CANDIDATES`` subset."""
    if 0 < CANDIDATES < len(NODE_NAMES):
        return rng.sample(NODE_NAMES, CANDIDATES)
    return list(NODE_NAMES)


def error_kind(error: str, replace: dict[str, str]) -> str:
    """``error`` with pod and node names and amounts generalised, so locust groups failures."""
    for value, placeholder in replace.items():
        error = error.replace(value, placeholder)
    return re.sub(r"\b\d+(\.\d+)?[A-Za-z]*\b", "N", error)


def best_host(scores: list[dict[str, Any]], rng: random.Random) -> str:
    """The highest-scored host; ties broken at random."""
    top = max(entry["Score"] for entry in scores)
    return rng.choice([entry["Host"] for entry in scores if entry["Score"] == top])


class SchedulerUser(FastHttpUser):
    """One kube-scheduler scheduling loop: filter, prioritize, bind, pod after pod."""

    wait_time = constant(0)

    def on_start(self) -> None:
        """Give each user its own random stream."""
        self.rng = random.Random()

    def _post(
        self, path: str, body: dict[str, Any], replace: dict[str, str] | None = None
    ) -> Any | None:
        """POST ``body``; the decoded answer, or ``None`` after recording a failure.

        An answer with a non-empty ``Error`` is a failure, reported with the values in
        ``replace`` (pod and node names) swapped for placeholders.
        """
        with self.client.post(
            path, data=json.dumps(body), headers=JSON_HEADERS, name=path, catch_response=True
        ) as response:
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}: {(response.text or '')[:200]}")
                return None
            try:
                answer = response.json()
            except ValueError:
                response.failure("answer is not JSON")
                return None
            if isinstance(answer, dict) and answer.get("Error"):
                response.failure(f"Error: {error_kind(answer['Error'], replace or {})}")
                return None
            response.success()
            return answer

    def _count_pod(self, name: str, started: float) -> None:
        """Record a pod outcome (``scheduled`` / ``unschedulable``) with its cycle time."""
        self.environment.events.request.fire(
            request_type="POD",
            name=name,
            response_time=(time.perf_counter() - started) * 1000,
            response_length=0,
            exception=None,
            context={},
        )

    @task
    def schedule_one_pod(self) -> None:
        """Take one new pod through filter, prioritize and bind."""
        started = time.perf_counter()
        rng = self.rng
        uid = str(uuid.uuid4())
        namespace = rng.choice(NAMESPACES)
        name = f"load-{uid[:8]}"
        pod = make_pod(name, uid, namespace, *random_shape(rng))
        answer = self._post("/filter", {"Pod": pod, "Nodes": None, "NodeNames": candidates(rng)})
        if answer is None:
            return
        feasible = answer.get("NodeNames") or []
        if not feasible:
            self._count_pod("unschedulable", started)
            return
        if len(feasible) == 1:
            node = feasible[0]
        else:
            scores = self._post("/prioritize", {"Pod": pod, "Nodes": None, "NodeNames": feasible})
            if not scores:
                return
            node = best_host(scores, rng)
        if BIND:
            bind = {"PodName": name, "PodNamespace": namespace, "PodUID": uid, "Node": node}
            replace = {f"{namespace}/{name}": "<pod>", uid: "<uid>", name: "<pod>", node: "<node>"}
            if self._post("/bind", bind, replace) is None:
                return
        self._count_pod("scheduled", started)
