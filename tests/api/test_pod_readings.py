"""The pods of extender calls read once per object: a pod sent again unchanged gets its last
reading; a changed one, or a bad one, is read as sent (the 422 of a bad pod included)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import pytest

from app.api import extender
from app.api.errors import BadRequest
from app.main import create_app
from app.settings import Settings
from tests.conftest import running
from tests.factories import pod_json


def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the pods ``pod_from_dict`` reads from now on."""
    reads: list[str] = []
    real = extender.pod_from_dict

    def reading(data: dict[str, Any], where: str) -> Any:
        reads.append(str(data.get("metadata", {}).get("name")))
        return real(data, where)

    monkeypatch.setattr(extender, "pod_from_dict", reading)
    return reads


@dataclass(frozen=True)
class Row:
    what: str
    change: dict[str, Any]  # merged into the second copy's metadata / spec
    read_again: bool
    differs: bool  # the new reading is another pod (a resourceVersion is not kept)


ROWS = [
    Row("the same object, another copy", {}, False, False),
    Row("a new resourceVersion", {"metadata": {"resourceVersion": "2"}}, True, False),
    Row("a label more", {"metadata": {"labels": {"team": "a"}}}, True, True),
    Row("a new node name", {"spec": {"nodeName": "h100-0"}}, True, True),
]


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.what)
def test_an_unchanged_pod_is_not_read_again(row: Row, monkeypatch: pytest.MonkeyPatch) -> None:
    readings = extender._PodReadings()
    reads = counted(monkeypatch)
    first = pod_json("a", gpu=1)
    first["metadata"]["resourceVersion"] = "1"
    pod = readings.pod(first)
    second = copy.deepcopy(first)
    for part, fields in row.change.items():
        for key, value in fields.items():
            if isinstance(value, dict):
                second[part].setdefault(key, {}).update(value)
            else:
                second[part][key] = value
    again = readings.pod(second)
    assert reads == (["a", "a"] if row.read_again else ["a"])
    assert (again is pod) is not row.read_again
    assert (again != pod) is row.differs


def test_a_bad_pod_is_refused_even_after_its_uid_was_read(monkeypatch: pytest.MonkeyPatch) -> None:
    readings = extender._PodReadings()
    good = pod_json("a", gpu=1)
    readings.pod(good)
    bad = copy.deepcopy(good)
    bad["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "lots"
    with pytest.raises(BadRequest) as refused:
        readings.pod(bad)
    assert refused.value.status == 422 and "nvidia.com/gpu" in refused.value.message
    assert readings.pod(copy.deepcopy(good)) is readings.pod(good)  # the good one still holds


def test_pods_without_uid_are_always_read_and_the_memory_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    readings = extender._PodReadings()
    monkeypatch.setattr(extender._PodReadings, "LIMIT", 3)
    reads = counted(monkeypatch)
    anonymous = pod_json("x", gpu=1)
    anonymous["metadata"].pop("uid")
    readings.pod(anonymous)
    readings.pod(copy.deepcopy(anonymous))
    assert reads == ["x", "x"]
    pods = [pod_json(f"p{i}", gpu=1) for i in range(4)]
    for p in pods:
        readings.pod(p)
    assert len(readings._last) == 1  # full at three: forgotten, then the fourth remembered
    readings.pod(copy.deepcopy(pods[0]))
    assert reads[-1] == "p0"


def test_a_retried_filter_call_answers_as_the_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over HTTP: kube-scheduler's retry of an unchanged pod gets the same answer, read once;
    the same uid with a bad request is still a 422 naming the field."""
    with running(create_app(Settings(demo=True, sole_pick=False))) as client:
        reads = counted(monkeypatch)
        pod = pod_json("retried", gpu=4)
        body = json.dumps({"Pod": pod, "NodeNames": ["h100-0", "a100-0", "cpu-0", "t4-0"]})
        first = client.post("/filter", content=body)
        again = client.post("/filter", content=body)
        assert first.status_code == again.status_code == 200
        assert again.json() == first.json()
        assert reads == ["retried"]
        pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "-1"
        bad = client.post("/filter", content=json.dumps({"Pod": pod, "NodeNames": ["h100-0"]}))
        assert bad.status_code == 422 and "cpu" in bad.json()["field"]


@pytest.mark.parametrize(
    ("cached", "sent", "read"),
    [("7", "7", False), ("7", "8", True), ("", "", True)],
    ids=["the version the cache holds", "a newer version", "no version"],
)
def test_a_pod_the_cache_holds_at_that_version_is_not_read(
    cached: str, sent: str, read: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kube-scheduler's copy of a pod the watch already delivered is that very version: the
    call is answered from the cache's pod, as reading it would answer."""
    names = ["h100-0", "a100-0", "cpu-0", "t4-0"]
    pod = pod_json("watched", gpu=4)
    pod["metadata"]["resourceVersion"] = cached
    app, fresh = create_app(Settings(demo=True)), create_app(Settings(demo=True))
    with running(app) as client, running(fresh) as other:
        app.state.muster.cache.upsert_pod(extender.pod_from_dict(pod, "Pod"))
        reads = counted(monkeypatch)
        pod["metadata"]["resourceVersion"] = sent
        body = json.dumps({"Pod": pod, "NodeNames": names})
        answer = client.post("/filter", content=body)
        assert reads == (["watched"] if read else [])
        assert answer.status_code == 200
        assert answer.json() == other.post("/filter", content=body).json()
