"""Debian's Chromium driven by Playwright for Python: one headless browser per test module.

Playwright's own browser downloads are never used (``playwright install`` is not run): the
browser is the ``chromium`` package (``apt-get install -y chromium``; ``.ci/run`` installs it).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright

CHROMIUM = Path(os.environ.get("MUSTER_CHROMIUM", "/usr/bin/chromium"))
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: The README's screenshots (docs/ui), which the tests rewrite when MUSTER_SCREENSHOTS=1.
README_SHOTS = Path(__file__).resolve().parents[2] / "docs" / "ui"
#: Where the tests write their screenshots: the README's, or a scratch folder so a test run
#: leaves the checkout as it was.
SHOTS = (
    README_SHOTS
    if os.environ.get("MUSTER_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "muster-ui-screenshots"
)


@contextmanager
def chromium() -> Iterator[Browser]:
    """A headless Chromium; fails (never skips) with how to install it when it is missing."""
    if not CHROMIUM.is_file():
        pytest.fail(
            f"{CHROMIUM} not found: the dashboard tests need Debian's Chromium "
            "(apt-get install -y chromium; .ci/run does it), or MUSTER_CHROMIUM=/path/to/chromium"
        )
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Console:
    """Errors the page reported: console.error messages and uncaught exceptions."""

    errors: list[str] = field(default_factory=list)

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"console.error: {message.text} ({message.location})")

    def on_error(self, error: Exception) -> None:
        self.errors.append(f"uncaught: {error}")


@contextmanager
def open_page(
    browser: Browser, width: int = 1400, height: int = 900
) -> Iterator[tuple[Page, Console]]:
    """A new page (its own context) that records console errors; closed after."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    console = Console()
    page.on("console", console.on_console)
    page.on("pageerror", console.on_error)
    try:
        yield page, console
    finally:
        page.goto("about:blank")  # stops its polling before the context goes
        context.close()


def show(page: Page, base: str, name: str, *, timeout: float = 30_000) -> float:
    """Open dashboard page ``name`` at ``base`` and wait for its first render; returns the
    render time the page measured (milliseconds from its navigation start)."""
    page.goto(f"{base}/ui/#/{name}")
    page.wait_for_selector(f"main[data-page='{name}'][data-ready='1']", timeout=timeout)
    return float(page.evaluate("document.documentElement.dataset.sinceNavigationMs"))


@contextmanager
def visit(browser: Browser, base: str, name: str, cluster: str) -> Iterator[Page]:
    """Open dashboard page ``name``, print its render time (for ``cluster``), yield it, and
    fail if it logged a console error meanwhile."""
    with open_page(browser) as (page, console):
        ms = show(page, base, name)
        print(f"\n{name} page rendered in {ms:.0f} ms ({cluster})")
        yield page
        assert console.errors == [], console.errors
