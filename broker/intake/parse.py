"""Reading a submission: the body (JSON or YAML), the JobSpec it makes (native, a batch/v1 Job or another
workload kind, errors naming the manifest's fields) and the JobRequest of it. The API's POST /v1/jobs and
/v1/explain and the hub's sync (broker.ha.hub_sync) both read submissions here, one path for both.

Bad input raises InvalidRequest or RequestValidationError naming the field (the API answers 422 with
them; the hub writes `first_problem` on the object's status).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from broker.core import safe_yaml, strict_json
from broker.core.errors import InvalidRequest
from broker.core.model import JobRequest
from broker.intake import validation_text
from broker.intake.batch_schemas import with_object_group
from broker.intake.job_spec import JobSpec
from broker.workload import k8s_job
from broker.workload.kinds import registry as kinds

__all__ = ["YAML_TYPES", "first_problem", "job_request", "spec_of", "submission_body", "submission_request"]

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")


async def submission_body(request: Request) -> Any:
    """The submitted document: JSON, or YAML (Content-Type application/yaml) read by safe_yaml with its
    alias limit. Size is capped before this by BodyLimit."""
    raw = await request.body()
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    try:
        if kind in YAML_TYPES:
            return safe_yaml.load(raw, "body")
        return strict_json.load(raw, "body")  # a key named twice is refused, as in YAML
    except (safe_yaml.YamlError, strict_json.JsonError) as e:
        raise InvalidRequest("(body)", str(e).removeprefix("body: ")) from None


def spec_of(body: object) -> JobSpec:
    """A submission as a JobSpec: native, or a batch/v1 Job translated (errors name the Job's fields)."""
    if not isinstance(body, Mapping):
        raise InvalidRequest("(body)", f"expected an object, got {type(body).__name__}")
    if k8s_job.is_k8s_job(body):
        assert isinstance(body, Mapping)
        adapter = kinds.kind_of(body)  # JobSet, TrainJob, PyTorchJob, RayJob (broker/workload/kinds)
        origin: Mapping[str, str] = {}
        if adapter is not None:
            native, problems, origin = kinds.to_native_all(body)
        else:
            native, problems = k8s_job.to_native_all(
                body
            )  # one problem per part of the Job, not the first only
        errors: list[dict[str, Any]] = [
            {"loc": (p.field,), "msg": p.detail, "type": "value_error"} for p in problems
        ]
        try:
            spec = JobSpec.model_validate(native)
        except ValidationError as e:
            reported = {p.field for p in problems}
            for err in e.errors():
                loc = [str(p) if not isinstance(p, int) else p for p in err["loc"]]
                field = kinds.kind_field(loc, origin) if adapter is not None else k8s_job.job_field(loc)
                if field not in reported and not (problems and not err["loc"]):  # no echo of a part refused
                    errors.append({**err, "loc": (field,)})
        else:
            if not errors:
                return spec
        raise RequestValidationError(errors)
    try:
        return JobSpec.model_validate(body)
    except ValidationError as e:
        raise RequestValidationError(e.errors()) from None


def job_request(body: Any, spec: JobSpec) -> JobRequest:
    """The JobRequest of a read submission: a workload kind (JobSet, RayJob, ...) keeps its object on the
    request (broker.workload.kinds), and a Kubernetes object's group label or annotation is its group."""
    return with_object_group(body, kinds.with_workload(body, spec.to_request()))


def submission_request(body: Mapping[str, Any]) -> JobRequest:
    """The JobRequest `POST /v1/jobs` makes of a manifest body (InvalidRequest or RequestValidationError
    naming the manifest's field); a workload kind (JobSet, RayJob, ...) keeps its object on the request
    (broker.workload.kinds), as the API's submit does."""
    return job_request(body, spec_of(body))


def first_problem(exc: RequestValidationError) -> tuple[str, str]:
    """The first refused field of a validation error, and its message in plain words."""
    for e in exc.errors():
        loc = [str(p) for p in e.get("loc", ()) if p not in ("body", "query", "header", "path")]
        return ".".join(loc) or "(body)", validation_text.plain(e)
    return "(body)", "invalid"
