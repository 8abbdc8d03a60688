"""Validation errors in plain words: what the API says for each bad field instead of pydantic's text.

Owns `plain(error)`, the sentence for one pydantic error (a dict of `ValidationError.errors()`): the
rule the value broke, the value, and for the mistakes new users make a hint of what to write instead
("gpus: at most 64 per pod (got 128); for more GPUs ask for several pods: pods: 2 makes a gang").
The API's 422 handler names the field beside it; every bad field of a submission is listed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["plain"]

_DNS_LABEL = "lowercase letters, digits and '-', starting and ending with a letter or digit"

# Field-specific hints, by the field's last name in the location and the error type.
_HINTS: dict[tuple[str, str], str] = {
    ("gpus", "less_than_equal"): "for more GPUs ask for several pods: `pods: N` makes a gang of N pods",
    ("pods", "less_than_equal"): "split the work into several jobs",
}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _rule(kind: str, ctx: Mapping[str, Any], field: str, msg: str) -> str:
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        if pattern.startswith("^[a-z0-9]([-a-z0-9]"):
            return f"must be a DNS label: {_DNS_LABEL}"
        if pattern == r"^\S+$":
            return "must have no spaces"
        return f"must match {pattern}"
    simple = {
        "missing": "required",
        "extra_forbidden": "unknown field",
        "int_type": "must be a whole number",
        "int_parsing": "must be a whole number",
        "int_from_float": "must be a whole number",
        "float_type": "must be a number",
        "float_parsing": "must be a number",
        "finite_number": "must be a finite number",
        "bool_type": "must be true or false",
        "bool_parsing": "must be true or false",
        "string_type": "must be a string",
        "list_type": "must be a list",
        "dict_type": "must be an object",
        "model_type": "must be an object",
        "model_attributes_type": "must be an object",
    }
    if kind in simple:
        return simple[kind]
    bounds = {
        "less_than_equal": ("at most", "le"),
        "less_than": ("less than", "lt"),
        "greater_than_equal": ("at least", "ge"),
        "greater_than": ("more than", "gt"),
    }
    if kind in bounds:
        words, key = bounds[kind]
        per = " per pod" if field in ("gpus", "cpu", "memoryGiB") else ""
        return f"must be {words} {ctx.get(key)}{per}"
    if kind in ("string_too_long", "too_long"):
        unit = " characters" if kind == "string_too_long" else " items"
        return f"at most {ctx.get('max_length')}{unit}"
    if kind in ("string_too_short", "too_short"):
        unit = " characters" if kind == "string_too_short" else " items"
        return f"at least {ctx.get('min_length')}{unit}"
    if kind in ("literal_error", "enum"):
        return f"must be one of {ctx.get('expected')}"
    return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def plain(error: Mapping[str, Any]) -> str:
    """One pydantic error as a sentence: the rule, the value given (when there was one), a hint."""
    kind = str(error.get("type", ""))
    loc = [p for p in error.get("loc", ()) if isinstance(p, str)]
    field = loc[-1] if loc else ""
    ctx = error.get("ctx") or {}
    text = _rule(kind, ctx, field, str(error.get("msg", "invalid")))
    if kind not in ("missing", "extra_forbidden", "value_error", "assertion_error") and "input" in error:
        text += f" (got {_shown(error['input'])})"
    hint = _HINTS.get((field, kind))
    return f"{text}; {hint}" if hint else text
