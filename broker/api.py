"""The global endpoint: a FastAPI app over BrokerService.

    POST   /v1/jobs              submit (header Idempotency-Key: the same key returns the same job)
    GET    /v1/jobs              list (?state=QUEUED&state=RUNNING)
    GET    /v1/jobs/{id}         one job, with its placement and the reason for its state
    DELETE /v1/jobs/{id}         cancel
    GET    /v1/jobs/{id}/events  the job's transitions, oldest first
    POST   /v1/explain           dry run: where a job would go and every cluster's verdict
    GET    /v1/fleet             capacity per cluster and product (what operators watch)
    GET    /v1/clusters          the member clusters as declared, with health
    GET    /metrics              Prometheus text: fleet gauges from the summaries, broker counters
    GET    /healthz

Errors are JSON: {"error": <kind>, "message": ..., "fields": [{"field", "message"}]} with 404, 409,
422 (every bad field named, camelCase as sent), 502 (a member cluster failed), 503 (state store down).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import FastAPI, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse

from broker import telemetry
from broker.errors import ClusterError, Conflict, InvalidRequest, NotFound, StoreError
from broker.model import Health, JobState
from broker.ports import Clock
from broker.schemas import EventView, JobSpec, JobView, decision_view, summary_view, verdict_view
from broker.service import BrokerService


def _error(status: int, kind: str, message: str, fields: list[dict[str, str]] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": kind, "message": message}
    if fields:
        body["fields"] = fields
    return JSONResponse(status_code=status, content=body)


def create_app(service: BrokerService, clock: Clock) -> FastAPI:
    app = FastAPI(title="gpufed", version="0.1.0", description="Multi-cluster GPU federation broker")

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
        return _error(503, "store", str(exc))

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/jobs", status_code=201, response_model=None)
    async def submit(
        spec: JobSpec,
        idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)] = None,
    ) -> Response:
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

    @app.get("/v1/jobs/{job_id}/events")
    def job_events(job_id: str) -> dict[str, Any]:
        return {"items": [EventView.of(e).model_dump() for e in service.events(job_id)]}

    @app.post("/v1/explain")
    def explain(spec: JobSpec) -> dict[str, Any]:
        decision, verdicts = service.explain(spec.to_request())
        body = decision_view(decision)
        body["clusters"] = [verdict_view(v) for v in verdicts]
        return body

    @app.get("/v1/fleet")
    def fleet() -> dict[str, Any]:
        now = clock.now()
        return {"clusters": [summary_view(s, now) for s in service.fleet()]}

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> str:
        lines: list[str] = []
        now = clock.now()

        def gauge(name: str, help_text: str, samples: list[tuple[dict[str, str], float]]) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} gauge")
            for labels, value in samples:
                label_text = ",".join(f'{k}="{v}"' for k, v in labels.items())
                lines.append(f"{name}{{{label_text}}} {value:g}")

        summaries = service.fleet()
        per_product = [(s, p) for s in summaries for p in s.products]
        gauge(
            "gpufed_gpus_free",
            "free whole GPUs",
            [({"cluster": s.cluster, "product": p.product}, p.free) for s, p in per_product],
        )
        gauge(
            "gpufed_gpus_allocatable",
            "allocatable whole GPUs",
            [({"cluster": s.cluster, "product": p.product}, p.allocatable) for s, p in per_product],
        )
        gauge(
            "gpufed_mig_slices_free",
            "free MIG slices",
            [
                ({"cluster": s.cluster, "product": m.product, "profile": m.profile}, m.free)
                for s in summaries
                for m in s.mig
            ],
        )
        gauge(
            "gpufed_bad_nodes",
            "node objects that could not be read",
            [({"cluster": s.cluster}, s.bad_nodes) for s in summaries],
        )
        gauge(
            "gpufed_cluster_healthy",
            "1 when the cluster is healthy",
            [({"cluster": s.cluster}, 1.0 if s.health == Health.HEALTHY else 0.0) for s in summaries],
        )
        gauge(
            "gpufed_summary_age_seconds",
            "seconds since the last successful observation",
            [({"cluster": s.cluster}, max(0.0, now - s.heartbeat)) for s in summaries],
        )
        for name, value in sorted(telemetry.metrics_snapshot().items()):
            lines.append(f"# TYPE {name} counter")
            lines.append(f"{name} {value:g}")
        return "\n".join(lines) + "\n"

    @app.get("/v1/clusters")
    def clusters() -> dict[str, Any]:
        health = {s.cluster: (str(s.health), s.heartbeat) for s in service.fleet()}
        items = []
        for name, t in sorted(service.traits.items()):
            h, beat = health.get(name, ("unknown", 0.0))
            items.append(
                {
                    "name": name,
                    "tier": str(t.tier),
                    "region": t.region,
                    "labels": dict(t.labels),
                    "kueue": t.kueue_local_queue,
                    "health": h,
                    "heartbeat": beat,
                }
            )
        return {"items": items}

    return app
