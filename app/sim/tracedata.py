"""Where the openb trace lives: one lookup for the simulator, the scripts and the tests.

The openb trace (Alibaba ``cluster-trace-gpu-v2023``, the FGD paper's data) is not part of the
repository. ``openb_dir()`` returns the first of these folders that holds all of
``OPENB_FILES``:

1. ``$MUSTER_OPENB_DIR``, when set;
2. ``../shared/traces/openb`` next to the repository (the team folder; CI has it);
3. the user cache, ``$XDG_CACHE_HOME/muster/openb`` (default ``~/.cache/muster/openb``),
   which ``python scripts/fetch_openb.py`` fills from the public repository, checksummed.

When none does it raises ``TraceDataMissing``, naming every place tried and the fetch command.
Standard library only: ``scripts/fetch_openb.py`` imports it before any dependency is installed.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Environment variable naming a folder that holds the trace; tried first.
ENV_VAR = "MUSTER_OPENB_DIR"
#: The files a folder must hold to count as the trace.
OPENB_FILES = (
    "openb_node_list_gpu_node.csv",
    "openb_node_list_all_node.csv",
    "openb_pod_list_default.csv",
    "openb_pod_list_multigpu50.csv",
)
#: How to get the trace, as the error message and the docs say it.
FETCH_COMMAND = "python scripts/fetch_openb.py"
#: The repository root (app/sim/tracedata.py is two levels below it).
REPO = Path(__file__).resolve().parents[2]
#: The team folder beside the repository.
SIBLING = REPO.parent / "shared" / "traces" / "openb"


class TraceDataMissing(FileNotFoundError):
    """No folder of the lookup holds the openb trace."""


def cache_dir() -> Path:
    """The user cache folder for the trace: ``$XDG_CACHE_HOME/muster/openb``, or
    ``~/.cache/muster/openb`` when that variable is unset or not an absolute path (as the XDG
    base directory spec says to treat it)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "muster" / "openb"


def candidates() -> list[tuple[str, Path | None]]:
    """The places ``openb_dir`` tries, in order, each with a label; ``None`` when the
    environment variable is unset."""
    env = os.environ.get(ENV_VAR, "")
    return [
        (f"${ENV_VAR}", Path(env).expanduser() if env else None),
        ("../shared/traces/openb next to the repository", SIBLING),
        ("user cache", cache_dir()),
    ]


def missing_files(folder: Path) -> list[str]:
    """The names of ``OPENB_FILES`` that ``folder`` lacks (all of them if it is no folder)."""
    return [name for name in OPENB_FILES if not (folder / name).is_file()]


def openb_dir() -> Path:
    """The first folder of the lookup that holds every file of the openb trace.

    Raises ``TraceDataMissing`` (a ``FileNotFoundError``) naming the places tried and how to
    fetch the trace when none does.
    """
    tried: list[str] = []
    for label, folder in candidates():
        if folder is None:
            tried.append(f"  {label}: not set")
            continue
        missing = missing_files(folder)
        if not missing:
            return folder
        what = "no such folder" if not folder.is_dir() else f"missing {', '.join(missing)}"
        tried.append(f"  {label} ({folder}): {what}")
    raise TraceDataMissing(
        "the openb trace is not in the repository and was not found; looked in, in order:\n"
        + "\n".join(tried)
        + f"\nFetch it into the user cache with `{FETCH_COMMAND}` (from the repository root),"
        f" or set {ENV_VAR} to a folder holding {', '.join(OPENB_FILES)}."
    )


def openb_file(name: str) -> Path:
    """``name`` (one of ``OPENB_FILES``) in the folder ``openb_dir()`` finds."""
    return openb_dir() / name
