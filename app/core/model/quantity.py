"""Kubernetes resource quantities (``100m``, ``8Gi``, ``1e3``) as integers in milli-units.

Every resource amount inside Muster is an ``int`` counting thousandths of the unit, so cpu
``100m`` is 100, one GPU is 1000 and ``1Ki`` of memory is 1_024_000. Integers keep arithmetic
exact; the milli scale lets fractional GPUs share the same representation later.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation, Overflow

from app.core.model.errors import InvalidInput

_SUFFIX: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
# QUANTITY_PATTERN with groups; ASCII digits only (Python's \d also matches other scripts').
_QUANTITY = re.compile(
    r"(\+?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?"
)
_cache: dict[str, int] = {}
#: Larger amounts count as this much (about 72 TB of memory, 72 trillion CPUs): node tables are
#: int64, and sums over a node's pods must not wrap. No real node or pod comes near it.
MAX_MILLI = 2**56
#: What ``parse_milli`` accepts as a string (published in the OpenAPI document as is): a
#: non-negative decimal with an optional exponent or suffix, nothing around it.
QUANTITY_PATTERN = (
    "^\\+?(?:[0-9]+\\.?[0-9]*|\\.[0-9]+)(?:[eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$"
)


def parse_milli(value: object, field: str = "") -> int:
    """Parse a quantity (string or number) into milli-units, rounding up like Kubernetes.

    Raises ``InvalidInput`` naming ``field`` for anything unparsable or negative (a string must
    match ``QUANTITY_PATTERN``: no sign but ``+``, no spaces). Amounts above ``MAX_MILLI``
    count as ``MAX_MILLI``.
    """
    if isinstance(value, bool):
        raise InvalidInput(field, f"expected a quantity, got {value!r}")
    if isinstance(value, int | float):
        if not value >= 0:  # also nan
            raise InvalidInput(field, f"negative quantity {value!r}")
        text = str(value) if isinstance(value, int) else repr(abs(value))  # -0.0 is 0
    elif isinstance(value, str):
        if value.startswith("-"):
            raise InvalidInput(field, f"negative quantity {value!r}")
        text = value
    else:
        raise InvalidInput(field, f"expected a quantity string, got {type(value).__name__}")
    cached = _cache.get(text)
    if cached is not None:
        return cached
    match = _QUANTITY.fullmatch(text)
    if not match:
        raise InvalidInput(field, f"unparsable quantity {value!r}")
    number, exponent, suffix = match.groups()
    try:
        amount = Decimal(number)
        amount *= Decimal(10) ** int(exponent[1:]) if exponent else _SUFFIX[suffix or ""]
        exact = (amount * 1000).to_integral_value(rounding=ROUND_CEILING)
        # Compared before int(): turning 1E+460000 into an int takes seconds.
        milli = MAX_MILLI if exact > MAX_MILLI else int(exact)
    except Overflow:
        milli = MAX_MILLI  # an exponent beyond Decimal's range: far above the cap
    except (InvalidOperation, ValueError) as exc:
        raise InvalidInput(field, f"unparsable quantity {value!r}") from exc
    if len(_cache) < 4096:
        _cache[text] = milli
    return milli


def format_milli(resource: str, milli: int) -> str:
    """Human form of an amount of ``resource``: ``2``, ``500m``, ``0.25``, ``8Gi``."""
    if resource == "memory":
        value = milli // 1000
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= size and value % size == 0:
                return f"{value // size}{unit}"
        if value >= 2**30:
            return f"{value / 2**30:.1f}Gi"
        if value >= 2**20:
            return f"{value / 2**20:.1f}Mi"
        return str(value)
    if milli % 1000 == 0:
        return str(milli // 1000)
    if resource == "cpu":
        return f"{milli}m"
    return f"{milli / 1000:g}"
