"""Kubernetes resource quantities ("1500m", "2Gi", "1e3", "0.5") as exact numbers.

Owns parsing of the `resource.Quantity` string form only. Values are exact (Decimal), and the helpers
round up the way the kubelet and scheduler do when they need an integer (milli-CPU, bytes, devices).
A bad quantity raises QuantityError (a ValueError); callers turn it into MalformedObject with the field.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

__all__ = ["QuantityError", "parse_quantity", "to_int", "to_millis"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkMGTPE]?))$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """The exact value of a quantity given as a string ("250m", "4Gi", "1e3") or a plain number."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"not a quantity: {value!r}")
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(f"not a quantity: {value!r}")
    try:
        number = Decimal(match["num"])
        if match["bin"]:
            return number * _BINARY[match["bin"]]
        if match["exp"]:
            return number * Decimal(10) ** int(match["exp"][1:])
        return number * _DECIMAL[match["dec"] or ""]
    except (InvalidOperation, OverflowError) as exc:
        raise QuantityError(f"not a quantity: {value!r}") from exc


def to_int(value: object) -> int:
    """The quantity as a whole number, rounded up (bytes, device counts)."""
    return int(parse_quantity(value).to_integral_value(rounding=ROUND_CEILING))


def to_millis(value: object) -> int:
    """The quantity in thousandths, rounded up ("1.5" CPU -> 1500, "250m" -> 250)."""
    return int((parse_quantity(value) * 1000).to_integral_value(rounding=ROUND_CEILING))
