"""The OpenAPI document at /openapi.json, generated from the same pydantic models as the API (issue 21,
case 8).

FastAPI describes what its routes declare; the busiest routes read and answer their bodies themselves
(broker.api.routes: POST /v1/jobs reads JSON or YAML, answers with orjson), so without help the document
said `object` for a submission and nothing for its answer, and disagreed with the API (e.g. `name`
optional). This module completes the generated document from the models the API validates and answers
with, so the two cannot drift apart:

    JobSpec      a native submission (broker.intake.job_spec.JobSpec, validation mode: required fields,
                 types, bounds, patterns as the API checks them); KubernetesJob: a plain batch/v1 Job
    JobView      a job as submit and cancel answer it (schemas.JobView, what lists.job_view writes)
    Job          a job as GET /v1/jobs/{id} and the job list answer it: JobView and the queue's fields
    JobList      a page of jobs; EventList: a job's events (schemas.EventView)
    Error        {error, message, fields?} (routes._error, broker.api.lost's 410); Status: a 401/403

and the answers every /v1 route may give (401, 403, 503; 404 for a job id or a cluster name; 409 for a
move that cannot be made; 413 and 422 for a body).
tests/integration/test_openapi_contract.py compares the document with the models and runs schemathesis
against the app.

    install(app)   replace app.openapi with the completed document (built once, then cached)
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from broker.api.schemas import EventView, JobView
from broker.intake.job_spec import JobSpec

REF = "#/components/schemas/{model}"

_NULLABLE_NUMBER = {"anyOf": [{"type": "number"}, {"type": "null"}]}
_NULLABLE_INTEGER = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
_NULLABLE_STRING = {"anyOf": [{"type": "string"}, {"type": "null"}]}

# What GET /v1/jobs/{id} and the list add to a JobView (lists.job_body, burst.prediction_view).
QUEUE_FIELDS: dict[str, Any] = {
    "queuePosition": _NULLABLE_INTEGER,
    "queueReason": _NULLABLE_STRING,
    "predictedStart": _NULLABLE_NUMBER,
    "predictedWaitSeconds": _NULLABLE_NUMBER,
    "predictedCluster": _NULLABLE_STRING,
    "predictedWait": _NULLABLE_STRING,
}

_ERROR: dict[str, Any] = {
    "type": "object",
    "required": ["error", "message"],
    "properties": {
        "error": {"type": "string"},
        "message": {"type": "string"},
        "fields": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    },
}
_STATUS: dict[str, Any] = {
    "type": "object",
    "description": "a Kubernetes Status (401: no or unknown token; 403: the role may not do this)",
    "required": ["kind", "status", "message", "code"],
    "properties": {
        "kind": {"const": "Status"},
        "apiVersion": {"type": "string"},
        "metadata": {"type": "object"},
        "status": {"type": "string"},
        "message": {"type": "string"},
        "reason": {"type": "string"},
        "code": {"type": "integer"},
    },
}
_KUBERNETES_JOB: dict[str, Any] = {
    "type": "object",
    "description": "a plain batch/v1 Job (docs/quickstart.md); its fields are checked as the API server would",
    "required": ["apiVersion", "kind"],
    "properties": {
        "apiVersion": {"const": "batch/v1"},
        "kind": {"const": "Job"},
        "metadata": {"type": "object"},
        "spec": {"type": "object"},
    },
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


def _model(model: type[BaseModel], mode: str, into: dict[str, Any]) -> dict[str, Any]:
    schema = model.model_json_schema(by_alias=True, ref_template=REF, mode=mode)  # type: ignore[arg-type]
    for name, sub in schema.pop("$defs", {}).items():
        into.setdefault(name, sub)
    return schema


def component_schemas() -> dict[str, Any]:
    """Every schema the completed document names, from the models."""
    out: dict[str, Any] = {}
    out["JobSpec"] = _model(JobSpec, "validation", out)
    view = _model(JobView, "serialization", out)
    out["JobView"] = view
    job = copy.deepcopy(view)
    job["title"] = "Job"
    job["properties"].update(QUEUE_FIELDS)
    out["Job"] = job
    out["EventView"] = _model(EventView, "serialization", out)
    out["JobList"] = {
        "type": "object",
        "required": ["kind", "apiVersion", "metadata", "items"],
        "properties": {
            "kind": {"const": "JobList"},
            "apiVersion": {"type": "string"},
            "metadata": {"type": "object", "properties": {"continue": {"type": "string"}}},
            "items": {"type": "array", "items": _ref("Job")},
        },
    }
    out["EventList"] = {
        "type": "object",
        "required": ["items"],
        "properties": {"items": {"type": "array", "items": _ref("EventView")}},
    }
    out["KubernetesJob"] = _KUBERNETES_JOB
    out["Error"] = _ERROR
    out["Status"] = _STATUS
    return out


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_SUBMISSION = {"anyOf": [_ref("JobSpec"), _ref("KubernetesJob")]}
_ERRORS = {
    "401": _json(_ref("Status"), "no or unknown token"),
    "403": _json(_ref("Status"), "the caller's role or tenant may not do this"),
    "503": _json(_ref("Error"), "Redis does not answer, the records are being rebuilt, or draining"),
}


def _complete(doc: dict[str, Any]) -> dict[str, Any]:
    doc.setdefault("components", {}).setdefault("schemas", {}).update(component_schemas())
    paths = doc.get("paths", {})
    for path, ops in paths.items():
        for method, op in ops.items():
            if not path.startswith("/v1/"):
                continue
            responses = op.setdefault("responses", {})
            for code, answer in _ERRORS.items():
                responses.setdefault(code, answer)
            if "{job_id}" in path:
                responses.setdefault("404", _json(_ref("Error"), "no such job (or another tenant's)"))
            if path.startswith("/v1/clusters/{name}"):
                responses.setdefault("404", _json(_ref("Error"), "no such member cluster"))
            if path.startswith("/v1/groups/{name}"):  # broker.api.batch_routes
                responses.setdefault("404", _json(_ref("Error"), "no such group (or another tenant's)"))
            if path.endswith("/hold") or path.endswith("/release"):
                responses.setdefault("409", _json(_ref("Error"), "placed already, or not held"))
            if path.endswith("/migrate") or path.endswith("/drain"):  # broker.api.moves
                responses.setdefault("409", _json(_ref("Error"), "it cannot move now: the reason"))
            if method in ("post", "put", "patch"):
                responses.setdefault("413", _json(_ref("Error"), "the body is over maxRequestBytes"))
            if "422" in responses or method in ("post", "put", "patch"):
                responses["422"] = _json(_ref("Error"), "invalid input: each field named")
    submit = paths.get("/v1/jobs", {}).get("post")
    if submit is not None:
        submit["requestBody"]["content"] = {
            "application/json": {"schema": _SUBMISSION},
            "application/yaml": {"schema": _SUBMISSION},
        }
        submit["responses"]["201"] = _json(
            _ref("JobView"), "the job was accepted (an array: {kind: JobList, group, items}, docs/batch.md)"
        )
        submit["responses"]["200"] = _json(_ref("JobView"), "the Idempotency-Key names a job already")
        submit["responses"]["409"] = _json(_ref("Error"), "a live job of this tenant has this name")
    explain = paths.get("/v1/explain", {}).get("post")
    if explain is not None:
        explain["requestBody"]["content"] = {
            "application/json": {"schema": _SUBMISSION},
            "application/yaml": {"schema": _SUBMISSION},
        }
    one = paths.get("/v1/jobs/{job_id}", {})
    if "get" in one:
        one["get"]["responses"]["200"] = _json(_ref("Job"), "the job")
        one["get"]["responses"]["410"] = _json(
            _ref("Error"), "lost with the state store while QUEUED (told to its owner until seen)"
        )
    if "delete" in one:
        one["delete"]["responses"]["200"] = _json(_ref("JobView"), "the job, CANCELLED")
        one["delete"]["responses"]["409"] = _json(_ref("Error"), "the job has ended already")
    listed = paths.get("/v1/jobs", {}).get("get")
    if listed is not None:
        listed["responses"]["200"] = _json(_ref("JobList"), "a page of jobs, oldest first")
        listed["responses"]["400"] = _json(_ref("Error"), "a continue token of another query")
    audit = paths.get("/v1/audit", {}).get("get")
    if audit is not None:
        audit["responses"]["404"] = _json(_ref("Error"), "this broker keeps no audit trail")
    events = paths.get("/v1/jobs/{job_id}/events", {}).get("get")
    if events is not None:
        events["responses"]["200"] = {
            "description": "the job's events, oldest first (?watch=1: a server-sent event stream)",
            "content": {
                "application/json": {"schema": _ref("EventList")},
                "text/event-stream": {"schema": {"type": "string"}},
            },
        }
    return doc


def install(app: FastAPI) -> None:
    generate: Callable[[], dict[str, Any]] = app.openapi

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _complete(copy.deepcopy(generate()))
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]
