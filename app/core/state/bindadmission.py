"""Whether a gang's Bindings go to the API server as dry runs first.

``BindAdmission`` keeps, per admission configuration the API server serves, what in it may see
Muster's Bindings (``app.core.model.admissionrules``), as ``app.k8s.admission`` lists and
watches them. A dry run is wanted while anything may see them, and while that is not known:
before the first full list, for good when the configurations cannot be read (no RBAC, say),
and while a watch of them is failing (what changed meanwhile is not known): the dry runs are
the safe side, they only cost requests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal

#: ``auto``: dry runs only while some admission configuration may see Bindings (or that is
#: not known); ``always``: before every gang's binds.
DryRunMode = Literal["auto", "always"]


class BindAdmission:
    """What admission may see Muster's Bindings; thread-safe (the watch threads write, bind
    calls read)."""

    def __init__(self, mode: DryRunMode = "auto") -> None:
        if mode not in ("auto", "always"):
            raise ValueError(f"bind dry-run mode: expected auto or always, got {mode!r}")
        self._mode = mode
        self._lock = threading.Lock()
        #: source -> configuration name -> what in it matches (only non-empty entries kept)
        self._seen: dict[str, dict[str, tuple[str, ...]]] = {}
        self._known = False
        self._healthy: Callable[[], bool] = lambda: True

    def watch_health(self, healthy: Callable[[], bool]) -> None:
        """``healthy`` says whether every watch of the configurations works now."""
        self._healthy = healthy

    def replace(self, source: str, matches: Mapping[str, tuple[str, ...]]) -> None:
        """Every configuration of ``source`` as just listed."""
        with self._lock:
            self._seen[source] = {name: m for name, m in matches.items() if m}

    def upsert(self, source: str, name: str, matches: tuple[str, ...]) -> None:
        """Configuration ``name`` of ``source`` was added or changed."""
        with self._lock:
            found = self._seen.setdefault(source, {})
            if matches:
                found[name] = matches
            else:
                found.pop(name, None)

    def delete(self, source: str, name: str) -> None:
        """Configuration ``name`` of ``source`` is gone."""
        with self._lock:
            self._seen.get(source, {}).pop(name, None)

    def drop(self, source: str) -> None:
        """The API server no longer serves ``source``'s kind."""
        with self._lock:
            self._seen.pop(source, None)

    def mark_known(self) -> None:
        """Every served kind has been listed once: from now on the lists are the truth."""
        with self._lock:
            self._known = True

    def dry_run_wanted(self) -> bool:
        """Whether a gang's Bindings should be tried as dry runs before any is made."""
        healthy = self._healthy()
        with self._lock:
            return self._wanted(self._known and healthy, any(self._seen.values()))

    def _wanted(self, known: bool, matching: bool) -> bool:
        return self._mode == "always" or not known or matching

    def describe(self) -> dict[str, Any]:
        """For ``/debug``: the mode, whether the configurations are known (listed, and every
        watch of them working), what matches, and so whether dry runs are on."""
        healthy = self._healthy()
        with self._lock:
            matching = sorted(m for found in self._seen.values() for ms in found.values()
                              for m in ms)  # fmt: skip
            known = self._known and healthy
        wanted = self._wanted(known, bool(matching))
        return {"mode": self._mode, "known": known, "seeBindings": matching, "dryRun": wanted}
