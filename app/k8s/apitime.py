"""The API's two time formats, written as the API server parses them (RFC 3339, UTC)."""

from __future__ import annotations

from datetime import datetime


def micro_time(moment: datetime) -> str:
    """``moment`` (UTC) as a MicroTime: the API requires six fraction digits."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def whole_time(moment: datetime) -> str:
    """``moment`` (UTC) as a Time: whole seconds."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
