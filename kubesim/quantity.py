"""Kubernetes resource quantities for the simulator: parse "500m", "4Gi", "1e3", 8 into floats and back.

Owns only the arithmetic form the controllers need (floats: cores for cpu, bytes for memory, counts for
extended resources) and the canonical-looking strings written into object status. Parsing is cached:
the same few strings ("8", "1Ti", "110") appear on every node and pod.
"""

from __future__ import annotations

import re
from functools import lru_cache

_SUFFIX: dict[str, float] = {
    "": 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


@lru_cache(maxsize=4096)
def _parse_str(text: str) -> float:
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise QuantityError(
            f"quantities must match the regular expression of a Kubernetes quantity: {text!r}"
        )
    number, exponent, suffix = match.groups()
    value = float(number + (exponent or ""))
    return value * _SUFFIX[suffix or ""]


def parse_quantity(value: str | int | float) -> float:
    """A quantity as a float (cores, bytes or a count). Raises QuantityError naming the bad text."""
    if isinstance(value, bool):
        raise QuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        raise QuantityError(f"not a quantity: {value!r}")
    return _parse_str(value)


def format_quantity(value: float, resource: str = "") -> str:
    """A canonical-looking string: whole numbers plain, fractional cpu in millicores, memory in binary units."""
    if resource == "cpu" and abs(value - round(value)) > 1e-9:
        return f"{round(value * 1000)}m"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        whole = round(value)
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if whole and whole % size == 0:
                return f"{whole // size}{suffix}"
        return str(whole)
    if abs(value - round(value)) < 1e-9:
        return str(round(value))
    return f"{round(value * 1000)}m"


def parse_resource_list(resources: dict[str, object] | None) -> dict[str, float]:
    """A ResourceList (name -> quantity) as floats; an invalid entry raises QuantityError naming the resource."""
    out: dict[str, float] = {}
    for name, raw in (resources or {}).items():
        try:
            out[name] = parse_quantity(raw)  # type: ignore[arg-type]
        except QuantityError as exc:
            raise QuantityError(f"{name}: {exc}") from None
    return out
