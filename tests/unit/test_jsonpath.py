"""`-o jsonpath=` over the broker's answers: a field that is there with no value (null, as a queued job's
`placement`) reads as empty under it, as kubectl does; a field that is not there at all is an error."""

from __future__ import annotations

import pytest

from broker.cli.jsonpath import JsonPathError, render_jsonpath

JOBS = {
    "items": [
        {"name": "a", "state": "RUNNING", "placement": {"product": "H100-80GB"}},
        {"name": "b", "state": "QUEUED", "placement": None},
    ]
}


def test_a_null_field_reads_as_empty_inside_a_range() -> None:
    out = render_jsonpath('{range .items[*]}{.name}{"\\t"}{.placement.product}{"\\n"}{end}', JOBS)
    assert out == "a\tH100-80GB\nb\t\n"


def test_a_path_that_is_not_there_is_still_an_error() -> None:
    with pytest.raises(JsonPathError, match="is not found"):
        render_jsonpath("{.items[*].nope}", JOBS)
