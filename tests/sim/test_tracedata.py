"""Where the openb trace is looked up: $MUSTER_OPENB_DIR, then ../shared beside the repository,
then the user cache; a clear error naming all three and the fetch command when none holds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.sim import tracedata
from app.sim.tracedata import (
    ENV_VAR,
    FETCH_COMMAND,
    OPENB_FILES,
    TraceDataMissing,
    cache_dir,
    openb_dir,
    openb_file,
)


def trace_folder(folder: Path, names: tuple[str, ...] = OPENB_FILES) -> Path:
    """``folder`` holding (empty) files with the trace's names."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text("")
    return folder


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """The three places of the lookup, under ``tmp_path`` and all empty; the variable unset."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(tracedata, "SIBLING", tmp_path / "shared" / "traces" / "openb")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return {
        "env": tmp_path / "env",
        "sibling": tmp_path / "shared" / "traces" / "openb",
        "cache": tmp_path / "xdg" / "muster" / "openb",
    }


def test_the_variable_wins(places: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    for folder in places.values():
        trace_folder(folder)
    monkeypatch.setenv(ENV_VAR, str(places["env"]))
    assert openb_dir() == places["env"]
    assert openb_file("openb_pod_list_default.csv") == places["env"] / "openb_pod_list_default.csv"


def test_then_the_folder_beside_the_repository(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    trace_folder(places["sibling"])
    trace_folder(places["cache"])
    assert openb_dir() == places["sibling"]
    # a variable naming a folder without the whole trace does not stop the lookup
    trace_folder(places["env"], OPENB_FILES[:2])
    monkeypatch.setenv(ENV_VAR, str(places["env"]))
    assert openb_dir() == places["sibling"]
    monkeypatch.setenv(ENV_VAR, "")  # empty counts as unset
    assert openb_dir() == places["sibling"]


def test_then_the_user_cache(places: dict[str, Path]) -> None:
    trace_folder(places["sibling"], OPENB_FILES[1:])  # one file short
    trace_folder(places["cache"])
    assert cache_dir() == places["cache"]
    assert openb_dir() == places["cache"]


def test_the_cache_defaults_to_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_dir() == tmp_path / ".cache" / "muster" / "openb"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored, as XDG says
    assert cache_dir() == tmp_path / ".cache" / "muster" / "openb"


def test_nowhere_is_a_clear_error(places: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TraceDataMissing) as caught:
        openb_dir()
    text = str(caught.value)
    assert isinstance(caught.value, FileNotFoundError)
    assert f"${ENV_VAR}: not set" in text
    assert f"({places['sibling']}): no such folder" in text
    assert f"({places['cache']}): no such folder" in text
    assert FETCH_COMMAND in text
    # the order of the places is the order of the lookup
    assert text.index(ENV_VAR) < text.index("../shared") < text.index("user cache")

    trace_folder(places["env"], OPENB_FILES[:1])
    monkeypatch.setenv(ENV_VAR, str(places["env"]))
    with pytest.raises(FileNotFoundError, match="missing openb_node_list_all_node.csv, openb_pod"):
        openb_dir()
