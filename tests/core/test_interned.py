"""One object per distinct value (``app.core.model.interned``), behind the gang specs, GPU
asks and member shapes that pods of one gang share."""

from __future__ import annotations

import pytest

from app.core.model.interned import Interned

#: (values handed in, in turn, to an Interned of limit 2; for each, the index of the value
#: whose object comes back).
ROWS = [
    ("a new value comes back as itself", [("a", 1)], [0]),
    ("an equal value comes back as the first", [("a", 1), ("a", 1)], [0, 0]),
    ("unequal values are kept apart", [("a", 1), ("b", 2), ("a", 1)], [0, 1, 0]),
    ("past the limit it starts over", [("a", 1), ("b", 2), ("c", 3), ("a", 1)], [0, 1, 2, 3]),
]


@pytest.mark.parametrize(("values", "first"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_equal_values_come_back_as_one_object(
    values: list[tuple[str, int]], first: list[int]
) -> None:
    interned: Interned[tuple[str, int]] = Interned(2)
    # Fresh tuples: equal ones are distinct objects until interned.
    fresh = [tuple(list(v)) for v in values]
    handed = [interned(v) for v in fresh]
    assert [next(i for i, v in enumerate(fresh) if v is h) for h in handed] == first
    assert len(interned) <= 2
