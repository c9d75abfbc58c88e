"""What-if: the planner's decision for a job not yet submitted, changing nothing, and the same
decision the planner then takes when the job's pods arrive."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest

from app.core.cycle.planner import Planner
from app.core.insight.whatif import proposal_from, what_if
from app.core.model.errors import InvalidInput
from tests.core.scenario import NOW, Job, Scenario, boxes, planner_for


def template(gpu: int = 1, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "main", "resources": {"requests": {
            "cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpu)}}}]},
    }  # fmt: skip


@dataclass(frozen=True)
class Row:
    name: str
    scenario: Scenario
    body: dict[str, Any]
    fits_now: bool
    nodes: str = ""  # the members' nodes, sorted, space-separated
    victims: tuple[str, ...] = ()
    category: str = ""


def world(count: int, *jobs: Job) -> Scenario:
    return Scenario("", boxes(count), jobs)


ROWS = [
    Row("an empty cluster takes it now",
        world(2), {"name": "train", "pod": template(4), "replicas": 3}, True,
        nodes="n0 n0 n1"),
    Row("a higher priority makes room by evicting a whole gang",
        world(1, Job("low", 2, 4, on="n0", priority=1)),
        {"name": "urgent", "pod": template(4), "replicas": 2, "priority": 100}, False,
        nodes="n0 n0", victims=("default/low",)),
    Row("equal priority waits for the room to free",
        world(1, Job("peer", 1, 8, on="n0", runtime="1h", age=600)),
        {"name": "later", "pod": template(8), "replicas": 1}, False, category="capacity"),
    Row("a required level no node is labelled with is one domain: it fits",
        world(2), {"name": "tight", "pod": template(8), "replicas": 2,
                   "topology": {"required": "block"}}, True, nodes="n0 n1"),
]  # fmt: skip


def submit(planner: Planner, body: dict[str, Any]) -> None:
    """Create the job's pods for real (what the API would send after the user submits)."""
    proposal = proposal_from(body, scheduler_name="muster", now=NOW)
    cache = planner._cache  # noqa: SLF001 - the test plays the watch
    cache.upsert_pods(replace(p, uid=f"real-{p.name}") for p in proposal.pods)


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_what_if_then_submit(row: Row) -> None:
    planner = planner_for(row.scenario)
    outlook = planner.look()
    generation = planner._cache.generation  # noqa: SLF001
    answer = what_if(outlook, proposal_from(row.body, scheduler_name="muster", now=NOW))
    body = answer.as_dict()
    assert answer.fits_now is row.fits_now, body
    assert " ".join(sorted(m["node"] for m in answer.placement.values())) == row.nodes, body
    assert tuple(v["unit"] for v in answer.victims) == row.victims, body
    if row.category:
        assert answer.explanation is not None and answer.explanation.category == row.category
        assert answer.eta_seconds == pytest.approx(3000.0)
    # Nothing changed ...
    assert planner._cache.generation == generation  # noqa: SLF001
    assert planner.plan(f"default/{row.body['name']}") is None
    # ... and the planner does what it said once the pods exist.
    submit(planner, row.body)
    planner.cycle(force=True)
    gang = f"default/{row.body['name']}"
    plan = planner.plan(gang)
    if row.nodes:
        assert plan is not None
        assert " ".join(sorted(plan.members.values())) == row.nodes
        names = {f"real-{name}": name for name in answer.placement}
        for uid, devices in plan.devices.items():
            assert list(devices) == answer.placement[names[uid]]["gpus"]
    else:
        assert plan is None
    evicted = sorted(u.key for e in planner.take_evictions() for u in e.units)
    assert tuple(evicted) == row.victims


@pytest.mark.parametrize(("replicas", "min_member"), [(2, 3), (1, 2)])
def test_a_min_member_above_the_jobs_pods_is_a_job_that_never_starts(
    replicas: int, min_member: int
) -> None:
    """Not a bad request: the answer (a gang that waits for members that never come)."""
    planner = planner_for(world(2))
    body = {"name": "short", "pod": template(1), "replicas": replicas, "minMember": min_member}
    answer = what_if(planner.look(), proposal_from(body, scheduler_name="muster", now=NOW))
    assert (answer.fits_now, answer.min_member, answer.placement) == (False, min_member, {})
    assert answer.explanation is not None and answer.explanation.category == "gang-incomplete"
    assert answer.eta_seconds is None


