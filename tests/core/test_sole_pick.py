"""Sole pick: filter answers a pod on its own with Muster's best node alone (kube-scheduler then
skips scoring), unless kube-scheduler's scoring has something else to weigh."""

from __future__ import annotations

import random
from typing import Any

import pytest

from app.core.model.errors import InvalidInput
from app.core.model.parse import pod_from_dict
from app.core.state.cache import ClusterCache
from app.core.state.gateway import InMemoryGateway
from app.core.verbs.extender import Extender
from app.core.verbs.filter import filter_nodes
from app.settings import Settings
from app.wiring import build_graph
from tests.factories import node, pod_json

NAMES = ["a", "b", "c"]
PREFER = {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}
SPREAD = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "labelSelector": {}}
SOFT_TAINT = [{"key": "spot", "value": "yes", "effect": "PreferNoSchedule"}]


def owned(kind: str) -> dict[str, Any]:
    return {"metadata": {"ownerReferences": [{"kind": kind, "name": "x", "uid": "u"}]}}


def spread(*when: str) -> dict[str, Any]:
    constraints = [{**SPREAD, "whenUnsatisfiable": w} for w in when]
    return {"spec": {"topologySpreadConstraints": constraints}}


def prefers(kind: str) -> dict[str, Any]:
    return {"spec": {"affinity": {kind: PREFER}}}


TOLERATES = {"spec": {"tolerations": [{"key": "spot", "operator": "Exists"}]}}
OWN_SPREAD = {**owned("ReplicaSet"), **spread("DoNotSchedule")}

# (case, what the pod adds to its JSON, node b's taints, sole pick on, answered alone)
CASES: list[tuple[str, dict[str, Any], list[dict[str, str]] | None, bool, bool]] = [
    ("plain pod", {}, None, True, True),
    ("setting off", {}, None, False, False),
    ("preferred node affinity", prefers("nodeAffinity"), None, True, False),
    ("preferred pod affinity", prefers("podAffinity"), None, True, False),
    ("preferred anti-affinity", prefers("podAntiAffinity"), None, True, False),
    ("ScheduleAnyway spread", spread("DoNotSchedule", "ScheduleAnyway"), None, True, False),
    ("DoNotSchedule spread only", spread("DoNotSchedule"), None, True, True),
    ("ReplicaSet pod: default spreading", owned("ReplicaSet"), None, True, False),
    ("StatefulSet pod: default spreading", owned("StatefulSet"), None, True, False),
    ("own constraint replaces the default", OWN_SPREAD, None, True, True),
    ("Job pod", owned("Job"), None, True, True),
    ("PreferNoSchedule candidate", {}, SOFT_TAINT, True, False),
    ("PreferNoSchedule tolerated", TOLERATES, SOFT_TAINT, True, True),
]


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        out[key] = merged(out.get(key) or {}, value) if isinstance(value, dict) else value
    return out


def extender(cache: ClusterCache, sole_pick: bool) -> Extender:
    return build_graph(Settings(sole_pick=sole_pick), cache, InMemoryGateway(cache)).extender


def cluster(taints: list[dict[str, str]] | None) -> ClusterCache:
    cache = ClusterCache()
    cache.upsert_nodes([node("a", gpus=8), node("b", gpus=8, taints=taints), node("c", gpus=8)])
    cache.upsert_pods([pod_from_dict(pod_json("busy", gpu=6, node="b"))])
    return cache


@pytest.mark.parametrize(
    ("case", "extra", "taints", "on", "alone"), CASES, ids=[c[0] for c in CASES]
)
def test_who_answers(
    case: str, extra: dict[str, Any], taints: list[dict[str, str]] | None, on: bool, alone: bool
) -> None:
    cache = cluster(taints)
    ext = extender(cache, on)
    pod = cache.learn_pod(pod_from_dict(merged(pod_json("p", gpu=1), extra)))
    result = ext.filter(pod, NAMES)
    if not alone:
        assert result.feasible == NAMES and not result.passed_over
        return
    # The node prioritize would rank first, held for the pod.
    other = cluster(taints)
    ranked = extender(other, False).prioritize(other.learn_pod(pod), NAMES).pairs()
    pick = max(ranked, key=lambda p: p[1])[0]
    assert result.feasible == [pick]
    assert result.passed_over == len(NAMES) - 1
    assert cache.view().free_of(pick).gpu == cluster(taints).view().free_of(pick).gpu - 1000


