"""Fixtures of the dashboard tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from tests.ui.browser import chromium


@pytest.fixture
def browser() -> Iterator[Browser]:
    """Headless Chromium, one per test: it is gone before a module's servers stop."""
    with chromium() as b:
        yield b
