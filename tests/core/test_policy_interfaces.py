"""Every policy sits behind one of the small named interfaces, and the registry runs them."""

from __future__ import annotations

import pytest

from app.core.policies import (
    binpack,
    drf,
    nodeaffinity,
    nodeunschedulable,
    proportion,
    spread,
    taints,
)
from app.core.policies.interfaces import LabelFilter, NodeFilter, QueueOrder, QuotaCheck, Scorer
from app.core.policies.registry import (
    LABEL_FILTERS,
    NODE_FILTERS,
    STRATEGIES,
    UnknownStrategy,
    scorer,
)


@pytest.mark.parametrize(
    ("policy", "interface"),
    [
        (nodeunschedulable.POLICY, NodeFilter),
        (taints.POLICY, NodeFilter),
        (nodeaffinity.POLICY, LabelFilter),
        (binpack.POLICY, Scorer),
        (spread.POLICY, Scorer),
        (drf.POLICY, QueueOrder),
        (proportion.POLICY, QuotaCheck),
    ],
    ids=lambda x: getattr(x, "name", getattr(x, "__name__", "")),
)
def test_policy_implements_its_interface(policy: object, interface: type) -> None:
    assert isinstance(policy, interface)


def test_registry_lists_policies_explicitly_and_names_are_unique() -> None:
    names = [p.name for p in (*NODE_FILTERS, *LABEL_FILTERS)]
    assert names == ["nodeunschedulable", "taints", "nodeaffinity"]
    assert {k: v.name for k, v in STRATEGIES.items()} == {
        "muster": "binpack",
        "binpack": "binpack",
        "spread": "spread",
    }


def test_unknown_strategy_names_the_choices() -> None:
    with pytest.raises(UnknownStrategy, match="choose one of \\['binpack', 'muster', 'spread'\\]"):
        scorer("random")
