"""A follower forwards the extender verbs to the leader and returns its answer unchanged; with
no leader known, or a call already forwarded once, it answers 503 and closes the connection."""

from __future__ import annotations

from collections.abc import Mapping

from app.core.cycle.leadership import Leadership
from app.core.model.labels import LEADER_ENDPOINT
from app.main import create_app
from app.services import Services, build_services
from app.settings import Settings
from tests.conftest import running
from tests.factories import pod_json


class Election:
    """Another replica holds the Lease and publishes ``url`` (None: nobody holds it)."""

    def __init__(self, url: str | None) -> None:
        self.url = url

    def start(self) -> None: ...
    def stop(self, timeout: float = 5.0) -> None: ...
    def stats(self) -> dict[str, object]:
        return {}

    def leader_annotations(self) -> Mapping[str, str] | None:
        return None if self.url is None else {LEADER_ENDPOINT: self.url}


def follower(url: str | None) -> Services:
    services = build_services(Settings(demo=True))
    services.election = Election(url)
    services.leadership = Leadership(services.extender.planner, services.cache, lambda: False)
    return services


def test_a_follower_forwards_the_verbs_and_refuses_without_a_leader() -> None:
    with running(create_app(Settings(demo=True))) as leader:
        names = [n["name"] for n in leader.get("/debug/nodes").json()["nodes"]]
        body = {"Pod": pod_json("p", gpu=1), "Nodes": None, "NodeNames": names}
        direct = leader.post("/filter", json=body)
        assert direct.status_code == 200
        with running(create_app(services=follower(str(leader.base_url)))) as replica:
            forwarded = replica.post("/filter", json=body)
            assert forwarded.status_code == 200
            assert forwarded.json() == direct.json()
            ranked = replica.post("/prioritize", json=body)
            assert ranked.status_code == 200 and {r["Host"] for r in ranked.json()} == set(names)
            assert replica.get("/readyz").json()["role"] == "follower"
            again = replica.post("/filter", json=body, headers={"x-muster-forwarded": "1"})
            assert again.status_code == 503 and again.headers["connection"] == "close"
    with running(create_app(services=follower(None))) as orphan:
        refused = orphan.post("/bind", json={"PodName": "p", "PodNamespace": "default",
                                             "PodUID": "u", "Node": "n"})  # fmt: skip
        assert refused.status_code == 503 and refused.headers["connection"] == "close"
        assert "knows no leader" in refused.json()["detail"]
        assert orphan.get("/healthz").status_code == 200  # everything else is served locally