def test_a_staged_jobset_is_its_first_step() -> None:
    """Each step of a staged JobSet is a gang of its own; what-if sizes the first."""
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "staged"},
        "spec": {"startupPolicy": {"startupPolicyOrder": "InOrder"}, "replicatedJobs": [
            {"name": "driver", "template": {"spec": {"template": template(1)}}},
            {"name": "workers", "replicas": 2,
             "template": {"spec": {"parallelism": 2, "template": template(1)}}},
        ]},
    }  # fmt: skip
    proposal = proposal_from({"workload": jobset}, scheduler_name="muster", now=NOW)
    assert [p.name for p in proposal.pods] == ["staged-driver-0"]
    assert (proposal.min_member, proposal.basis) == (1, "JobSet: 1 pods of staged step driver")


def test_a_workload_is_built_from_its_templates_and_sized_like_the_webhook() -> None:
    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "llama", "namespace": "ml"},
        "spec": {
            "runPolicy": {"schedulingPolicy": {"queue": "research"}},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template(8)},
                "Worker": {"replicas": 3, "template": template(8)},
            },
        },
    }
    proposal = proposal_from({"workload": pytorch}, scheduler_name="muster", now=NOW)
    assert proposal.key == "ml/llama" and proposal.min_member == 4
    assert [p.name for p in proposal.pods] == [
        "llama-master-0", "llama-worker-0", "llama-worker-1", "llama-worker-2"
    ]  # fmt: skip
    assert {p.labels["muster.io/queue"] for p in proposal.pods} == {"research"}
    assert {p.labels["muster.io/pod-group"] for p in proposal.pods} == {"llama"}
    ray = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "rc"},
        "spec": {
            "headGroupSpec": {"template": template(0)},
            "workerGroupSpecs": [
                {"groupName": "gpu", "replicas": 4, "minReplicas": 2, "template": template(1)}
            ],
        },
    }
    proposal = proposal_from({"workload": ray, "priority": 7}, scheduler_name="muster", now=NOW)
    assert [p.name for p in proposal.pods] == ["rc-head-0", "rc-gpu-0", "rc-gpu-1"]
    assert proposal.min_member == 3 and {p.priority for p in proposal.pods} == {7}


BAD = [
    ({}, "pod"),
    ({"pod": template(), "workload": {}}, "pod"),
    ({"pod": template(), "replicas": 0}, "replicas"),
    ({"pod": template(), "replicas": 2, "minMember": 0}, "minMember"),
    ({"pod": template(), "priority": "high"}, "priority"),
    ({"pod": template(), "topology": {"somewhere": "block"}}, "topology"),
    ({"pod": template(), "colour": "red"}, "colour"),
    ({"pod": {"spec": {"containers": "x"}}}, "pod.spec.containers"),
    ({"workload": {"apiVersion": "apps/v1", "kind": "Deployment"}}, "workload.kind"),
    ({"workload": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                   "spec": {"parallelism": -1}}}, "workload.spec.parallelism"),
    # A template that starts no pod now, or whose bad field an override would replace, is
    # checked all the same (both found by fuzzing).
    ({"pod": {"spec": {"priority": False}}, "priority": 5}, "pod.spec.priority"),
    ({"workload": {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "r"},
                   "spec": {"workerGroupSpecs": [{"replicas": 0, "template": {
                       "spec": {"tolerations": 5}}}]}}},
     "workload template worker0.spec.tolerations"),
    ({"workload": {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
                   "metadata": {"name": "l"}, "spec": {"leaderWorkerTemplate": {
                       "size": 1, "leaderTemplate": {}, "workerTemplate": {
                           "spec": {"priority": "x"}}}}}},
     "workload template worker.spec.priority"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "where"), BAD, ids=[w for _, w in BAD])
def test_bad_requests_name_the_field(body: dict[str, Any], where: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        proposal_from(body, scheduler_name="muster", now=NOW)
    assert caught.value.field == where, caught.value
