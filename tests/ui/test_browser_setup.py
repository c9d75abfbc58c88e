"""The dashboard tests need Debian's Chromium: without it they fail saying how to get it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ui import browser


def test_a_missing_chromium_fails_saying_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(browser, "CHROMIUM", tmp_path / "no-chromium")
    with pytest.raises(pytest.fail.Exception, match=r"apt-get install -y chromium"):  # noqa: SIM117
        with browser.chromium():
            pass
