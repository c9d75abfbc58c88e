"""Quantities parse the Kubernetes way, into milli-units."""

from __future__ import annotations

import re

import pytest

from app.core.model.errors import InvalidInput
from app.core.model.quantity import MAX_MILLI, QUANTITY_PATTERN, format_milli, parse_milli

PARSE = [
    ("1", 1000),
    ("100m", 100),
    ("0.5", 500),
    ("1.5", 1500),
    ("2k", 2_000_000),
    ("1Ki", 1024_000),
    ("8Gi", 8 * 2**30 * 1000),
    ("1e3", 1_000_000),
    ("1E-3", 1),
    ("1u", 1),  # rounds up like Kubernetes' MilliValue
    ("0", 0),
    (4, 4000),
    (0.25, 250),
    ("+2", 2000),
    (-0.0, 0),
    # Beyond MAX_MILLI (2**56 thousandths) everything counts as MAX_MILLI.
    ("1e30", MAX_MILLI),
    ("100Ei", MAX_MILLI),
    ("1e999999999", MAX_MILLI),
    ("+50.81E0460424", MAX_MILLI),  # once took 10 s (a million-digit int)
    (10**400, MAX_MILLI),
    ("1e-999999999", 0),
]


@pytest.mark.parametrize(("text", "milli"), PARSE)
def test_parse(text: object, milli: int) -> None:
    assert parse_milli(text) == milli
    if isinstance(text, str):  # the published pattern accepts exactly what parses
        assert re.fullmatch(QUANTITY_PATTERN, text)


@pytest.mark.parametrize(
    "bad",
    ["", "abc", "1.2.3", "5Xi", "-1", "-100m", "1 Gi", True, None, [], " 2 ", "2\n", "-0", -1,
     "\u0663"],  # fmt: skip
)
def test_rejects_with_field(bad: object) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_milli(bad, "spec.cpu")
    assert err.value.field == "spec.cpu"
    if isinstance(bad, str):
        assert not re.fullmatch(QUANTITY_PATTERN, bad)


FORMAT = [
    ("cpu", 100, "100m"),
    ("cpu", 2000, "2"),
    ("nvidia.com/gpu", 4000, "4"),
    ("nvidia.com/gpu", 250, "0.25"),
    ("memory", 8 * 2**30 * 1000, "8Gi"),
    ("memory", 1536 * 2**20 * 1000, "1536Mi"),
    ("memory", 1500 * 2**20 * 1000 + 7000, "1.5Gi"),
    ("pods", 110_000, "110"),
]


@pytest.mark.parametrize(("resource", "milli", "text"), FORMAT)
def test_format(resource: str, milli: int, text: str) -> None:
    assert format_milli(resource, milli) == text
