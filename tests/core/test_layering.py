"""Import contracts: app/core is pure and layered by role; only app/k8s imports kubernetes."""

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


#: app/core's folders, lowest first: a module may import core modules of its own folder and of
#: folders listed before it, never after. ``admission`` (the webhook) sits beside the scheduling
#: stack and may import ``model`` only.
LAYERS = ("model", "gpu", "state", "policies", "actions", "cycle", "verbs", "insight")
BESIDE = {"admission": ("model",)}
#: Beyond the layers below it: ``insight`` sizes what-if workloads as the webhook does.
ALSO = {"insight": ("admission",)}
CORE = APP / "core"


def _core_imports(path: Path) -> set[str]:
    """The app.core folders ``path`` imports from (``""`` for the core root package)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["app", "core"]:
                found.add(parts[2] if len(parts) > 2 else "")
    return found


def _allowed(folder: str) -> set[str]:
    if folder in BESIDE:
        return {folder, *BESIDE[folder]}
    return set(LAYERS[: LAYERS.index(folder) + 1]) | set(ALSO.get(folder, ()))


@pytest.mark.parametrize(
    "path",
    sorted(p for p in CORE.rglob("*.py") if p.parent != CORE),
    ids=lambda p: str(p.relative_to(CORE)),
)
def test_core_folders_import_only_downwards(path: Path) -> None:
    folder = path.relative_to(CORE).parts[0]
    assert folder in (*LAYERS, *BESIDE), f"{folder}/ is not a known layer of app/core"
    wrong = _core_imports(path) - _allowed(folder)
    assert not wrong, f"{path.relative_to(APP)} ({folder}) imports app.core {sorted(wrong)}"


def test_model_imports_nothing_of_core_but_model() -> None:
    offenders = {
        str(p.relative_to(CORE)): sorted(_core_imports(p) - {"model"})
        for p in (CORE / "model").rglob("*.py")
        if _core_imports(p) - {"model"}
    }
    assert offenders == {}


def test_at_most_three_modules_at_the_core_root() -> None:
    assert len(list(CORE.glob("*.py"))) <= 3


def test_every_core_folder_says_what_lives_there() -> None:
    for folder in (*LAYERS, *BESIDE):
        doc = ast.get_docstring(ast.parse((CORE / folder / "__init__.py").read_text()))
        assert doc and "import" in doc, f"app/core/{folder}/__init__.py must say what it may import"


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from app.core.verbs.filter import filter_nodes\nimport app.core.cycle.loop\n")
    assert _core_imports(bad) - _allowed("actions") == {"verbs", "cycle"}