def test_the_next_pod_sees_the_pick_held() -> None:
    cache = ClusterCache()
    cache.upsert_nodes([node("a", gpus=1), node("b", gpus=1)])
    ext = extender(cache, True)
    first, second, third = (
        cache.learn_pod(pod_from_dict(pod_json(n, gpu=1))) for n in ("p1", "p2", "p3")
    )
    (pick,) = ext.filter(first, ["a", "b"]).feasible
    answer = ext.filter(second, ["a", "b"])  # the pick is held: one node is left
    assert answer.feasible == [({"a", "b"} - {pick}).pop()] and not answer.passed_over
    assert ext.filter(third, ["a", "b"]).feasible == []


BAD = [
    ({"spec": {"topologySpreadConstraints": {}}}, "Pod.spec.topologySpreadConstraints"),
    ({"spec": {"topologySpreadConstraints": ["x"]}}, "Pod.spec.topologySpreadConstraints[0]"),
    ({"spec": {"affinity": {"podAffinity": []}}}, "Pod.spec.affinity.podAffinity"),
    ({"metadata": {"ownerReferences": [1]}}, "Pod.metadata.ownerReferences[0]"),
]


@pytest.mark.parametrize(("extra", "field"), BAD, ids=[b[1] for b in BAD])
def test_malformed_preferences_name_their_field(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        pod_from_dict(merged(pod_json("p", gpu=1), extra))
    assert caught.value.field == field


def busy_cluster(seed: int) -> ClusterCache:
    """Eight 8-GPU nodes, each with a random number of GPUs taken by running pods."""
    rng = random.Random(seed)
    cache = ClusterCache()
    cache.upsert_nodes([node(f"n{i}", gpus=8) for i in range(8)])
    for i in range(8):
        for j in range(rng.randrange(8)):
            cache.upsert_pods([pod_from_dict(pod_json(f"run-{i}-{j}", gpu=1, node=f"n{i}"))])
    return cache


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_the_sole_pick_is_what_prioritize_ranks_first(seed: int, gpus: int) -> None:
    names = [f"n{i}" for i in range(8)]
    pod = pod_from_dict(pod_json("p", gpu=gpus))
    fits = filter_nodes(busy_cluster(seed).view(), pod, names).feasible
    if len(fits) < 2:
        pytest.skip("fewer than two candidates: no pick to make")
    # What kube-scheduler would do without sole pick: prioritize the filtered candidates,
    # take the highest score (first among equals).
    other = busy_cluster(seed)
    scores = extender(other, False).prioritize(other.learn_pod(pod), fits).scores.tolist()
    first = fits[scores.index(max(scores))]
    cache = busy_cluster(seed)
    assert extender(cache, True).filter(cache.learn_pod(pod), names).feasible == [first]


def test_deciding_ahead_changes_no_answer_and_nothing_in_the_cache() -> None:
    """A run of same-shape pods gets the same nodes with ``prepare_next`` after each answer
    as without, and ``prepare_next`` itself leaves the cache as it was."""
    picks: dict[bool, list[list[str]]] = {}
    for ahead in (False, True):
        cache = busy_cluster(7)
        ext = extender(cache, True)
        names = [f"n{i}" for i in range(8)]
        picks[ahead] = []
        for k in range(30):
            pod = cache.learn_pod(pod_from_dict(pod_json(f"q{k}", gpu=1 + k % 2)))
            assert pod is not None
            picks[ahead].append(ext.filter(pod, names).feasible)
            if ahead:
                before = cache.generation
                ext.prepare_next()
                assert cache.generation == before
    assert picks[True] == picks[False]
    assert sum(len(p) for p in picks[True]) > 10  # the run placed pods (no empty answers only)
