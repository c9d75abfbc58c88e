"""The composition root: the server and the simulator build the same graph (``app.wiring``)."""

from __future__ import annotations

import ast
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

import app.services
import app.sim.policies
from app import wiring
from app.core.state.cache import ClusterCache
from app.core.state.gateway import Gateway, InMemoryGateway
from app.k8s.gateway import KubeGateway
from app.services import build_services
from app.settings import Settings
from app.sim.apiserver import SimApi
from app.sim.engine import SimConfig, Simulation
from app.sim.policies import MusterPolicy, PolicyConfig
from app.sim.workload import ClusterSpec, WorkloadSpec

APP = Path(__file__).resolve().parents[1] / "app"
SMALL = WorkloadSpec(jobs=2, pods_per_job=2, pod_cpu=1.0, runtime=10.0)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The clock of every ``build_graph`` call, by the server (``app.services``) or the
    simulator (``app.sim.policies``)."""
    seen: list[object] = []
    real = wiring.build_graph

    def spy(*args: Any, **kwargs: Any) -> wiring.Graph:
        seen.append(kwargs.get("clock", time.monotonic))
        return real(*args, **kwargs)

    for module in (app.services, app.sim.policies):
        assert module.build_graph is real  # both use the root itself, not a copy
        monkeypatch.setattr(module, "build_graph", spy)
    return seen


def test_the_server_and_the_simulator_build_their_graph_with_the_same_root(
    calls: list[object],
) -> None:
    build_services(Settings(demo=True))
    sim = Simulation(ClusterSpec(nodes=2, cpu=4.0), SMALL, SimConfig(policy="muster"))
    assert calls == [time.monotonic, sim.clock]


def test_the_simulator_binds_through_the_extenders_own_gang_binder_on_simulated_time() -> None:
    config = SimConfig(policy="muster", policy_config=PolicyConfig(barrier_timeout=2.5))
    sim = Simulation(ClusterSpec(nodes=2, cpu=4.0), SMALL, config)
    policy = sim.policy
    assert isinstance(policy, MusterPolicy)
    assert policy.binder is policy.extender.binder  # one GangBinder, not a second one
    assert policy.binder._clock is sim.clock  # noqa: SLF001 - the simulated clock reached it
    assert policy.planner is policy.extender.planner is policy.graph.planner
    assert policy.binder.barrier.timeout == 2.5
    assert sim.cache is policy.graph.cache
    result = sim.run()
    assert (result.completed, result.failed) == (SMALL.jobs, 0)


def test_the_server_graph_follows_the_settings() -> None:
    services = build_services(Settings(demo=True, strategy="spread", bind_barrier_seconds=1.5))
    extender = services.extender
    assert extender.gpu is None and extender.strategy == "spread"
    assert extender.binder.barrier.timeout == 1.5
    assert extender.binder._clock is time.monotonic  # noqa: SLF001
    muster = build_services(Settings(demo=True)).extender
    assert muster.gpu is not None  # the live GPU placement, strategy "muster" only


def test_every_gateway_satisfies_the_protocol() -> None:
    cache = ClusterCache()
    in_memory = InMemoryGateway(cache)

    class Quiet:
        def pod_added(self, pod: object) -> None: ...
        def pod_bound(self, uid: str, node: str) -> None: ...
        def pod_updated(self, uid: str) -> None: ...
        def pod_deleted(self, pod: object, *, by_scheduler: bool) -> None: ...

    with ApiClient() as api:
        gateways: list[object] = [in_memory, SimApi(cache, Quiet()), KubeGateway(api)]
        for gateway in gateways:
            assert isinstance(gateway, Gateway), type(gateway).__name__
        assert [g.blocking for g in gateways if isinstance(g, Gateway)] == [False, False, True]


def test_services_import_nothing_of_the_http_layer() -> None:
    tree = ast.parse((APP / "services.py").read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in modules if m and m.startswith("app.api")}
