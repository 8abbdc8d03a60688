"""The wire format of a submission's batch fields (docs/batch.md): `group`, `array`, `dependsOn`, `notify`.

Owns their validation at the edge (errors name the field as the user wrote it), the expansion of an
array into its members' requests (`array_members`), and the group of a Kubernetes object submitted as
such (its label or annotation gpufed.io/group). The JobSpec fields themselves are in broker.intake.job_spec.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, model_validator

from broker.core.batch_fields import BatchFields, Dependency, Notify, When
from broker.core.errors import InvalidRequest
from broker.core.model import JobRequest, JobState

__all__ = [
    "GROUP_LABEL",
    "ArraySpec",
    "DependencySpec",
    "NotifySpec",
    "array_members",
    "group_of_object",
    "parse_array",
    "with_object_group",
]

GROUP_LABEL = "gpufed.io/group"  # a Kubernetes object's group: label or annotation
GROUP_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
MAX_ARRAY = 1000  # members of one array at most
_NOTIFIABLE = tuple(s.value for s in JobState if s not in (JobState.PENDING,))


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


class ArraySpec(_Wire):
    """`array: {count: N, parallelism: P}`: N members of one group, at most P placed or running at once."""

    count: int = Field(ge=1, le=MAX_ARRAY, strict=True)
    parallelism: int | None = Field(default=None, ge=1, le=MAX_ARRAY, strict=True)


class DependencySpec(_Wire):
    """`{job: NAME_OR_ID, when: succeeded}` or `{group: NAME, when: ...}`."""

    job: str | None = Field(default=None, min_length=1, max_length=253)
    group: str | None = Field(default=None, pattern=GROUP_PATTERN)
    when: When = When.SUCCEEDED

    @model_validator(mode="after")
    def _one_target(self) -> DependencySpec:
        if (self.job is None) == (self.group is None):
            raise ValueError("name exactly one of job or group")
        return self

    def to_dependency(self) -> Dependency:
        if self.job is not None:
            return Dependency("job", self.job, self.when)
        assert self.group is not None
        return Dependency("group", self.group, self.when)


class NotifySpec(_Wire):
    """`notify: {webhook: URL, on: [SUCCEEDED, FAILED]}`: a signed POST when the job reaches a state."""

    webhook: AnyHttpUrl
    on: list[str] = Field(default_factory=lambda: ["SUCCEEDED", "FAILED"], min_length=1, max_length=16)

    @model_validator(mode="after")
    def _known_states(self) -> NotifySpec:
        for i, state in enumerate(self.on):
            if state.upper() not in _NOTIFIABLE:
                raise ValueError(f"on[{i}]: {state!r} is not a job state; one of {', '.join(_NOTIFIABLE)}")
        return self

    def to_notify(self) -> Notify:
        return Notify(str(self.webhook), tuple(dict.fromkeys(s.upper() for s in self.on)))


def batch_fields(
    group: str | None,
    array: ArraySpec | None,
    depends_on: list[DependencySpec],
    notify: NotifySpec | None,
    name: str,
) -> BatchFields:
    """A JobSpec's batch fields; an array without a group is the group named after the job."""
    return BatchFields(
        group=group or (name if array is not None else ""),
        array_count=array.count if array is not None else None,
        parallelism=array.parallelism if array is not None else None,
        depends_on=tuple(d.to_dependency() for d in depends_on),
        notify=notify.to_notify() if notify is not None else None,
    )


_ARRAY = re.compile(r"^(\d+)-(\d+)(?:%(\d+))?$|^(\d+)(?:%(\d+))?$")


def parse_array(text: str) -> dict[str, int]:
    """The CLI's `--array 0-49%8` (Slurm's syntax; indexes from 0) as the `array` field; ValueError says why."""
    m = _ARRAY.match(text.strip())
    if m is None:
        raise ValueError(f"--array {text!r}: expected FIRST-LAST[%PARALLELISM], e.g. 0-49%8")
    if m.group(4) is not None:
        count, cap = int(m.group(4)), m.group(5)
    else:
        first, last, cap = int(m.group(1)), int(m.group(2)), m.group(3)
        if first != 0 or last < first:
            raise ValueError(f"--array {text!r}: indexes run from 0 (0-{max(last, 0)})")
        count = last + 1
    out = {"count": count}
    if cap is not None:
        out["parallelism"] = int(cap)
    return out


def array_members(request: JobRequest) -> list[JobRequest]:
    """The requests an array submit stands for (one per index: named NAME-INDEX, GPUFED_ARRAY_INDEX and
    GPUFED_ARRAY_COUNT in its environment); a request that is no array stands for itself."""
    batch = request.batch
    if batch.array_count is None:
        return [request]
    out: list[JobRequest] = []
    for i in range(batch.array_count):
        env = (
            *request.env,
            {"name": "GPUFED_ARRAY_INDEX", "value": str(i)},
            {"name": "GPUFED_ARRAY_COUNT", "value": str(batch.array_count)},
        )
        out.append(replace(request, name=f"{request.name}-{i}", env=env, batch=replace(batch, array_index=i)))
    return out


def with_object_group(body: Any, request: JobRequest) -> JobRequest:
    """A Kubernetes object's request with the group its label or annotation names (docs/batch.md)."""
    group = group_of_object(body) if isinstance(body, Mapping) and not request.batch.group else None
    if not group:
        return request
    if not re.match(GROUP_PATTERN, group):
        raise InvalidRequest(f"metadata.labels[{GROUP_LABEL}]", f"{group!r} is not a DNS label")
    return replace(request, batch=replace(request.batch, group=group))


def group_of_object(body: Mapping[str, Any]) -> str | None:
    """A Kubernetes object's group: its label or annotation gpufed.io/group (None: none)."""
    meta = body.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    for where in ("labels", "annotations"):
        values = meta.get(where)
        if isinstance(values, Mapping) and isinstance(values.get(GROUP_LABEL), str):
            return str(values[GROUP_LABEL])
    return None
