"""Queue configuration, quota admission, DRF order and fair shares as scenario tables."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from app.core.model.errors import InvalidInput
from app.core.model.queues import parse_queue_config
from app.core.model.status import Code
from app.core.policies.drf import deserved, dominant_share, order_key
from app.core.policies.proportion import admit
from app.core.state.queuefile import QueueFile
from app.core.state.queueusage import QueueUsage

GI = 2**30 * 1000

TREE = """
defaultQueue: default
namespaces: {ml: research}
queues:
  - {name: default}
  - {name: org, guaranteed: {nvidia.com/gpu: 48}, limit: {nvidia.com/gpu: 56}}
  - {name: research, parent: org, weight: 2, guaranteed: {nvidia.com/gpu: 32},
     limit: {nvidia.com/gpu: 40}}
  - {name: prod, parent: org, guaranteed: {nvidia.com/gpu: 16}, borrowing: false}
  - {name: lender, guaranteed: {nvidia.com/gpu: 16}, lendingLimit: {nvidia.com/gpu: 4}}
"""


def gpus(n: float) -> np.ndarray:
    return np.array([int(n * 1000), 0, 0, 0], dtype=np.int64)


def usage_of(config_text: str, held: dict[str, float], capacity_gpus: int = 64) -> QueueUsage:
    usage = QueueUsage(parse_queue_config(config_text), gpus(capacity_gpus))
    for name, n in held.items():
        usage.add(name, gpus(n))
    return usage


def test_tree_is_parsed() -> None:
    config = parse_queue_config(TREE)
    assert [q.name for q in config.path("research")] == ["research", "org"]
    assert config.queues["research"].weight == 2 and config.namespaces == {"ml": "research"}
    assert [(d, q.name) for d, q in config.walk()] == [
        (0, "default"), (0, "lender"), (0, "org"), (1, "prod"), (1, "research"),
    ]  # fmt: skip


BAD = [
    ("queues: []", "queues: expected a non-empty list"),
    ("queues: [{name: a}]\nextra: 1", "extra: unknown key"),
    ("queues: [{name: a}, {name: a}]", "duplicate queue 'a'"),
    ("queues: [{name: a, parent: b}]", "queues[a].parent: no queue 'b'"),
    ("queues: [{name: a, parent: b}, {name: b, parent: a}]", "queues form a cycle"),
    ("queues: [{name: a, weight: 0}]", "queues[a].weight: expected a positive number"),
    ("queues: [{name: a, guaranteed: {gpu: 1}}]", "queues[a].guaranteed.gpu: unknown resource"),
    (
        "queues: [{name: a, guaranteed: {cpu: lots}}]",
        "queues[a].guaranteed.cpu: unparsable quantity",
    ),
    (
        "queues: [{name: a, guaranteed: {cpu: 4}, limit: {cpu: 2}}]",
        "guaranteed.cpu: is above the queue's limit",
    ),
    (
        "queues: [{name: p, guaranteed: {cpu: 4}}, {name: c, parent: p, guaranteed: {cpu: 8}}]",
        "queues[p].guaranteed.cpu: is less than what its children are guaranteed together",
    ),
    ("queues: [{name: a}]", "defaultQueue: no queue 'default'"),
    (
        "defaultQueue: a\nnamespaces: {x: nope}\nqueues: [{name: a}]",
        "namespaces.x: no queue 'nope'",
    ),
    ("queues: [{name: a, colour: red}]", "queues[0].colour: unknown key"),
    ("[", "not valid YAML"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_config_names_the_problem(text: str, message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_queue_config(text)
    assert message in str(err.value)


ADMIT = [
    # (held GPUs per queue, queue, demand, expected reason ("" = admitted))
    ({}, "research", 8, ""),
    ({"research": 36}, "research", 8, "queue research: nvidia.com/gpu 36/40 at limit (needs 8)"),
    (
        {"research": 30, "prod": 20},
        "research",
        8,
        "queue org: nvidia.com/gpu 50/56 at limit (needs 8)",
    ),
    (
        {"prod": 16},
        "prod",
        1,
        "queue prod: nvidia.com/gpu would exceed its guaranteed 16 and the queue does not borrow",
    ),
    # research borrows beyond 32: the unguaranteed pool (64 - 48 - 16 = 0) plus idle guarantees
    (
        {"research": 32, "prod": 16},
        "research",
        6,
        "queue research: nvidia.com/gpu above its guaranteed 32 and only 4 is lent by other "
        "queues (needs 6)",
    ),
    ({"research": 32, "prod": 16}, "research", 2, ""),  # lender lends up to 4 of its 16 idle
    ({"research": 32}, "research", 8, ""),  # prod's idle 16 are lendable without limit
    ({}, "ghost", 1, "queue ghost does not exist"),
]


@pytest.mark.parametrize(("held", "queue", "demand", "reason"), ADMIT)
def test_admission(held: dict, queue: str, demand: int, reason: str) -> None:
    status = admit(usage_of(TREE, held), queue, gpus(demand))
    assert status.reason == reason
    expected = Code.SUCCESS if not reason else Code.UNSCHEDULABLE
    assert status.code is (Code.UNRESOLVABLE if "does not exist" in reason else expected)


def test_full_cluster_is_left_to_placement_not_called_quota() -> None:
    config = "queues: [{name: default}]"
    assert admit(usage_of(config, {"default": 64}), "default", gpus(8)).ok


@pytest.mark.parametrize(
    ("config", "held", "demand"),
    [
        ("queues: [{name: default}]", {"default": 64}, 8),
        ("queues: [{name: default}, {name: b}]", {"default": 70, "b": 3}, 64),  # over already
        ("queues: [{name: default}, {name: b, parent: default}]", {"b": 10}, 100),
    ],
)
def test_queues_without_limits_or_guarantees_admit_anything(
    config: str, held: dict[str, float], demand: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick answer for such a configuration is the one the full check gives."""
    from app.core.policies import proportion

    usage = usage_of(config, held)
    queue = next(iter(held))
    assert admit(usage, queue, gpus(demand)).ok
    monkeypatch.setattr(proportion, "_admits_all", lambda config: False)
    assert admit(usage, queue, gpus(demand)).ok


