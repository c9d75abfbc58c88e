"""Every test here runs against a real control plane: marked ``e2e``, skipped only when
``MUSTER_SKIP_E2E=1`` (a local opt-out; CI always runs them)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
SKIP = pytest.mark.skipif(os.environ.get("MUSTER_SKIP_E2E") == "1", reason="MUSTER_SKIP_E2E=1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(SKIP)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """Control plane + Muster (cluster mode) + kube-scheduler using Muster, per test module."""
    from harness import muster_cluster

    with muster_cluster() as parts:
        yield parts
