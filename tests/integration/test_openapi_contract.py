"""The served OpenAPI document agrees with the API (issue 21, case 8).

The app in-process (ASGI) with auth on, over a private Redis (a key prefix of its own), a service with a
recording gateway and one idle cluster. First the document is compared with the models the routes
validate and answer with: the submission's required fields, property names and types are JobSpec's,
the answers' are JobView's and EventView's, and every route is in it. Then schemathesis generates
requests from the document (valid and invalid, bounded to a few examples per operation, a minute or
two here) and every answer must be no 5xx, a documented status code, and conform to the schema.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err
from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance
from starlette.testclient import TestClient

from adapters.redis_store import RedisStateStore
from broker.api.openapi import QUEUE_FIELDS
from broker.api.routes import create_app
from broker.api.schemas import EventView, JobView
from broker.config.settings import load_tokens
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits
from broker.intake.job_spec import JobSpec
from tests.integration.test_public_routes import write_tokens
from tests.integration.test_tenancy import TOKENS
from tests.service_doubles import ManualClock, RecordingGateway, idle_h100_node

pytestmark = pytest.mark.integration

EXAMPLES = 12  # per operation: about a minute here for all of them


@pytest.fixture(scope="module")
def app(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FastAPI]:
    store = RedisStateStore(redis_url, prefix="openapi" + uuid.uuid4().hex[:8])
    clock = ManualClock()
    store.put_summary(idle_h100_node("c1", clock.now()))
    service = BrokerService(store, RecordingGateway(), clock, {"c1": ClusterTraits("c1")})
    tokens = load_tokens(write_tokens(tmp_path_factory.mktemp("tokens")))
    yield create_app(service, clock, tokens=tokens)
    keys = list(store.client.scan_iter(match=f"{store.prefix}:*"))
    if keys:
        store.client.delete(*keys)
    store.close()


@pytest.fixture(scope="module")
def document(app: FastAPI) -> dict[str, Any]:
    with TestClient(app) as client:
        r = client.get("/openapi.json")
    assert r.status_code == 200
    doc: dict[str, Any] = r.json()
    return doc


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _types(schema: dict[str, Any]) -> set[str]:
    """The JSON types a property schema allows (through anyOf and $ref, which name objects)."""
    if "type" in schema:
        return {schema["type"]}
    if "$ref" in schema or "const" in schema:
        return {"object"} if "$ref" in schema else {type(schema["const"]).__name__}
    return set().union(*(_types(s) for s in schema.get("anyOf", [])))


def _same_shape(served: dict[str, Any], model: dict[str, Any], doc: dict[str, Any]) -> None:
    assert set(served.get("required", [])) == set(model.get("required", []))
    assert set(served["properties"]) >= set(model["properties"])
    for name, prop in model["properties"].items():
        assert _types(served["properties"][name]) == _types(prop), name


def test_the_document_says_what_the_routes_validate_and_answer(
    app: FastAPI, document: dict[str, Any]
) -> None:
    paths = document["paths"]
    for route in app.routes:
        if isinstance(route, APIRoute) and route.include_in_schema:
            for method in set(route.methods or ()) - {"HEAD"}:
                assert method.lower() in paths.get(route.path, {}), f"{method} {route.path} undocumented"

    submit = paths["/v1/jobs"]["post"]
    body = submit["requestBody"]["content"]["application/json"]["schema"]
    native = _resolve(document, body["anyOf"][0])
    spec = JobSpec.model_json_schema(by_alias=True)
    _same_shape(native, spec, document)
    assert "name" in native["required"]  # required here as in the API (it was optional in the document)
    assert native["properties"]["gpus"]["type"] == "integer"  # "2" and true are refused, not numbers
    assert native.get("additionalProperties") is False  # an unknown field is refused by name
    for code in ("200", "201"):
        answer = _resolve(document, submit["responses"][code]["content"]["application/json"]["schema"])
        _same_shape(answer, JobView.model_json_schema(by_alias=True, mode="serialization"), document)
    one = paths["/v1/jobs/{job_id}"]["get"]["responses"]
    job = _resolve(document, one["200"]["content"]["application/json"]["schema"])
    _same_shape(job, JobView.model_json_schema(by_alias=True, mode="serialization"), document)
    assert set(QUEUE_FIELDS) <= set(job["properties"]) and "410" in one and "404" in one
    events = paths["/v1/jobs/{job_id}/events"]["get"]["responses"]["200"]["content"]["application/json"]
    event = _resolve(document, _resolve(document, events["schema"])["properties"]["items"]["items"])
    _same_shape(event, EventView.model_json_schema(by_alias=True, mode="serialization"), document)
    for path, ops in paths.items():
        for method, op in ops.items():
            if path.startswith("/v1/"):
                assert {"401", "403"} <= set(op["responses"]), f"{method} {path}: auth answers undocumented"


def test_generated_requests_get_no_5xx_and_answers_that_conform_to_the_document(app: FastAPI) -> None:
    """schemathesis over every documented operation but the streams (logs, SSE: their own tests), a
    few generated requests each (valid and invalid), as an admin (every route open to it)."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    headers = {"Authorization": f"Bearer {TOKENS['root']}"}
    checks = [not_a_server_error, status_code_conformance, response_schema_conformance]
    ran: list[str] = []
    failures: list[str] = []
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            failures.append(f"the document has an invalid operation: {result.err()}")
            continue
        operation = result.ok()
        if operation.path.endswith("/logs"):
            continue

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case: Any) -> None:
            if case.query and str(case.query.get("watch", "")).lower() in ("1", "true", "yes", "on"):
                return  # a server-sent event stream: followed by test_following.py
            case.call_and_validate(headers=headers, checks=checks)

        try:
            run()
        except Exception as exc:  # every operation's failure, not only the first one's
            failures.append(f"{operation.label}: {exc}")
        ran.append(operation.label)
    assert "POST /v1/jobs" in ran and "GET /v1/jobs/{job_id}" in ran, ran
    assert not failures, "\n\n".join(failures)
