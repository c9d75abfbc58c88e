"""Keep the benchmark and cluster generator scripts working (tiny sizes; no timing targets)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from app.core.model.clusterfile import load_cluster_file
from tests.conftest import running
from tests.factories import pod_json
from tests.scriptload import script_module


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    yield from script_module("bench_extender")


@pytest.fixture(scope="module")
def gen_cluster() -> Iterator[ModuleType]:
    yield from script_module("gen_cluster")


def test_generated_cluster_is_loadable_exact_and_deterministic(
    gen_cluster: ModuleType, tmp_path: Path
) -> None:
    path = gen_cluster.write_cluster(300, tmp_path / "c.yaml", seed=3)
    nodes = load_cluster_file(path)
    assert len(nodes) == 300
    assert {n.allocatable.gpu // 1000 for n in nodes} == {0, 1, 4, 8}
    assert all("topology.kubernetes.io/zone" in n.labels for n in nodes)
    assert gen_cluster.cluster_yaml(300, seed=3) == path.read_text()
    assert gen_cluster.cluster_yaml(300, seed=4) != path.read_text()


@pytest.mark.parametrize("sole_pick", [True, False], ids=["sole-pick", "no-sole-pick"])
def test_benchmark_produces_figures_and_prints_the_table(
    bench: ModuleType, capsys: pytest.CaptureFixture[str], sole_pick: bool
) -> None:
    results, floor = bench.run([50], requests=20, warmup=3, time_limit=30.0, sole_pick=sole_pick)

    out = capsys.readouterr().out
    assert "muster p50" in out and "null p50" in out and "Extender.filter" in out
    assert "Inside the server app" in out
    assert f"sole pick: {'on' if sole_pick else 'off'}" in out
    (result,) = results
    assert result.nodes == 50
    assert 1 < result.feasible <= 50  # the probe gets every fitting node either way
    for server in ("muster", "null"):
        for verb in ("filter", "prioritize", "filter+prioritize"):
            for stat in (result.http[server][verb], result.app[server][verb]):
                assert stat.count == 20
                if server == "muster" and verb == "prioritize" and sole_pick:
                    # filter answered Muster's pick alone: kube-scheduler would not ask
                    assert stat.p50 == stat.p99 == 0
                else:
                    assert 0 < stat.p50 <= stat.p99
            app, http = result.app[server][verb], result.http[server][verb]
            assert app.p50 < http.p99 or app.p99 == http.p99 == 0
    for stage, stat in result.core.items():
        if stage == "prioritize" and sole_pick:
            continue  # not asked (a timer around nothing)
        assert 0 < stat.p50 <= stat.p99
    assert 0 < floor.p50 <= floor.p99


@pytest.mark.parametrize("sole_pick", [True, False], ids=["e2e-null", "verb-null"])
def test_the_null_extender_answers_as_muster_does_for_a_pod_on_its_own(
    bench: ModuleType, sole_pick: bool
) -> None:
    """On a real kube-scheduler (``--serve null --kubeconfig``) the null filter answers one
    node, as Muster's sole pick does, so kube-scheduler asks neither its scorers nor
    prioritize; the in-process verb benchmark's null answers every candidate."""
    with running(bench.create_null_app(sole_pick=sole_pick)) as client:
        args = {"Pod": pod_json("p", gpu=1), "NodeNames": ["a", "b", "c"]}
        answer = client.post("/filter", json=args).json()
    assert answer["NodeNames"] == (["a"] if sole_pick else ["a", "b", "c"])
