"""filter and prioritize answers reused for pods of one shape: the wire answer is the same as
computed afresh, per server setting, and changes as soon as node usage does."""

from __future__ import annotations

import json
import time
from typing import Any

from app.main import create_app
from app.settings import Settings
from tests.conftest import running
from tests.factories import pod_json

NAMES = ["h100-0", "a100-0", "cpu-0", "t4-0"]


def body(name: str, gpu: int = 4) -> str:
    return args(pod_json(name, gpu=gpu))


def args(pod: dict[str, Any], names: list[str] = NAMES) -> str:
    return json.dumps({"Pod": pod, "NodeNames": names})


def test_pods_of_one_shape_get_the_same_answer_until_a_bind_changes_it() -> None:
    # Every feasible node in the answer (without the sole pick, whose hold is a change).
    with running(create_app(Settings(demo=True, sole_pick=False))) as client:
        pod = pod_json("a", gpu=4)
        first = client.post("/filter", content=args(pod)).json()
        assert first["NodeNames"] == ["h100-0", "a100-0"]
        assert set(first["FailedAndUnresolvableNodes"]) == {"cpu-0", "t4-0"}
        assert client.post("/filter", content=body("b")).json() == first
        ranked = args(pod, first["NodeNames"])
        scores = client.post("/prioritize", content=ranked).json()
        assert client.post("/prioritize", content=ranked).json() == scores
        # Another shape is answered on its own.
        eight = client.post("/filter", content=body("c", gpu=8)).json()
        assert eight != first
        # A bind changes node usage: the next pod of the first shape sees it.
        bind = {"PodName": "a", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"],
                "Node": "a100-0"}  # fmt: skip
        assert client.post("/bind", content=json.dumps(bind)).json() == {"Error": ""}
        after: dict[str, Any] = client.post("/filter", content=body("d")).json()
        assert after != first and after["NodeNames"] == ["h100-0"]
        assert "a100-0" in after["FailedNodes"]


def test_the_answer_follows_each_server_s_mirror_setting() -> None:
    with (
        running(create_app()) as plain,
        running(create_app(Settings(demo=True, mirror_unresolvable=True))) as mirrored,
    ):
        for _ in range(2):  # the second round is answered from the memo
            a = plain.post("/filter", content=body("p")).json()
            b = mirrored.post("/filter", content=body("p")).json()
            assert "cpu-0" not in a["FailedNodes"] and "cpu-0" in b["FailedNodes"]
            assert a["FailedAndUnresolvableNodes"] == b["FailedAndUnresolvableNodes"]


def test_after_answering_a_pod_on_its_own_filter_decides_ahead_for_the_next() -> None:
    """The filter answer is sent first; then (same server, off the call) the extender decides
    ahead for the next pod of the shape (``Extender.prepare_next``); prioritize does not."""
    app = create_app(Settings(demo=True))
    with running(app) as client:
        extender = app.state.muster.extender
        calls: list[bool] = []
        original = extender.prepare_next

        def spy() -> None:
            calls.append(True)
            original()

        extender.prepare_next = spy
        answer = client.post("/filter", content=body("a", gpu=1))
        assert answer.status_code == 200 and len(answer.json()["NodeNames"]) == 1
        deadline = time.monotonic() + 5
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) == 1
        client.post("/prioritize", content=body("b", gpu=1))
        assert len(calls) == 1
