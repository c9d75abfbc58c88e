"""Test spies: record what a function returns while the code under test calls it."""

from __future__ import annotations

from typing import Any

import pytest


def returns_of(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[Any]:
    """Replace ``owner.name`` (a module function or a class's method) with a wrapper that
    calls it and records each value it returns, in order; the list fills as calls happen."""
    real = getattr(owner, name)
    seen: list[Any] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(owner, name, spy)
    return seen
