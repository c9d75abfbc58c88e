"""scripts/fetch_openb.py: checksums of the real trace, a corrupted copy refused, ``--from``
installs offline, downloads go to the pinned raw.githubusercontent.com address."""

from __future__ import annotations

import http.client
import io
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from app.sim import tracedata
from app.sim.tracedata import ENV_VAR, OPENB_FILES, openb_dir
from tests.scriptload import script_module


@pytest.fixture(scope="module")
def fetch_openb() -> Iterator[ModuleType]:
    yield from script_module("fetch_openb")


def copy_of_trace(to: Path) -> Path:
    """A writable copy of the real trace in ``to`` (fails, saying how to fetch, without it)."""
    source = openb_dir()
    to.mkdir(parents=True)
    for name in OPENB_FILES:
        shutil.copyfile(source / name, to / name)
    return to


def test_the_checksums_are_the_trace(fetch_openb: ModuleType) -> None:
    assert set(fetch_openb.SHA256) == set(OPENB_FILES)
    folder = openb_dir()
    for name in OPENB_FILES:
        assert fetch_openb.sha256_of(folder / name) == fetch_openb.SHA256[name], name


def test_from_installs_into_the_user_cache(
    fetch_openb: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = openb_dir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr(tracedata, "SIBLING", tmp_path / "no-shared")
    assert fetch_openb.main(["--from", str(source)]) == 0
    cache = tmp_path / "xdg" / "muster" / "openb"
    assert sorted(p.name for p in cache.iterdir()) == sorted(OPENB_FILES)  # no temporary left
    for name in OPENB_FILES:
        assert (cache / name).read_bytes() == (source / name).read_bytes()
    assert openb_dir() == cache
    out = capsys.readouterr().out
    assert f"openb trace ready in {cache}" in out and "note:" not in out
    # a second run keeps what is in place
    assert fetch_openb.main(["--from", str(source)]) == 0
    assert capsys.readouterr().out.count("already in place") == len(OPENB_FILES)


def test_dest_elsewhere_says_how_to_use_it(
    fetch_openb: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "elsewhere"
    assert fetch_openb.main(["--from", str(openb_dir()), "--dest", str(dest)]) == 0
    assert all((dest / name).is_file() for name in OPENB_FILES)
    assert f"set {ENV_VAR}={dest}" in capsys.readouterr().out


def test_a_corrupted_copy_is_refused(
    fetch_openb: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = copy_of_trace(tmp_path / "source")
    bad = source / "openb_pod_list_default.csv"
    bad.write_bytes(bad.read_bytes().replace(b"openb-pod-0001,6000", b"openb-pod-0001,6001", 1))
    dest = tmp_path / "dest"
    assert fetch_openb.main(["--from", str(source), "--dest", str(dest)]) == 1
    err = capsys.readouterr().err
    assert "openb_pod_list_default.csv: SHA-256 mismatch" in err
    assert f"expected {fetch_openb.SHA256['openb_pod_list_default.csv']}" in err
    assert f"got {fetch_openb.sha256_of(bad)}" in err and "not installed" in err
    # the files before it are in place and verified; the bad one and its temporary are not
    assert sorted(p.name for p in dest.iterdir()) == sorted(OPENB_FILES[:2])


def test_a_missing_source_file_is_a_clear_error(
    fetch_openb: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert fetch_openb.main(["--from", str(tmp_path / "nowhere"), "--dest", str(tmp_path)]) == 1
    assert f"cannot copy {tmp_path / 'nowhere' / OPENB_FILES[0]}" in capsys.readouterr().err


def test_downloads_come_from_the_pinned_commit(
    fetch_openb: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = openb_dir()
    asked: list[str] = []

    def urlopen(url: str, timeout: float) -> io.BytesIO:
        asked.append(url)
        return io.BytesIO((source / url.rsplit("/", 1)[1]).read_bytes())

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    assert fetch_openb.main(["--dest", str(tmp_path)]) == 0
    base = "https://raw.githubusercontent.com/alibaba/clusterdata"
    commit = fetch_openb.COMMIT
    assert re.fullmatch("[0-9a-f]{40}", commit), "pinned to a commit, not a branch"
    assert asked == [f"{base}/{commit}/cluster-trace-gpu-v2023/csv/{n}" for n in OPENB_FILES]
    assert all((tmp_path / name).is_file() for name in OPENB_FILES)


def test_a_failed_download_is_a_clear_error(
    fetch_openb: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def urlopen(url: str, timeout: float) -> io.BytesIO:
        raise urllib.error.HTTPError(url, 404, "Not Found", http.client.HTTPMessage(), None)

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    assert fetch_openb.main(["--dest", str(tmp_path), "--ref", "master"]) == 1
    err = capsys.readouterr().err
    assert "cannot download https://raw.githubusercontent.com/alibaba/clusterdata/master/" in err
    assert "HTTP Error 404" in err
    assert list(tmp_path.iterdir()) == []
