"""Fetch the openb trace into the user cache, checked against pinned SHA-256 checksums.

The openb trace (Alibaba ``cluster-trace-gpu-v2023``, the data of the FGD paper, USENIX ATC'23)
is not part of the repository. ``app.sim.tracedata`` looks for it in ``$MUSTER_OPENB_DIR``,
then in ``../shared/traces/openb`` next to the repository, then in the user cache
(``$XDG_CACHE_HOME/muster/openb``, default ``~/.cache/muster/openb``) that this script fills.

Usage (from the repository root; standard library only, so any Python 3.11 will do)::

    python scripts/fetch_openb.py                 # download into the user cache
    python scripts/fetch_openb.py --dest DIR      # elsewhere (then set MUSTER_OPENB_DIR=DIR)
    python scripts/fetch_openb.py --from DIR      # offline: copy from a folder holding the files

Downloads come from GitHub, repository ``alibaba/clusterdata`` at the pinned ``COMMIT``,
folder ``cluster-trace-gpu-v2023/csv``, over raw.githubusercontent.com. Every file, downloaded
or copied, is written under a temporary name, checked against ``SHA256`` and only then renamed
into place, so a cut download or a changed upstream file never reaches the cache. Files already
in place with the right checksum are kept. Exit status 0 when all files are in place, 1 when
one could not be fetched or has the wrong checksum (the message says which and why).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import shutil
import sys
import urllib.request
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.sim.tracedata import (  # noqa: E402
    ENV_VAR,
    OPENB_FILES,
    TraceDataMissing,
    cache_dir,
    openb_dir,
)

REPOSITORY = "alibaba/clusterdata"
#: A commit of REPOSITORY holding the four files; they have not changed since publication.
COMMIT = "0c9677bb156ded9c63ca40d9aa54cd31d3e75061"
FOLDER = "cluster-trace-gpu-v2023/csv"
#: SHA-256 of each published file.
SHA256 = {
    "openb_node_list_gpu_node.csv": (
        "2beca64b4d3dfa342036a34b56a495c6cef9225db836c81f541282cb1df320b5"
    ),
    "openb_node_list_all_node.csv": (
        "5a85c2af79c66a1efff8bbcbda430400aae56d8431370d738480967e1a9c6b15"
    ),
    "openb_pod_list_default.csv": (
        "1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8"
    ),
    "openb_pod_list_multigpu50.csv": (
        "206f2f5959db30ecb7c44e7f13197c8ec50b7a35558ad3777cc3662ef0fe5373"
    ),
}
TIMEOUT = 60.0


class FetchError(Exception):
    """A file could not be fetched, or is not the published one."""


def url_of(name: str, ref: str = COMMIT) -> str:
    """The raw.githubusercontent.com address of trace file ``name`` at git ``ref``."""
    return f"https://raw.githubusercontent.com/{REPOSITORY}/{ref}/{FOLDER}/{name}"


def sha256_of(path: Path) -> str:
    """The hex SHA-256 of the file at ``path``."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def _download(url: str, to: Path) -> None:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response, to.open("wb") as out:
            shutil.copyfileobj(response, out)
    except (OSError, http.client.HTTPException) as exc:  # URLError and timeouts are OSErrors
        raise FetchError(f"cannot download {url}: {exc}") from exc


def _copy(source: Path, to: Path) -> None:
    try:
        shutil.copyfile(source, to)
    except OSError as exc:
        raise FetchError(f"cannot copy {source}: {exc.strerror or exc}") from exc


def install(name: str, dest: Path, origin: str, get: Callable[[Path], None]) -> bool:
    """Put trace file ``name`` into ``dest``: ``get`` writes it to a temporary file there, which
    is renamed into place once its checksum is the published one. False when the file was
    already there with the right checksum (``get`` is not called)."""
    target = dest / name
    if target.is_file() and sha256_of(target) == SHA256[name]:
        return False
    part = dest / f".{name}.part"
    try:
        get(part)
        got = sha256_of(part)
        if got != SHA256[name]:
            raise FetchError(
                f"{name}: SHA-256 mismatch: got {got}, expected {SHA256[name]} (from {origin});"
                " not installed"
            )
        os.replace(part, target)
    finally:
        part.unlink(missing_ok=True)
    return True


def fetch(
    dest: Path,
    source: Path | None = None,
    ref: str = COMMIT,
    log: Callable[[str], None] = print,
) -> None:
    """Install every trace file into ``dest``: downloaded at git ``ref``, or copied from the
    folder ``source``; each checked against ``SHA256``. Raises ``FetchError`` on the first
    file that fails (files installed before it stay: they are verified)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in OPENB_FILES:
        if source is None:
            origin = url_of(name, ref)
            get = partial(_download, origin)
        else:
            origin = str(source / name)
            get = partial(_copy, source / name)
        done = install(name, dest, origin, get)
        log(f"{name}: {'from ' + origin if done else 'already in place'}")
    log(f"openb trace ready in {dest} (SHA-256 verified)")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dest",
        type=Path,
        default=None,
        help=f"folder to write the files to (default: the user cache, {cache_dir()})",
    )
    origin = parser.add_mutually_exclusive_group()
    origin.add_argument(
        "--from",
        dest="source",
        type=Path,
        metavar="DIR",
        help="copy the files from this folder instead of downloading them (offline)",
    )
    origin.add_argument(
        "--ref",
        default=COMMIT,
        help=f"git commit or branch of {REPOSITORY} to download from (default: the pinned "
        f"{COMMIT[:12]}); the checksums are checked whatever it is",
    )
    args = parser.parse_args(argv)
    dest: Path = args.dest.absolute() if args.dest else cache_dir()
    try:
        fetch(dest, args.source, args.ref)
    except (FetchError, OSError) as exc:  # OSError: dest cannot be written
        print(f"fetch_openb: {exc}", file=sys.stderr)
        return 1
    try:
        found: Path | None = openb_dir()
    except TraceDataMissing:
        found = None
    if found is None or found.resolve() != dest.resolve():
        where = f"finds {found} first" if found else f"does not look in {dest}"
        print(f"note: the openb lookup {where}; set {ENV_VAR}={dest} to use this copy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