def test_a_queue_that_does_not_borrow_is_no_open_queue() -> None:
    config = "queues: [{name: a, borrowing: false}, {name: default}]"
    assert not admit(usage_of(config, {}), "a", gpus(1)).ok
    assert admit(usage_of(config, {}), "default", gpus(1)).ok


def test_drf_orders_by_weighted_dominant_share_top_down() -> None:
    usage = usage_of(TREE, {"research": 16, "prod": 8, "default": 4})
    assert dominant_share(usage, "research") == pytest.approx(16 / 64 / 2)
    assert dominant_share(usage, "prod") == pytest.approx(8 / 64)
    order = sorted(["research", "prod", "default"], key=lambda q: order_key(usage, q))
    assert order == ["default", "research", "prod"]  # org (24/64) is behind default (4/64)


def test_deserved_water_filling() -> None:
    config = """
queues:
  - {name: default}
  - {name: a, weight: 1, guaranteed: {nvidia.com/gpu: 8}}
  - {name: b, weight: 3}
  - {name: c, weight: 1, limit: {nvidia.com/gpu: 4}}
"""
    usage = QueueUsage(parse_queue_config(config), gpus(64))
    for name in ("a", "b", "c"):
        usage.add(name, gpus(100), pending=True)  # everyone wants more than the cluster
    fair = {k: v[0] / 1000 for k, v in deserved(usage).items()}
    # c is capped at 4; a gets its 8 guaranteed first; the rest (52) splits 1:3 between a and b
    assert fair["c"] == pytest.approx(4)
    assert fair["a"] == pytest.approx(8 + 13)
    assert fair["b"] == pytest.approx(39)
    assert fair["default"] == 0


def test_queue_file_reload_keeps_the_old_config_on_error(tmp_path: Path) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text("queues: [{name: default}, {name: a}]")
    source = QueueFile(path)
    assert set(source.config.queues) == {"default", "a"}
    path.write_text("queues: [{name: default}, {name: a, weight: -1}]")
    os.utime(path, ns=(1, 10**18))
    assert source.refresh() is False
    assert "queues[a].weight" in source.error and set(source.config.queues) == {"default", "a"}
    path.write_text("queues: [{name: default}, {name: b}]")
    os.utime(path, ns=(1, 2 * 10**18))
    assert source.refresh() is True
    assert set(source.config.queues) == {"default", "b"} and source.error == ""


def test_bad_queue_file_at_start_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "q.yaml"
    path.write_text("queues: nope")
    with pytest.raises(InvalidInput, match="expected a non-empty list"):
        QueueFile(path)


@pytest.mark.parametrize(
    ("config", "queue", "ok", "measured"),
    [
        ("queues: [{name: default}]", "default", True, False),
        ("queues: [{name: default}, {name: b, parent: default}]", "b", True, False),
        ("queues: [{name: default}]", "missing", False, True),  # admit names the queue
        ("queues: [{name: default, limit: {nvidia.com/gpu: 0}}]", "default", False, True),
        ("queues: [{name: default, guaranteed: {nvidia.com/gpu: 8}}]", "default", True, True),
    ],
)
def test_quota_check_measures_usage_only_where_a_queue_could_refuse(
    tmp_path: Path, config: str, queue: str, ok: bool, measured: bool
) -> None:
    """A filter call for a pod on its own checks its queue's quota; with no limit or
    guarantee anywhere the answer is yes whatever the usage, and usage is not measured."""
    from app.core.cycle.planner import Planner
    from app.core.state.cache import ClusterCache
    from tests.factories import pod

    path = tmp_path / "queues.yaml"
    path.write_text(config)
    planner = Planner(ClusterCache(), queues=QueueFile(path))
    calls: list[int] = []
    usage = planner.usage
    planner.usage = lambda *a: calls.append(1) or usage(*a)  # type: ignore[method-assign]
    status = planner.quota_check(pod("p", gpu=1, labels={"muster.io/queue": queue}))
    assert status.ok is ok
    assert bool(calls) is measured
