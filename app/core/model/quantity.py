"""Kubernetes resource quantities (``100m``, ``8Gi``, ``1e3``) as integers in milli-units.

Every resource amount inside Muster is an ``int`` counting thousandths of the unit, so cpu
``100m`` is 100, one GPU is 1000 and ``1Ki`` of memory is 1_024_000. Integers keep arithmetic
exact; the milli scale lets fractional GPUs share the same representation later.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

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
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)
_cache: dict[str, int] = {}
#: Larger amounts are refused: node tables are int64, and sums over a node's pods must not wrap.
MAX_MILLI = 2**56


def parse_milli(value: object, field: str = "") -> int:
    """Parse a quantity (string or number) into milli-units, rounding up like Kubernetes.

    Raises ``InvalidInput`` naming ``field`` for anything unparsable or negative.
    """
    if isinstance(value, bool):
        raise InvalidInput(field, f"expected a quantity, got {value!r}")
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        text = repr(value)
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise InvalidInput(field, f"expected a quantity string, got {type(value).__name__}")
    cached = _cache.get(text)
    if cached is not None:
        return cached
    match = _QUANTITY.match(text)
    if not match:
        raise InvalidInput(field, f"unparsable quantity {value!r}")
    number, exponent, suffix = match.groups()
    try:
        amount = Decimal(number)
        amount *= Decimal(10) ** int(exponent[1:]) if exponent else _SUFFIX[suffix or ""]
    except (InvalidOperation, ValueError, OverflowError) as exc:
        raise InvalidInput(field, f"unparsable quantity {value!r}") from exc
    if amount < 0:
        raise InvalidInput(field, f"negative quantity {value!r}")
    milli = int((amount * 1000).to_integral_value(rounding=ROUND_CEILING))
    if milli > MAX_MILLI:
        raise InvalidInput(field, f"quantity {value!r} is too large")
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
