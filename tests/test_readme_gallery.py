"""README's explain gallery is what Muster says today (regenerate with
``python scripts/explain_gallery.py --write``)."""

from __future__ import annotations

from pathlib import Path

from scripts.explain_gallery import gallery


def test_readme_holds_the_current_gallery() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert gallery() in readme, (
        "README's explain gallery is stale: run scripts/explain_gallery.py --write"
    )
