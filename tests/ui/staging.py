"""Real state for the dashboard tests, built the way kube-scheduler builds it: through the
extender verbs (filter, prioritize, bind) of a running Muster."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from app.core.model.labels import GPU_FRACTION, GPU_SHARE_RESOURCE, MIN_MEMBER, POD_GROUP, QUEUE
from tests.factories import pod_json

#: The demo cluster's nodes (app/data/demo-cluster.yaml).
DEMO_NODES = [
    "h100-0", "h100-1", "h100-2", "h100-3", "a100-0", "a100-1", "t4-0", "cpu-0", "cpu-1",
]  # fmt: skip

#: A queue tree with a parent, a weighted child with a guarantee, and a child with a limit.
QUEUES = """\
defaultQueue: default
queues:
  - {name: default}
  - name: org
    guaranteed: {nvidia.com/gpu: 20}
  - {name: research, parent: org, weight: 2, guaranteed: {nvidia.com/gpu: 16, cpu: "8"}}
  - {name: team-a, parent: org, guaranteed: {nvidia.com/gpu: 4}, limit: {nvidia.com/gpu: 8}}
"""


def created(pod: dict[str, Any], minutes_ago: float) -> dict[str, Any]:
    """``pod`` with a creation time ``minutes_ago`` before now (so ages show)."""
    stamp = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    pod["metadata"]["creationTimestamp"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
    return pod


def member(
    name: str, gang: str, size: int, gpu: int, queue: str, ns: str = "ml", age: float = 5
) -> dict[str, Any]:
    """A gang member asking for ``gpu`` whole GPUs, created ``age`` minutes ago."""
    labels = {POD_GROUP: gang, MIN_MEMBER: str(size), QUEUE: queue}
    pod = pod_json(name, gpu=gpu, cpu="2", memory="8Gi", namespace=ns, labels=labels)
    return created(pod, age)


def shared(name: str, fraction: str, queue: str = "default") -> dict[str, Any]:
    """A pod asking for ``fraction`` of one GPU (the annotation and the share marker)."""
    pod = pod_json(
        name, cpu="500m", memory="2Gi", namespace="serving", labels={QUEUE: queue},
        annotations={GPU_FRACTION: fraction},
    )  # fmt: skip
    resources = pod["spec"]["containers"][0]["resources"]
    resources["requests"][GPU_SHARE_RESOURCE] = "1"
    resources["limits"] = {GPU_SHARE_RESOURCE: "1"}
    return pod


class KubeScheduler:
    """Sends pods through Muster's verbs as kube-scheduler does (nodeCacheCapable)."""

    def __init__(self, client: httpx.Client, nodes: list[str]) -> None:
        self.client = client
        self.nodes = nodes

    def _post(self, client: httpx.Client, verb: str, body: dict[str, Any]) -> Any:
        answer = client.post(f"/{verb}", content=json.dumps(body))
        assert answer.status_code == 200, (verb, answer.text)
        return answer.json()

    def filter(self, pod: dict[str, Any]) -> list[str]:
        """The nodes filter leaves for ``pod``."""
        body = {"Pod": pod, "Nodes": None, "NodeNames": self.nodes}
        answer = self._post(self.client, "filter", body)
        assert not answer.get("Error"), answer
        return list(answer.get("NodeNames") or [])

    def pick(self, pod: dict[str, Any]) -> str | None:
        """filter, then prioritize among several feasible nodes: the node kube-scheduler
        would bind, or None."""
        feasible = self.filter(pod)
        if len(feasible) <= 1:
            return feasible[0] if feasible else None
        body = {"Pod": pod, "Nodes": None, "NodeNames": feasible}
        scores = {h["Host"]: h["Score"] for h in self._post(self.client, "prioritize", body)}
        best = max(scores.get(n, 0) for n in feasible)
        return next(n for n in feasible if scores.get(n, 0) == best)

    def bind(self, pod: dict[str, Any], node: str, client: httpx.Client | None = None) -> str:
        """bind's Error ("" when bound)."""
        meta = pod["metadata"]
        body = {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                "PodUID": meta["uid"], "Node": node}  # fmt: skip
        return str(self._post(client or self.client, "bind", body)["Error"])

    def schedule(self, pod: dict[str, Any]) -> str | None:
        """One attempt: the node it was bound to, or None (left pending)."""
        node = self.pick(pod)
        if node is not None:
            assert self.bind(pod, node) == "", pod["metadata"]["name"]
        return node

    def schedule_gang(self, pods: list[dict[str, Any]], timeout: float = 30.0) -> dict[str, str]:
        """Offer every member until the planner has placed them all, then bind them together
        (the bind barrier waits for the whole gang): member name -> node."""
        picks: dict[str, str] = {}
        deadline = time.monotonic() + timeout
        while len(picks) < len(pods):
            for pod in pods:
                node = self.pick(pod)
                if node is not None:
                    picks[pod["metadata"]["name"]] = node
            if time.monotonic() > deadline:
                raise AssertionError(f"gang not planned in {timeout} s: {picks}")
        base = str(self.client.base_url)
        with ThreadPoolExecutor(len(pods)) as pool:

            def bind(pod: dict[str, Any]) -> str:
                with httpx.Client(base_url=base, timeout=10) as own:
                    return self.bind(pod, picks[pod["metadata"]["name"]], own)

            errors = list(pool.map(bind, pods))
        assert errors == [""] * len(pods), errors
        return picks
