"""Gang membership from pod metadata, under every convention Muster understands."""

from __future__ import annotations

import pytest

from app.core.model.gang import collect_gangs, gang_spec
from tests.factories import pod

CONVENTIONS = [
    # (labels, annotations, expected (name, min, max, timeout), problem substring)
    (
        {"muster.io/pod-group": "llama", "muster.io/min-member": "4"},
        {},
        ("llama", 4, None, None),
        "",
    ),
    (
        {"muster.io/pod-group": "el"},
        {"muster.io/min-member": "2", "muster.io/max-member": "6", "muster.io/gang-timeout": "90"},
        ("el", 2, 6, 90.0),
        "",
    ),
    (
        {"scheduling.x-k8s.io/pod-group": "co"},
        {"pod-group.scheduling.sigs.k8s.io/min-available": "3"},
        ("co", 3, None, None),
        "",
    ),
    (
        {},
        {"scheduling.k8s.io/group-name": "vc", "scheduling.volcano.sh/group-min-member": "8"},
        ("vc", 8, None, None),
        "",
    ),
    (
        {"kueue.x-k8s.io/pod-group-name": "kq"},
        {"kueue.x-k8s.io/pod-group-total-count": "5"},
        ("kq", 5, None, None),
        "",
    ),
    (
        {"pod-group-name": "kai"},
        {"kai.scheduler/batch-min-member": "2"},
        ("kai", 2, None, None),
        "",
    ),
    # Muster's min-member wins over a convention's own key
    (
        {"kueue.x-k8s.io/pod-group-name": "kq", "muster.io/min-member": "2"},
        {"kueue.x-k8s.io/pod-group-total-count": "5"},
        ("kq", 2, None, None),
        "",
    ),
    (
        {"scheduling.x-k8s.io/pod-group": "nomin"},
        {},
        ("nomin", None, None, None),
        "no min-member given",
    ),
    (
        {"muster.io/pod-group": "bad", "muster.io/min-member": "many"},
        {},
        ("bad", None, None, None),
        "is not a whole number",
    ),
    (
        {"muster.io/pod-group": "zero", "muster.io/min-member": "0"},
        {},
        ("zero", None, None, None),
        "must be at least 1",
    ),
    (
        {"muster.io/pod-group": "inv", "muster.io/min-member": "4", "muster.io/max-member": "2"},
        {},
        ("inv", 4, 2, None),
        "below the min-member",
    ),
    (
        {"muster.io/pod-group": "t", "muster.io/min-member": "1", "muster.io/gang-timeout": "-5"},
        {},
        ("t", 1, None, None),
        "not a positive number",
    ),
]


@pytest.mark.parametrize(("labels", "annotations", "expected", "problem"), CONVENTIONS)
def test_conventions(labels: dict, annotations: dict, expected: tuple, problem: str) -> None:
    spec = gang_spec(pod(labels=labels, annotations=annotations, namespace="ml"))
    assert spec is not None
    assert (spec.name, spec.min_member, spec.max_member, spec.timeout) == expected
    assert spec.key == f"ml/{expected[0]}"
    assert (problem in spec.problem) if problem else spec.problem == ""


def test_plain_pod_is_no_gang() -> None:
    assert gang_spec(pod(labels={"app": "x"})) is None


def gang_pod(group: str, minimum: str, **kw: object):
    return pod(labels={"muster.io/pod-group": group, "muster.io/min-member": minimum}, **kw)


def test_members_disagreeing_on_min_member_are_reported() -> None:
    gangs = collect_gangs([gang_pod("g", "2"), gang_pod("g", "3")], lambda p: False)
    assert gangs["default/g"].problem == "members disagree on min-member (2, 3)"
    assert gangs["default/g"].min_member == 0


def test_collect_splits_bound_and_pending_and_skips_finished() -> None:
    pods = [
        gang_pod("g", "2", node="n1"),
        gang_pod("g", "2"),
        gang_pod("g", "2", phase="Succeeded", node="n1"),
        gang_pod("h", "1", namespace="other"),
    ]
    gangs = collect_gangs(pods, lambda p: bool(p.node_name))
    g = gangs["default/g"]
    assert (len(g.members), len(g.bound), len(g.pending), g.running) == (2, 1, 1, False)
    assert set(gangs) == {"default/g", "other/h"}
