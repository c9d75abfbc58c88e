"""``app.k8s.owners``: the webhook's cached readers, against a scripted fake API.

The real reads (a Job, a CRD-backed JobSet, a kind whose CRD is absent, namespaces) run against
kube-apiserver in ``tests/e2e/test_webhook_e2e.py``.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ReadTimeoutError

from app.core.admission.workloads import JOB, JOBSET, RAYCLUSTER, WorkloadKind
from app.k8s.owners import NamespaceLister, OwnerLister, TTLCache


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def api_error(status: int, message: str = "", name: str = "") -> ApiException:
    exc = ApiException(status=status, reason={403: "Forbidden", 404: "Not Found"}.get(status, ""))
    body: dict[str, Any] = {"kind": "Status", "status": "Failure", "message": message,
                            "code": status}  # fmt: skip
    if name:
        body["details"] = {"name": name, "kind": "jobs"}
    exc.body = json.dumps(body)
    return exc


class FakeReader:
    """Answers from a table: a dict is the object, an exception is raised."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.reads: list[str] = []
        self.gate: threading.Event | None = None

    def _answer(self, key: str) -> dict[str, Any]:
        self.reads.append(key)
        if self.gate is not None:
            assert self.gate.wait(10), "test never opened the gate"
        answer = self.answers[key]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def owner(self, kind: WorkloadKind, namespace: str, name: str) -> dict[str, Any]:
        return self._answer(f"{kind.kind}/{namespace}/{name}")

    def namespace(self, name: str) -> dict[str, Any]:
        return self._answer(f"ns/{name}")


JOB_OBJ = {"metadata": {"name": "train"}, "spec": {"parallelism": 4}}


@pytest.mark.parametrize(
    ("kind", "answer", "problem", "ttl"),
    [
        (JOB, JOB_OBJ, "", 30.0),
        (JOB, api_error(404, 'jobs.batch "train" not found', "train"),
         'jobs.batch "train" not found', 5.0),
        (RAYCLUSTER, api_error(404, "the server could not find the requested resource"),
         "the API server does not serve rayclusters.ray.io/v1 (CRD not installed?)", 60.0),
        (JOBSET, api_error(403, "jobsets is forbidden: User cannot get"),
         "forbidden: Muster's service account needs get on jobsets.jobset.x-k8s.io", 2.0),
        (JOB, api_error(500, "etcdserver: request timed out"),
         "the API server answered 500: etcdserver: request timed out", 2.0),
        (JOB, ReadTimeoutError(None, "/apis", "Read timed out. (read timeout=0.6)"),
         "the API server did not answer within 0.9s", 2.0),
        (JOB, ConnectionRefusedError(111, "Connection refused"),
         "the API server is unreachable", 2.0),
    ],
)  # fmt: skip
def test_owner_reads_and_how_long_each_answer_is_kept(
    kind: WorkloadKind, answer: Any, problem: str, ttl: float
) -> None:
    clock = Clock()
    reader = FakeReader({f"{kind.kind}/ml/train": answer})
    lister = OwnerLister(reader=reader, clock=clock)
    first = lister(kind, "ml", "train")
    assert (first.obj, first.problem[: len(problem)]) == (
        (answer, "") if isinstance(answer, dict) else (None, problem)
    )
    clock.now += ttl - 0.01
    assert lister(kind, "ml", "train") is first
    assert len(reader.reads) == 1
    clock.now += 0.02
    lister(kind, "ml", "train")
    assert len(reader.reads) == 2


def test_keys_are_kind_namespace_and_name() -> None:
    reader = FakeReader({"Job/a/x": JOB_OBJ, "Job/b/x": JOB_OBJ, "JobSet/a/x": JOB_OBJ})
    lister = OwnerLister(reader=reader)
    for kind, ns in ((JOB, "a"), (JOB, "b"), (JOBSET, "a"), (JOB, "a")):
        lister(kind, ns, "x")
    assert reader.reads == ["Job/a/x", "Job/b/x", "JobSet/a/x"]


def test_concurrent_misses_share_one_read() -> None:
    reader = FakeReader({"Job/ml/train": JOB_OBJ})
    reader.gate = threading.Event()
    lister = OwnerLister(reader=reader)
    results: list[Any] = []
    started = [threading.Event() for _ in range(8)]

    def admit(i: int) -> None:
        started[i].set()
        results.append(lister(JOB, "ml", "train"))

    threads = [threading.Thread(target=admit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for e in started:
        assert e.wait(10)
    reader.gate.set()
    for t in threads:
        t.join(10)
    assert len(results) == 8 and all(r.obj == JOB_OBJ for r in results)
    assert reader.reads == ["Job/ml/train"]


def test_cache_is_bounded_least_recently_used_first() -> None:
    cache: TTLCache[str, int] = TTLCache(max_entries=2)
    loads: list[str] = []

    def load(key: str) -> Any:
        return lambda: (loads.append(key), (len(loads), 60.0))[1]

    for key in ("a", "b", "a", "c", "a", "b"):
        cache.get(key, load(key), 1.0)
    # "b" was evicted by "c" (after "a" was used again); "a" stayed.
    assert loads == ["a", "b", "c", "b"]
    assert len(cache) == 2


@pytest.mark.parametrize(
    ("answer", "labels", "annotations", "problem"),
    [
        ({"metadata": {"name": "ml", "labels": {"muster.io/managed": "true"},
                       "annotations": {"muster.io/default-queue": "q"}}},
         {"muster.io/managed": "true"}, {"muster.io/default-queue": "q"}, ""),
        ({"metadata": {"name": "ml"}}, {}, {}, ""),
        (api_error(404, 'namespaces "ml" not found', "ml"), {}, {}, "namespace ml not found"),
        (api_error(403, "forbidden"), {}, {}, "the API server answered 403: forbidden"),
    ],
)  # fmt: skip
def test_namespace_reads(
    answer: Any, labels: dict[str, str], annotations: dict[str, str], problem: str
) -> None:
    lister = NamespaceLister(reader=FakeReader({"ns/ml": answer}))
    meta = lister("ml")
    assert (dict(meta.labels), dict(meta.annotations), meta.problem) == (
        labels,
        annotations,
        problem,
    )


def test_listers_need_an_api_or_a_reader() -> None:
    with pytest.raises(ValueError):
        OwnerLister()
    with pytest.raises(ValueError):
        NamespaceLister()


def test_peek_answers_from_memory_only() -> None:
    clock = Clock()
    reader = FakeReader({"Job/ml/train": JOB_OBJ, "ns/ml": {"metadata": {"name": "ml"}}})
    owners = OwnerLister(reader=reader, clock=clock)
    namespaces = NamespaceLister(reader=reader, clock=clock)
    assert owners.peek(JOB, "ml", "train") is None and namespaces.peek("ml") is None
    assert reader.reads == []
    owners(JOB, "ml", "train")
    namespaces("ml")
    assert owners.peek(JOB, "ml", "train") is owners(JOB, "ml", "train")
    assert namespaces.peek("ml") is namespaces("ml")
    clock.now += 60
    assert owners.peek(JOB, "ml", "train") is None and namespaces.peek("ml") is None
    assert len(reader.reads) == 2
