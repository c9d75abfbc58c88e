"""``/metrics``: webhook calls, bind errors, and the scheduler families read at scrape time."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.main import create_app
from tests.conftest import running
from tests.factories import pod_json
from tests.reviews import review


def samples(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = client.get("/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_webhook_calls_are_counted_and_timed_by_webhook_and_code() -> None:
    with running(create_app()) as client:
        pod = pod_json("web", namespace="ml")
        assert client.post("/mutate", json=review(pod)).status_code == 200
        assert client.post("/validate", json=review(pod)).status_code == 200
        assert client.post("/mutate", content=b"{").status_code == 400
        got = samples(client)
        requests = {
            labels: v
            for (name, labels), v in got.items()
            if name == "muster_webhook_requests_total"
        }
        assert requests == {
            (("code", "200"), ("webhook", "mutate")): 1,
            (("code", "400"), ("webhook", "mutate")): 1,
            (("code", "200"), ("webhook", "validate")): 1,
        }
        counts = {
            labels: v
            for (name, labels), v in got.items()
            if name == "muster_webhook_request_duration_seconds_count"
        }
        assert counts == {(("webhook", "mutate"),): 2, (("webhook", "validate"),): 1}


def test_a_refused_bind_is_an_error_a_gang_still_forming_is_not() -> None:
    with running(create_app()) as client:
        assert samples(client)[("muster_bind_errors_total", ())] == 0
        big = pod_json("big", gpu=8)
        nodes = ["h100-0", "a100-0", "cpu-0"]
        client.post("/filter", content=json.dumps({"Pod": big, "NodeNames": nodes}))
        bind = {"PodName": "big", "PodNamespace": "default", "PodUID": big["metadata"]["uid"]}
        refused = client.post("/bind", content=json.dumps(bind | {"Node": "cpu-0"})).json()
        assert "needs 8 nvidia.com/gpu" in refused["Error"]
        # A gang member without a plan is told to come back: expected, not an error.
        lone = pod_json(
            "g-0", gpu=1, labels={"muster.io/pod-group": "g", "muster.io/min-member": "2"}
        )
        bind = {"PodName": "g-0", "PodNamespace": "default", "PodUID": lone["metadata"]["uid"]}
        client.post("/filter", content=json.dumps({"Pod": lone, "NodeNames": nodes}))
        answer = client.post("/bind", content=json.dumps(bind | {"Node": "h100-0"})).json()
        assert answer["Error"]
        got = samples(client)
        assert got[("muster_bind_errors_total", ())] == 1
        assert got[("muster_binds_total", (("result", "Rejected"),))] == 1
        assert got[("muster_binds_total", (("result", "NoPlan"),))] == 1


def test_the_scheduler_families_and_a_failing_census() -> None:
    app = create_app()
    with running(app) as client:
        got = samples(client)
        assert got[("muster_census_up", ())] == 1
        assert got[("muster_gangs_waiting", (("category", "capacity"),))] == 0
        assert got[("muster_decisions_total", (("kind", "plan"),))] == 0
        assert got[("muster_preemption_gpu_seconds_lost_total", (("kind", "reclaim"),))] == 0
        assert got[("muster_planner_cycle_duration_seconds_bucket", (("le", "+Inf"),))] >= 0
        assert ("muster_queue_usage", (("queue", "default"), ("resource", "cpu"))) in got
        assert got[("muster_gpu_free", ())] > 0

        def broken() -> None:
            raise RuntimeError("census bug")

        app.state.muster.census.look = broken  # every census now fails
        answer = client.get("/metrics")
        assert answer.status_code == 200
        after = samples(client)
        assert after[("muster_census_up", ())] == 0
        assert ("muster_decisions_total", (("kind", "plan"),)) in after
        assert not any(name == "muster_gangs_waiting" for name, _ in after)


def test_the_readme_lists_every_family_served() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Metrics (`GET /metrics`)", 1)[1].split("\n### ", 1)[0]
    documented = {
        name.removesuffix("_total")
        for line in section.splitlines()
        if line.startswith("| `muster_")
        for name in re.findall(r"`(muster_\w+)`", line.split("|")[1])
    }
    with running(create_app()) as client:
        families = text_string_to_metric_families(client.get("/metrics").text)
        # (the text format shows an unlabelled counter's creation time as a family of its own)
        served = {f.name for f in families if not f.name.endswith("_created")}
    assert documented == served
