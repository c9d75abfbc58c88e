"""preempt keeps nodes where the victims free enough GPUs; bind reserves then binds."""

from __future__ import annotations

from app.core.model.errors import GatewayError
from app.core.state.cache import ClusterCache
from app.core.state.gateway import InMemoryGateway
from app.core.verbs.bind import Binder
from app.core.verbs.victimcheck import Victims, filter_candidates
from tests.factories import node, pod


def test_preempt_drops_nodes_where_victims_free_too_few_gpus() -> None:
    cache = ClusterCache()
    cache.upsert_nodes([node("a", gpus=8), node("b", gpus=8), node("c", gpus=8)])
    a1, a2 = pod(gpu=4, node="a"), pod(gpu=4, node="a")
    b1, b2 = pod(gpu=1, node="b"), pod(gpu=7, node="b")
    c1 = pod(gpu=6, node="c")  # c has 2 free already
    cache.upsert_pods([a1, a2, b1, b2, c1])
    candidates = {
        "a": Victims((a1.uid, a2.uid)),  # frees 8 -> fits 4
        "b": Victims((b1.uid,), 1),  # frees 1 -> 1 free, needs 4: vetoed
        "c": Victims((c1.uid,)),  # 2 + 6 -> fits
        "ghost": Victims(("x",)),
    }
    kept = filter_candidates(cache.snapshot(), pod(gpu=4), candidates)
    assert set(kept) == {"a", "c"}
    assert kept["a"] == candidates["a"]


def test_preempt_counts_victims_given_in_the_request() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("a", gpus=8))
    cache.upsert_pod(pod(gpu=8, node="a", uid="known"))
    stranger = pod(gpu=8, node="a", uid="stranger")
    kept = filter_candidates(
        cache.snapshot(), pod(gpu=8), {"a": Victims(("stranger",))}, {"stranger": stranger}
    )
    assert set(kept) == {"a"}  # the cache lags: trust the request's own victim objects
    kept = filter_candidates(cache.snapshot(), pod(gpu=8), {"a": Victims(("known",))})
    assert set(kept) == {"a"}
    kept = filter_candidates(cache.snapshot(), pod(gpu=8), {"a": Victims(("nobody",))})
    assert kept == {}  # a victim nobody knows frees nothing


def test_bind_success_and_api_failure() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("a", gpus=8))
    gateway = InMemoryGateway(cache)
    binder = Binder(cache, gateway)
    ok, conflict = pod(gpu=4), pod(gpu=4)
    cache.upsert_pods([ok, conflict])
    assert binder.bind(ok.namespace, ok.name, ok.uid, "a").error == ""
    assert cache.pod(ok.uid).node_name == "a"
    gateway.fail[("bind", conflict.key)] = GatewayError("Conflict", "object was modified")
    outcome = binder.bind(conflict.namespace, conflict.name, conflict.uid, "a")
    assert "Conflict: object was modified" in outcome.error and outcome.reason == "Conflict"
    assert cache.view().used_of("a").gpu == 4000  # the failed bind gave its GPUs back


def test_bind_rejects_over_commit_without_calling_the_api() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("a", gpus=2))
    gateway = InMemoryGateway(cache)
    p = pod(gpu=4)
    cache.upsert_pod(p)
    outcome = Binder(cache, gateway).bind(p.namespace, p.name, p.uid, "a")
    assert "needs 4 nvidia.com/gpu, 2 free" in outcome.error
    assert gateway.bindings == []


def test_in_memory_gateway_refuses_a_second_node() -> None:
    cache = ClusterCache()
    cache.upsert_nodes([node("a"), node("b")])
    p = pod(gpu=1, node="a")
    cache.upsert_pod(p)
    outcome = Binder(cache, InMemoryGateway(cache)).bind(p.namespace, p.name, p.uid, "b")
    assert "already bound to a" in outcome.error


def test_preempt_counts_devices_not_just_totals() -> None:
    """Two half-GPU shares on a 2-GPU node: 1 GPU free in total, but no whole device."""
    cache = ClusterCache()
    cache.upsert_node(node("a", gpus=2))
    shares = [
        pod(f"s{d}", node="a", annotations={"muster.io/gpu-fraction": "0.5",
                                           "muster.io/gpu-ids": str(d)})
        for d in (0, 1)
    ]  # fmt: skip
    cache.upsert_pods(shares)
    whole = pod(gpu=1)
    assert filter_candidates(cache.snapshot(), whole, {"a": Victims(())}) == {}
    one = {"a": Victims((shares[0].uid,))}
    assert filter_candidates(cache.snapshot(), whole, one) == one
    # A share only needs one device with room: none is needed as a victim then.
    half = pod(annotations={"muster.io/gpu-fraction": "0.5"})
    assert filter_candidates(cache.snapshot(), half, {"a": Victims(())}) == {"a": Victims(())}
