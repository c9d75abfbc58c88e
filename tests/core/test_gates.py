"""Scheduling gates (Kubernetes 1.27+): gang members are created behind Muster's gate and the
planner loop removes it once their gang is planned. 1.20 does not serve gates, so these tests
use the documented object shapes (``spec.schedulingGates: [{name: ...}]``)."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.admission.pods import AdmissionConfig, NamespaceMeta, gate_ops, mutate
from app.core.model import labels as keys
from app.core.model.errors import GatewayError, InvalidInput
from app.core.model.parse import pod_from_dict
from app.core.state.gateway import InMemoryGateway
from app.settings import Settings
from app.wiring import build_cache, build_graph
from tests.factories import node, pod_json
from tests.reviews import apply_patch, pod, review

GATE = {"name": keys.GANG_GATE}


def gated(name: str, gates: list[dict[str, str]] | None = None, **kwargs: Any) -> Any:
    body = pod_json(name, **kwargs)
    body["spec"]["schedulingGates"] = [GATE] if gates is None else gates
    return pod_from_dict(body)


def test_gates_are_parsed_and_a_malformed_list_names_the_field() -> None:
    assert gated("p", [GATE, {"name": "other.io/x"}]).gates == (keys.GANG_GATE, "other.io/x")
    assert pod_from_dict(pod_json("q")).gates == ()
    body = pod_json("r")
    body["spec"]["schedulingGates"] = {"name": "x"}
    with pytest.raises(InvalidInput, match=r"Pod\.spec\.schedulingGates"):
        pod_from_dict(body)


def _mutate(obj: dict[str, Any], gate: bool) -> Any:
    request = review(obj)["request"]
    return mutate(
        request["object"],
        request["namespace"],
        NamespaceMeta(),
        lambda *_: None,  # type: ignore[arg-type,return-value]
        lambda *_: None,
        AdmissionConfig(gang_gate=gate),
    )


GANG = {keys.POD_GROUP: "train", keys.MIN_MEMBER: "4"}


def test_the_webhook_gates_gang_members_only_where_gates_are_served() -> None:
    member = pod(name="train-0", gpu=1, labels=GANG)
    admitted = apply_patch(member, list(_mutate(member, gate=True).patch))
    assert admitted["spec"]["schedulingGates"] == [GATE]
    assert (
        "schedulingGates"
        not in apply_patch(member, list(_mutate(member, gate=False).patch))["spec"]
    )
    single = pod(name="solo", gpu=1, labels={keys.QUEUE: "team-a"})
    assert (
        "schedulingGates" not in apply_patch(single, list(_mutate(single, gate=True).patch))["spec"]
    )
    # Admitted again (reinvocation): the gate is there, nothing more to add.
    assert gate_ops(admitted["spec"]) == []


def test_a_pod_with_gates_of_its_own_gets_muster_s_appended() -> None:
    assert gate_ops({"schedulingGates": [{"name": "other.io/x"}]}) == [
        {"op": "add", "path": "/spec/schedulingGates/-", "value": GATE}
    ]
    assert gate_ops({}) == [{"op": "add", "path": "/spec/schedulingGates", "value": [GATE]}]
    with pytest.raises(InvalidInput, match="schedulingGates"):
        gate_ops({"schedulingGates": "x"})


def test_the_loop_removes_the_gate_of_planned_members_and_retries_a_failed_removal() -> None:
    cache = build_cache(Settings())
    gateway = InMemoryGateway(cache)
    graph = build_graph(Settings(strategy="binpack"), cache, gateway)
    cache.upsert_nodes([node("n", gpus=8)])
    labels = {keys.POD_GROUP: "g", keys.MIN_MEMBER: "2"}
    members = [gated(f"g-{i}", gpu=1, labels=labels) for i in range(2)]
    late = gated("h-0", gpu=9, labels={keys.POD_GROUP: "h", keys.MIN_MEMBER: "1"})  # never fits
    cache.upsert_pods([*members, late])
    gateway.fail[("ungate", "default/g-1")] = GatewayError("Conflict", "changed meanwhile")
    graph.loop.run_once(force=True)
    assert gateway.ungated == ["default/g-0"]
    graph.loop.run_once(force=True)  # the failed one is tried again
    assert sorted(gateway.ungated) == ["default/g-0", "default/g-1"]
    for member in members:
        now = cache.pod(member.uid)
        assert now is not None and now.gates == ()
        assert keys.PLANNED_NUDGE not in now.annotations  # no annotation nudge needed
    still = cache.pod(late.uid)
    assert still is not None and still.gates == (keys.GANG_GATE,)  # not planned: stays gated
    # Ungated members then go through filter and bind like any other.
    assert graph.extender.filter(members[0], ["n"]).feasible == ["n"]


def test_a_pod_whose_gates_changed_is_not_ungated_blindly() -> None:
    cache = build_cache(Settings())
    cache.upsert_nodes([node("n")])
    member = gated("p", [GATE, {"name": "other.io/x"}])
    cache.upsert_pod(member)
    gateway = InMemoryGateway(cache)
    with pytest.raises(GatewayError) as caught:
        gateway.ungate("default", "p", member.uid, (keys.GANG_GATE,), keys.GANG_GATE)
    assert caught.value.reason == "Conflict"
    gateway.ungate("default", "p", member.uid, member.gates, keys.GANG_GATE)
    after = cache.pod(member.uid)
    assert after is not None and after.gates == ("other.io/x",)
