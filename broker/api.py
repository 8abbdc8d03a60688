"""The global endpoint: a FastAPI app over BrokerService.

    POST   /v1/jobs              submit a native spec or a plain batch/v1 Job (broker.k8s_job), JSON or
                                 YAML (Content-Type: application/yaml)
                                 (header Idempotency-Key: the same key returns the same job)
    GET    /v1/jobs              list (?state=QUEUED&state=RUNNING)
    GET    /v1/jobs/{id}         one job, with its placement and the reason for its state
    DELETE /v1/jobs/{id}         cancel
    GET    /v1/jobs/{id}/events  the job's transitions, oldest first; ?watch=1 streams them (SSE)
    GET    /v1/jobs/{id}/logs    the container log from the member cluster (?follow=1&tailLines=N)
    GET    /v1/events            every job's transitions; ?watch=1 streams them live (SSE)
    POST   /v1/explain           dry run: where a job would go and every cluster's verdict
    GET    /v1/fleet             capacity per cluster and product (whole, MIG, time-sliced, NUMA) beside the
                                 queued demand per product; ?nodes=true adds each cluster's node table
    GET    /v1/clusters          the member clusters as declared, with health
    GET    /metrics              Prometheus text (broker.telemetry): counters, histograms, fleet gauges
    GET    /healthz              liveness only: the process serves HTTP
    GET    /readyz               readiness: 503 with the reason per check (Redis answers; more checks,
                                 e.g. the leader lease, are passed in by the composition root)
    GET    /                     the dashboard (static files in broker/dashboard, served under /ui/)

Errors are JSON: {"error": <kind>, "message": ..., "fields": [{"field", "message"}]} with 404, 409,
413 (a body over maxRequestBytes), 422 (every bad field named, camelCase as sent; for a Job, its
field path), 502 (a member cluster failed), 503 (state store down).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import ValidationError

from broker import k8s_job, safe_yaml, telemetry
from broker.api_follow import add_follow_routes
from broker.api_limits import DEFAULT_MAX_BODY_BYTES, BodyLimit
from broker.errors import ClusterError, Conflict, InvalidRequest, NotFound, StoreError
from broker.model import JobState
from broker.ports import Clock, PodLogs
from broker.schemas import (
    JobSpec,
    JobView,
    decision_view,
    node_view,
    summary_view,
    verdict_view,
)
from broker.service import BrokerService

DASHBOARD = Path(__file__).resolve().parent / "dashboard"

# A readiness check returns normally when its dependency is usable, and raises (the message is the
# reason shown by /readyz) or returns False when it is not.
ReadinessCheck = Callable[[], object]


def _error(status: int, kind: str, message: str, fields: list[dict[str, str]] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": kind, "message": message}
    if fields:
        body["fields"] = fields
    return JSONResponse(status_code=status, content=body)


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


YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")
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


async def submission_body(request: Request) -> Any:
    """The submitted document: JSON, or YAML (Content-Type application/yaml) read by safe_yaml with its
    alias limit. Size is capped before this by BodyLimit."""
    raw = await request.body()
    kind = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    try:
        if kind in YAML_TYPES:
            return safe_yaml.load(raw, "body")
        return json.loads(raw)
    except safe_yaml.YamlError as e:
        raise InvalidRequest("(body)", str(e).removeprefix("body: ")) from None
    except (ValueError, RecursionError) as e:
        raise InvalidRequest("(body)", f"not valid JSON: {e}") from None


def spec_of(body: object) -> JobSpec:
    """A submission as a JobSpec: native, or a batch/v1 Job translated (errors name the Job's fields)."""
    if not isinstance(body, Mapping):
        raise InvalidRequest("(body)", f"expected an object, got {type(body).__name__}")
    if k8s_job.is_k8s_job(body):
        assert isinstance(body, Mapping)
        native = k8s_job.to_native(body)
        try:
            return JobSpec.model_validate(native)
        except ValidationError as e:
            raise RequestValidationError(
                [
                    {
                        **err,
                        "loc": (
                            k8s_job.job_field([str(p) if not isinstance(p, int) else p for p in err["loc"]]),
                        ),
                    }
                    for err in e.errors()
                ]
            ) from None
    try:
        return JobSpec.model_validate(body)
    except ValidationError as e:
        raise RequestValidationError(e.errors()) from None


def create_app(
    service: BrokerService,
    clock: Clock,
    readiness: Mapping[str, ReadinessCheck] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    logs: PodLogs | None = None,
) -> FastAPI:
    app = FastAPI(title="gpufed", version="0.1.0", description="Multi-cluster GPU federation broker")
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    checks: Mapping[str, ReadinessCheck] = (
        readiness if readiness is not None else {"redis": service.store.ping}
    )
    app.mount("/ui", StaticFiles(directory=DASHBOARD), name="ui")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        fields = []
        for e in exc.errors():
            loc = [str(p) for p in e.get("loc", ()) if p not in ("body", "query", "header", "path")]
            fields.append({"field": ".".join(loc) or "(body)", "message": str(e.get("msg", "invalid"))})
        summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
        return _error(422, "invalid", summary, fields)

    @app.exception_handler(InvalidRequest)
    async def _invalid_request(_: Request, exc: InvalidRequest) -> JSONResponse:
        return _error(422, "invalid", str(exc), [{"field": exc.field, "message": exc.detail}])

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return _error(404, "not-found", str(exc))

    @app.exception_handler(Conflict)
    async def _conflict(_: Request, exc: Conflict) -> JSONResponse:
        return _error(409, "conflict", str(exc))

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

    @app.post("/v1/jobs", status_code=201, response_model=None, openapi_extra=SUBMISSION_OPENAPI)
    async def submit(
        body: Annotated[Any, Depends(submission_body)],
        idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)] = None,
    ) -> Response:
        spec = spec_of(body)
        # On the event loop, not a worker thread: a submit is one Redis round trip (the store's
        # socket timeouts bound it), and the thread hand-off cost more than the call itself.
        record, created = service.submit(spec.to_request(), idempotency_key)
        return Response(
            JobView.of(record).model_dump_json(by_alias=True),
            status_code=201 if created else 200,
            media_type="application/json",
        )

    @app.get("/v1/jobs")
    def list_jobs(state: Annotated[list[JobState] | None, Query()] = None) -> dict[str, Any]:
        records = service.jobs(list(state) if state else None)
        return {"items": [JobView.of(r).model_dump(by_alias=True) for r in records]}

    @app.get("/v1/jobs/{job_id}")
    def get_job(job_id: str) -> dict[str, Any]:
        return JobView.of(service.get(job_id)).model_dump(by_alias=True)

    @app.delete("/v1/jobs/{job_id}")
    def cancel_job(job_id: str) -> dict[str, Any]:
        return JobView.of(service.cancel(job_id)).model_dump(by_alias=True)

    add_follow_routes(app, service, logs)

    @app.post("/v1/explain", openapi_extra=SUBMISSION_OPENAPI)
    def explain(submitted: Annotated[Any, Depends(submission_body)]) -> dict[str, Any]:
        spec = spec_of(submitted)
        decision, verdicts = service.explain(spec.to_request())
        body = decision_view(decision)
        body["clusters"] = [verdict_view(v) for v in verdicts]
        return body

    @app.get("/v1/fleet")
    def fleet(nodes: bool = False) -> dict[str, Any]:
        now = clock.now()
        summaries = service.fleet()
        demand = telemetry.queued_demand(service.jobs([JobState.QUEUED]))
        clusters = []
        for s in summaries:
            view = summary_view(s, now)
            if nodes:
                table = service.store.get_nodes(s.cluster)
                view["nodeDetail"] = (
                    None
                    if table is None
                    else {
                        "ageSeconds": round(max(0.0, now - table[1]), 1),
                        "items": [node_view(d) for d in table[0]],
                    }
                )
            clusters.append(view)
        totals: dict[str, dict[str, int]] = {}
        for s in summaries:
            for p in s.products:
                t = totals.setdefault(p.product, {"free": 0, "allocatable": 0, "sharedFree": 0, "migFree": 0})
                t["free"] += p.free
                t["allocatable"] += p.allocatable
                t["sharedFree"] += p.shared_free
            for m in s.mig:
                t = totals.setdefault(m.product, {"free": 0, "allocatable": 0, "sharedFree": 0, "migFree": 0})
                t["migFree"] += m.free
        products = [
            {"product": name, **t, "queued": demand.get(name, 0)} for name, t in sorted(totals.items())
        ]
        products += [
            {"product": name, "free": 0, "allocatable": 0, "sharedFree": 0, "migFree": 0, "queued": units}
            for name, units in sorted(demand.items())
            if name not in totals
        ]
        return {"clusters": clusters, "products": products}

    @app.get("/metrics")
    def metrics() -> Response:
        try:
            sample = telemetry.FleetSample(
                summaries=tuple(service.fleet()),
                jobs=tuple(service.jobs([s for s in JobState if not s.terminal])),
                now=clock.now(),
                event_lags=service.store.event_lags(telemetry.EVENT_LAG_BUCKETS),
            )
        except StoreError:
            # Redis is down: still serve this process's counters, with gpufed_store_up 0
            sample = telemetry.FleetSample(summaries=(), now=clock.now(), store_up=False)
        return Response(content=telemetry.exposition(sample), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/clusters")
    def clusters(events: Annotated[int, Query(ge=0, le=100)] = 5) -> dict[str, Any]:
        """Member clusters as declared, with their effective health (cause and since), whether they are
        fenced after a loss, and their latest health events."""
        healths = service.cluster_health()
        beats = {s.cluster: s.heartbeat for s in service.fleet()}
        fenced = service.store.fenced()
        items = []
        for name, t in sorted(service.traits.items()):
            h = healths[name]
            items.append(
                {
                    "name": name,
                    "tier": str(t.tier),
                    "region": t.region,
                    "labels": dict(t.labels),
                    "kueue": t.kueue_local_queue,
                    "health": str(h.health),
                    "healthReason": h.reason,
                    "healthSince": h.since,
                    "heartbeat": beats.get(name, 0.0),
                    "fenced": fenced.get(name),
                    "events": [
                        {"at": e.at, "health": str(e.health), "reason": e.reason}
                        for e in (service.store.cluster_events(name, events) if events else [])
                    ],
                }
            )
        return {"items": items}

    return app
