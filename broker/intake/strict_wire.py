"""No guessing at the API's edge (issue 48 finding 10): a number field takes a JSON number, a boolean
field takes true or false, as the YAML side already did for `gpus` and `pods`.

Owns `guessed(annotation, value) -> str | None`: why `value` is refused for a field declared
`annotation` (int, float, bool, or one of them | None), or None when it is taken as given. A string
("10", "true", "yes"), or a boolean where a number is due (true is not 1), is refused; everything else is
left to the field's own validation. `Wire`, the base of every wire model (broker.intake.job_spec,
broker.api.schemas), calls it for every field before
pydantic's lax conversion would turn "10" into 10 and "yes" into True; the 422 names the field.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

__all__ = ["DNS_LABEL", "Wire", "guessed"]

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"  # a name, tenant, namespace, priority class

_NUMBERS = (int, float)


def _scalar(annotation: Any) -> type | None:
    """int, float or bool when the field is one of those (optionally | None); None otherwise."""
    if annotation in (int, float, bool):
        return typing.cast(type, annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(kinds) == 1 and kinds[0] in (int, float, bool):
            return typing.cast(type, kinds[0])
    return None


def guessed(annotation: Any, value: Any) -> str | None:
    kind = _scalar(annotation)
    if kind is None or value is None:
        return None
    # in the words of broker.api.validation_text (issue 45): what the field must be, then what it got
    if kind is bool and not isinstance(value, bool):
        return f"must be true or false (got {value!r})"
    if kind in _NUMBERS and isinstance(value, (bool, str)):
        return f"must be a {'whole number' if kind is int else 'number'} (got {value!r})"
    return None


class Wire(BaseModel):
    """The base of every wire model: unknown fields, Infinity and NaN refused; no guessed scalars."""

    # Infinity and NaN are refused by name (JSON parsers accept them; a job waiting forever is no answer).
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_guessing(cls, value: Any, info: ValidationInfo) -> Any:
        """A string for a number or a boolean ("10", "true", "yes"): refused naming the field."""
        field = cls.model_fields.get(info.field_name or "")
        problem = guessed(field.annotation, value) if field is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value
