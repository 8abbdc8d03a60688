"""JSON read strictly: a key an object names twice is refused naming it, as safe_yaml does for YAML
(Python's json keeps the last one silently; issue 48 finding 10). Pure.

Owns `load(raw, what) -> Any` (JsonError, a ValueError, with a one-line message).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["JsonError", "load"]


class JsonError(ValueError):
    """JSON that is not read: malformed, or naming a key twice in one object."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise JsonError(f"duplicate key {key!r}: say it once")
        out[key] = value
    return out


def load(raw: str | bytes, what: str = "JSON") -> Any:
    try:
        return json.loads(raw, object_pairs_hook=_object)
    except JsonError as e:
        raise JsonError(f"{what}: {e}") from None
    except (ValueError, RecursionError) as e:
        raise JsonError(f"{what}: not valid JSON: {e}") from None
