"""Import contracts: app/core is pure; only app/k8s imports kubernetes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"
EDGE = {"fastapi", "starlette", "kubernetes", "httpx", "prometheus_client", "uvicorn"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("path", sorted((APP / "core").rglob("*.py")), ids=lambda p: p.name)
def test_core_is_pure(path: Path) -> None:
    assert not _imports(path) & EDGE, f"{path} imports {_imports(path) & EDGE}"


def test_only_k8s_imports_kubernetes() -> None:
    offenders = [
        str(p.relative_to(APP))
        for p in APP.rglob("*.py")
        if "kubernetes" in _imports(p) and (APP / "k8s") not in p.parents
    ]
    assert offenders == []


def test_the_check_sees_imports(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import fastapi\nfrom kubernetes import client\n")
    assert _imports(bad) & EDGE == {"fastapi", "kubernetes"}
