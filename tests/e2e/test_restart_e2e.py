"""One Muster replica (no leader election) SIGKILLed and restarted on the same port, on the
real control plane and kube-scheduler 1.20: once its cache has synced it carries on from the
plan records before it reports ready, so a gang caught half-way through its bind barrier
still binds whole on the nodes and GPU devices recorded before the kill."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from controlplane import wait_for
from ha import HaCluster, ha_cluster
from harness import BindingWatch, delete_now, make_namespace
from test_ha_e2e import (
    PLAN,
    at_barrier,
    blocked_gang,
    carried,
    create,
    device_conflicts,
    nodes,
    record_of,
    whole,
)


@pytest.fixture(scope="module")
def one() -> Iterator[HaCluster]:
    with ha_cluster(replicas="a", elect=False) as cluster:
        yield cluster


def test_a_restarted_single_replica_finishes_a_gang_caught_at_its_barrier(one: HaCluster) -> None:
    ns = make_namespace(one.core, "restart")
    names = nodes(one, "restart", 2)
    with BindingWatch(one.core, ns) as seen:
        create(one.core, ns, blocked_gang(one, ns, "restart", "job", gpus=2))
        wait_for(lambda: at_barrier(one, "restart/job") >= 2, 60, "members at the barrier")
        record = record_of(one, ns, [f"job-{i}" for i in range(4)])
        (replica,) = one.replicas
        replica.kill()
        replica.start()  # same port: the Service's endpoint comes back
        wait_for(replica.ready, 60, "the restarted replica to be ready")
        assert f"restart/job: plan {record['id']} carried on (4 members)" in carried(one)
        delete_now(one.core, ns, "job-blocker")
        wait_for(lambda: whole(seen, "job", 4), 60, "the gang to bind whole")
    by_uid = {p.metadata.uid: p for p in one.core.list_namespaced_pod(ns).items}
    for uid, (node, devices) in record["members"].items():
        pod = by_uid[uid]
        assert pod.spec.node_name == node
        assert pod.metadata.annotations["muster.io/gpu-ids"] == ",".join(map(str, devices))
        assert json.loads(pod.metadata.annotations[PLAN])["id"] == record["id"]
    assert max(seen.max_gpus[n] for n in names) <= 8
    assert device_conflicts(one.core, ns) == []
