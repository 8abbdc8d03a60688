"""The global endpoint: a FastAPI app over BrokerService.

    POST   /v1/jobs              submit a native spec or a plain batch/v1 Job (broker.workload.k8s_job), JSON or
                                 YAML (Content-Type: application/yaml)
                                 (header Idempotency-Key: the same key returns the same job)
    GET    /v1/jobs              list, paged as Kubernetes lists (?limit=N&continue=TOKEN; filters state,
                                 tenant, cluster, name; broker.api.lists)
    GET    /v1/jobs/{id}         one job, with its placement and the reason for its state; a queued one
                                 with queuePosition and queueReason (broker.queue.queueing), and its
                                 predicted on-prem start (predictedStart, predictedWait; docs/burst.md)
    DELETE /v1/jobs/{id}         cancel
    POST   /v1/jobs/{id}/migrate, /v1/clusters/{name}/drain, /undrain   moves (broker.api.moves)
    GET    /v1/jobs/{id}/events  the job's transitions, oldest first; ?watch=1 streams them (SSE)
    GET    /v1/jobs/{id}/logs    the container log from the member cluster (?follow=1&tailLines=N)
    GET    /v1/events            every job's transitions; ?watch=1 streams them live (SSE)
    POST   /v1/explain           dry run: where a job would go and every cluster's verdict, and where it
                                 would stand in the queue (position, why, whether a quota holds it)
    GET    /v1/fleet             capacity per cluster and product (whole, MIG, time-sliced, NUMA) beside the
                                 queued demand per product; ?nodes=true adds each cluster's node table
    GET    /v1/clusters          the member clusters as declared, with health
    GET    /v1/spend             each tenant's cloud spend and budget this period (broker.api.burst)
    GET    /v1/audit             who did what: every write and refused call, filtered and paged (admins and
                                 viewers; broker.api.audit, docs/tenancy.md)
    GET    /metrics              Prometheus text (broker.telemetry): counters, histograms, fleet gauges
    GET    /healthz              liveness only: the process serves HTTP
    GET    /readyz               readiness: 503 with the reason per check (Redis answers; more checks,
                                 e.g. the leader lease, are passed in by the composition root)
    GET    /                     the dashboard (static files in broker/api/dashboard, served under /ui/)

Errors are JSON: {"error": <kind>, "message": ..., "fields": [{"field", "message"}]} with 404, 409,
413 (a body over maxRequestBytes), 422 (every bad field named, camelCase as sent; for a Job, its
field path), 502 (a member cluster failed), 503 (state store down).

Authentication (docs/tenancy.md): every /v1 call carries `Authorization: Bearer <token>`, a static token
(broker.tenancy.auth) or an OIDC ID token (broker.tenancy.oidc); a token maps to a tenant and a role. A user sees and cancels only its own tenant's jobs (another tenant's
job is 404, as if it did not exist), an admin every job, a viewer reads everything and changes nothing.
401 and 403 are Kubernetes Status objects ({"kind": "Status", "apiVersion": "v1", "status": "Failure",
"message", "reason": "Unauthorized" | "Forbidden", "code"}). /healthz, /readyz, /metrics and the dashboard's
static files are open. With `tokens=None` (`gpufed serve --insecure-no-auth`) every caller is an admin.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import orjson
from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import ClientDisconnect

from broker import telemetry
from broker.access.caller import AuthError, caller
from broker.access.credentials import Credentials
from broker.api import lost as api_lost
from broker.api import openapi as api_openapi
from broker.api.audit import AuditMiddleware, add_audit_routes, note
from broker.api.audit_writer import AuditWriter
from broker.api.batch_routes import add_batch_routes, submit_batch
from broker.api.burst import prediction_view, spend_view
from broker.api.follow import add_follow_routes
from broker.api.limits import DEFAULT_MAX_BODY_BYTES, BodyLimit
from broker.api.lists import add_list_routes, job_view, queue_bodies
from broker.api.moves import add_move_routes
from broker.api.schemas import (
    JobView,
    decision_view,
    verdict_view,
)
from broker.api.views import FleetViews
from broker.controller.service import BrokerService
from broker.core.errors import (
    AlreadyExists,
    ClusterError,
    Conflict,
    InvalidRequest,
    NotFound,
    StoreError,
    TooLarge,
)
from broker.core.model import JobEvent, JobRecord
from broker.core.ports import Clock, JobLister, PodLogs
from broker.intake import parse as intake
from broker.intake import validation_text
from broker.intake.submit_batcher import SubmitBatcher
from broker.intake.submit_warnings import SubmitWarnings
from broker.queue import explain_text
from broker.tenancy.audit import AuditLog
from broker.tenancy.auth import Principal, Role, TokenTable
from broker.workload import k8s_job

log = logging.getLogger(__name__)

DASHBOARD = Path(__file__).resolve().parent / "dashboard"

# A readiness check returns normally when its dependency is usable, and raises (the message is the
# reason shown by /readyz) or returns False when it is not.
ReadinessCheck = Callable[[], object]


def _error(status: int, kind: str, message: str, fields: list[dict[str, str]] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": kind, "message": message}
    if fields:
        body["fields"] = fields
    return JSONResponse(status_code=status, content=body)


Caller = Annotated[Principal, Depends(caller)]


def status_body(code: int, message: str) -> dict[str, Any]:
    """A Kubernetes-style Status object (meta/v1 Status) for a refused request."""
    reason = {401: "Unauthorized", 403: "Forbidden"}.get(code, "Unknown")
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _not_ready(checks: Mapping[str, ReadinessCheck]) -> dict[str, str]:
    reasons: dict[str, str] = {}
    for name, check in checks.items():
        try:
            ok = check()
        except Exception as exc:  # a readiness probe reports every failure, whatever its kind
            reasons[name] = str(exc) or type(exc).__name__
            continue
        if ok is False:
            reasons[name] = "not ready"
    return reasons


IDEMPOTENCY_KEY_OPENAPI: dict[str, Any] = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "a retried submit with the same key (per tenant) returns the first job: 200, not 201",
    "schema": {"type": "string", "maxLength": 200},
}
AUTHORIZATION_OPENAPI: dict[str, Any] = {
    "name": "Authorization",
    "in": "header",
    "required": False,
    "description": "Bearer <token> (docs/tenancy.md)",
    "schema": {"type": "string"},
}
SUBMISSION_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "a native job spec (JobSpec) or a plain batch/v1 Job, as JSON or YAML",
        "content": {
            "application/json": {"schema": {"type": "object"}},
            "application/yaml": {"schema": {"type": "object"}},
        },
    }
}


def create_app(
    service: BrokerService,
    clock: Clock,
    readiness: Mapping[str, ReadinessCheck] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    logs: PodLogs | None = None,
    tokens: TokenTable | Credentials | None = None,
    audit: AuditWriter | None = None,
    audit_log: AuditLog | None = None,
    jobs: JobLister | None = None,
    views: FleetViews | None = None,
) -> FastAPI:
    """The API. `tokens` None runs without authentication (every caller an admin): the composition root
    passes None only for an explicit --insecure-no-auth; Credentials are replaced while it runs. `audit`
    records every write and refusal (broker.api.audit), `audit_log` serves GET /v1/audit. `jobs`: where
    job lists are paged from (the composition root passes the store's lister; default the service's
    store). `views`: the read views over the published fleet snapshot (default: built beside `service`)."""
    fleet_views = views if views is not None else FleetViews.of(service)
    app = FastAPI(title="gpufed", version="0.1.0", description="Multi-cluster GPU federation broker")
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    if audit is not None:
        app.add_middleware(AuditMiddleware, writer=audit)  # outside BodyLimit: a 413 is recorded too
    app.state.tokens = Credentials(static=tokens) if isinstance(tokens, TokenTable) else tokens
    batcher = SubmitBatcher(service.submit_many)
    # never-fit at submit (scheduler.never_fit), over the observed summaries alone: the placeable
    # snapshot would re-read every live reservation during a burst (broker.cache.observed_fleet)
    warnings = SubmitWarnings(fleet_views.observed.current, clock)

    async def store_one(prepared: tuple[JobRecord, JobEvent]) -> tuple[JobRecord, bool]:
        return await batcher.submit(await warnings.with_warnings(prepared))

    def visible(principal: Principal, job_id: str) -> JobRecord:
        """The job, if this caller may see it; another tenant's job does not exist for a user."""
        record = service.get(job_id)
        if not principal.may_read(record.request.tenant):
            raise NotFound(f"job {job_id} not found")
        return record

    @app.exception_handler(AuthError)
    async def _auth(_: Request, exc: AuthError) -> JSONResponse:
        headers = {"WWW-Authenticate": 'Bearer realm="gpufed"'} if exc.code == 401 else None
        return JSONResponse(status_code=exc.code, content=status_body(exc.code, str(exc)), headers=headers)

    checks: Mapping[str, ReadinessCheck] = readiness if readiness is not None else {"redis": fleet_views.ping}
    app.mount("/ui", StaticFiles(directory=DASHBOARD, html=True), name="ui")  # /ui/: the page too

    @app.exception_handler(ClientDisconnect)
    async def _client_left(request: Request, _: ClientDisconnect) -> Response:
        # The client went away before sending its whole body: nobody reads the answer, nothing is wrong.
        log.debug("client disconnected mid-body: %s %s", request.method, request.url.path)
        return Response(status_code=400)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        fields = []
        for e in exc.errors():
            loc = [str(p) for p in e.get("loc", ()) if p not in ("body", "query", "header", "path")]
            fields.append({"field": ".".join(loc) or "(body)", "message": validation_text.plain(e)})
        summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        return _error(422, "invalid", summary, fields)

    @app.exception_handler(InvalidRequest)
    async def _invalid_request(_: Request, exc: InvalidRequest) -> JSONResponse:
        code = 413 if isinstance(exc, TooLarge) else 422
        return _error(code, "invalid", str(exc), [{"field": exc.field, "message": exc.detail}])

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound) -> JSONResponse:
        return _error(404, "not-found", str(exc))

    api_lost.install(app)  # a job lost with the state store is explained to its owner: 410

    @app.exception_handler(Conflict)
    async def _conflict(_: Request, exc: Conflict) -> JSONResponse:
        return _error(409, "already-exists" if isinstance(exc, AlreadyExists) else "conflict", str(exc))

    @app.exception_handler(ClusterError)
    async def _cluster(_: Request, exc: ClusterError) -> JSONResponse:
        return _error(502, "cluster", str(exc))

    @app.exception_handler(StoreError)
    async def _store(_: Request, exc: StoreError) -> JSONResponse:
        response = _error(503, "store", str(exc))
        response.headers["Retry-After"] = "2"  # Redis back, or the records rebuilt (errors.Recovering)
        return response

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        reasons = _not_ready(checks)
        if reasons:
            text = "; ".join(f"{k}: {v}" for k, v in sorted(reasons.items()))
            return JSONResponse(
                status_code=503, content={"status": "not-ready", "message": text, "reasons": reasons}
            )
        return JSONResponse(content={"status": "ready", "checks": sorted(checks)})

    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(DASHBOARD / "index.html", media_type="text/html")

    @app.post(
        "/v1/jobs",
        status_code=201,
        response_model=None,
        openapi_extra=SUBMISSION_OPENAPI | {"parameters": [IDEMPOTENCY_KEY_OPENAPI, AUTHORIZATION_OPENAPI]},
    )
    async def submit(request: Request) -> Response:
        # The busiest route reads its request itself: FastAPI's dependency resolution cost more than the
        # rest of a submit (benchmarks/placement.py submit). Same checks, same errors as the others.
        note(request, verb="submit", obj="jobs")
        principal = await caller(request, request.headers.get("authorization"))
        idempotency_key = request.headers.get("idempotency-key")
        if idempotency_key is not None and len(idempotency_key) > 200:
            raise InvalidRequest("Idempotency-Key", "at most 200 characters")
        body = await intake.submission_body(request)
        spec = intake.spec_of(body)
        # Checked on the event loop; stored by the group commit with the submits that come meanwhile.
        if not principal.can_submit:
            raise AuthError(403, f"{principal.name} is a {principal.role}: it may not submit jobs")
        job_request = intake.job_request(body, spec)
        if "tenant" not in spec.model_fields_set or principal.role is not Role.ADMIN:
            # The tenant is the token's; a user naming another tenant is refused, not silently moved.
            if "tenant" in spec.model_fields_set and spec.tenant != principal.tenant:
                raise AuthError(
                    403, f"{principal.name} submits for tenant {principal.tenant}, not {spec.tenant}"
                )
            job_request = replace(job_request, tenant=principal.tenant)
        note(request, tenant=job_request.tenant)
        if job_request.batch.array_count is not None or "dryRun" in request.query_params:  # docs/batch.md
            return await submit_batch(request, service, fleet_views, store_one, job_request, idempotency_key)
        try:
            prepared = service.prepare_submit(job_request, idempotency_key)
        except InvalidRequest as e:  # a plain Job's refusal names the Job's field (its annotation), not ours
            raise (k8s_job.as_job_error(e) if k8s_job.is_k8s_job(body) else e) from None
        record, created = await batcher.submit(await warnings.with_warnings(prepared))
        note(request, obj=f"job/{record.id}", trace_id=telemetry.trace_id_of(record.trace_parent))
        return Response(
            orjson.dumps(job_view(record)), status_code=201 if created else 200, media_type="application/json"
        )

    add_list_routes(app, fleet_views, jobs if jobs is not None else service.store, caller)

    @app.get("/v1/jobs/{job_id}", responses=api_lost.RESPONSES)
    def get_job(job_id: str, principal: Caller) -> dict[str, Any]:
        try:
            record = visible(principal, job_id)
        except NotFound:
            api_lost.answer_removed(service, principal, job_id)  # past retention: 410 with when
            raise
        api_lost.answer(service, principal, record)  # LOST: 410 to its owner until seen (broker.api.lost)
        return queue_bodies(fleet_views, [record])[0]

    @app.delete("/v1/jobs/{job_id}")
    def cancel_job(job_id: str, principal: Caller, request: Request) -> dict[str, Any]:
        note(request, verb="cancel", obj=f"job/{job_id}")
        record = visible(principal, job_id)
        note(request, tenant=record.request.tenant, trace_id=telemetry.trace_id_of(record.trace_parent))
        if not principal.may_cancel(record.request.tenant):
            raise AuthError(403, f"{principal.name} is a {principal.role}: it may not cancel jobs")
        return JobView.of(service.cancel(job_id)).model_dump(by_alias=True)

    def tenant_filter(principal: Caller) -> Callable[[str], bool] | None:
        """What the follow routes (SSE, logs) may show this caller: every tenant for one who reads all."""
        return None if principal.role is not Role.USER else principal.may_read

    add_follow_routes(app, service, logs, reader=tenant_filter)
    add_audit_routes(app, audit_log, caller, AuthError)
    add_move_routes(app, service, caller, AuthError)  # migrate, drain, undrain (docs/migration.md)
    add_batch_routes(app, service, fleet_views, caller, AuthError)  # groups, hold, release (docs/batch.md)

    @app.post("/v1/explain", openapi_extra=SUBMISSION_OPENAPI)
    def explain(
        submitted: Annotated[Any, Depends(intake.submission_body)], principal: Caller
    ) -> dict[str, Any]:
        spec = intake.spec_of(submitted)
        request = spec.to_request()
        if "tenant" not in spec.model_fields_set or principal.role is Role.USER:
            request = replace(request, tenant=principal.tenant)  # the queue as the caller would see it
        decision, verdicts = fleet_views.explain(request)
        body = decision_view(decision)
        body["clusters"] = [verdict_view(v) for v in verdicts]
        slot = fleet_views.explain_queue(request)
        body["summary"] = explain_text.summary(decision, slot)  # agrees with the queue (issue 45)
        body.update(prediction_view(fleet_views.explain_wait(request)))
        body["queue"] = {
            "tenant": request.tenant,
            "position": slot.position,
            "reason": slot.reason,
            "heldByQuota": slot.blocked is not None,
            "borrowing": list(slot.borrowing),
        }
        return body

    @app.get("/v1/fleet")
    def fleet(principal: Caller, nodes: bool = False) -> dict[str, Any]:
        return fleet_views.fleet_body(nodes)

    @app.get("/metrics")
    def metrics() -> Response:
        try:
            sample = fleet_views.metrics_sample()
        except StoreError:
            # Redis is down: still serve this process's counters, with gpufed_store_up 0
            sample = telemetry.FleetSample(summaries=(), now=clock.now(), store_up=False)
        return Response(content=telemetry.exposition(sample), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/spend")
    def spend(principal: Caller) -> dict[str, Any]:
        return spend_view(fleet_views, principal)

    @app.get("/v1/clusters")
    def clusters(principal: Caller, events: Annotated[int, Query(ge=0, le=100)] = 5) -> dict[str, Any]:
        """Member clusters as declared, with their effective health (cause and since), whether they are
        fenced after a loss, and their latest health events; `recovery` is the last rebuild of the job
        records from the clusters after Redis came back empty (None if there was none)."""
        return fleet_views.clusters_body(events)

    api_openapi.install(app)  # /openapi.json completed from the same models (broker.api.openapi)
    return app
