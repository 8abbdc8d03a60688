"""The submission wire format refuses what a member cluster would refuse, naming the field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from broker.intake.job_spec import JobSpec


def _fields(exc: ValidationError) -> dict[str, str]:
    return {".".join(str(p) for p in e["loc"]): str(e["msg"]) for e in exc.errors()}


@pytest.mark.parametrize(
    ("labels", "bad"),
    [
        ({"has space": "x"}, "has space"),
        ({"team": "has space"}, "team"),
        ({"team": "x" * 64}, "team"),
        ({"a" * 64: "x"}, "a" * 64),
        ({"-team": "x"}, "-team"),
        ({"Bad_Prefix.io/team": "x"}, "Bad_Prefix.io/team"),
        ({"a/b/c": "x"}, "a/b/c"),
        ({"": "x"}, ""),
    ],
)
def test_labels_a_cluster_would_reject_are_refused_at_submit(labels: dict[str, str], bad: str) -> None:
    """The labels go onto the Job and its pods; the API server refuses invalid ones (422), which would
    fail the dispatch on every pass instead of telling the user once."""
    with pytest.raises(ValidationError) as info:
        JobSpec.model_validate({"name": "train", "gpus": 1, "labels": labels})
    fields = _fields(info.value)
    assert "labels" in fields, fields
    assert repr(bad) in fields["labels"]


def test_valid_labels_pass() -> None:
    labels = {"team": "ml", "example.com/cost-center": "A-1.2_b", "empty": "", "x": "y" * 63}
    spec = JobSpec.model_validate({"name": "train", "gpus": 1, "labels": labels})
    assert dict(spec.to_request().labels) == labels
