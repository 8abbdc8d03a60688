"""A job lost with the state store is explained to its owner, not denied (issue 21, case 6).

A job that was only QUEUED when Redis lost its data has no Job in any member cluster, so the rebuild
(broker.ha.recovery) cannot bring it back; it writes it back as a LOST record instead (from the leader's
records in memory: the tenant, the request), which shows in its owner's job list as LOST. Asked for by
id, such a job answers 410 Gone with the rebuild's report (when, why, what to do) to its owner and to
admins, until its owner has seen it: the owner's first 410 appends a "seen by its owner" event, and the
job then answers 200 like any ended job (state LOST, the reason saying why). Any other caller (a user
of another tenant, a viewer) gets 404, as for a job that does not exist.

    Gone                          the exception whose handler answers 410 (install)
    answer(service, who, record)  raises Gone, NotFound, or returns when the record is to be shown
    answer_removed(service, who, id)  a finished job the retention removed (finishedJobRetentionSeconds,
                                  adapters.redis_retention): 410 with when, to those who may read its
                                  tenant; returns otherwise (the caller answers 404)
    gone(report_json, record)     the 410 body
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from broker.controller.service import BrokerService
from broker.core.errors import NotFound, StoreError
from broker.core.model import JobEvent, JobRecord, JobState
from broker.tenancy.auth import Principal, Role

SEEN = "seen by its owner"

# The 410's documented shape (the route's `responses`, so /openapi.json says it).
RESPONSES: dict[int | str, dict[str, Any]] = {
    410: {
        "description": "the job was lost with the state store (QUEUED when Redis lost its data), "
        "answered to its owner and admins until its owner has seen it; or it had finished and was removed "
        "after finishedJobRetentionSeconds"
    }
}


class Gone(Exception):
    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body.get("message", "gone"))
        self.body = body


def install(app: FastAPI) -> None:
    @app.exception_handler(Gone)
    async def _gone(_: Request, exc: Gone) -> JSONResponse:
        return JSONResponse(status_code=410, content=exc.body)


def _report(report_json: str | None) -> dict[str, Any]:
    try:
        report = json.loads(report_json or "")
    except ValueError:
        return {}
    return report if isinstance(report, dict) else {}


def gone(report_json: str | None, record: JobRecord) -> dict[str, Any]:
    report = _report(report_json)
    at = float(report.get("at") or record.updated_at)
    when = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "error": "gone",
        "message": (
            f"job {record.id} was lost: it was QUEUED (not yet in any member cluster) when the state store "
            f"lost its data, and the rebuild at {when} could not recover it from the clusters; submit it again"
        ),
        "lost": {"at": at, "when": when, "reason": "state store lost while QUEUED", "report": report},
    }


def answer_removed(service: BrokerService, who: Principal, job_id: str) -> None:
    """A job that is not found: 410 (Gone) with when it was removed, if the retention removed it
    (finishedJobRetentionSeconds, adapters.redis_retention) and the caller may read its tenant; else
    returns (the caller answers 404)."""
    try:
        removed = service.store.removed_job(job_id)
    except StoreError:
        return
    if removed is None or not who.may_read(removed[0]):
        return
    at = removed[1]
    when = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    raise Gone(
        {
            "error": "gone",
            "message": f"job {job_id} had finished and was removed at {when} (finishedJobRetentionSeconds)",
            "removed": {"at": at, "when": when},
        }
    )


def answer(service: BrokerService, who: Principal, record: JobRecord) -> None:
    """For a LOST record: 410 (Gone) to its owner and admins until the owner has seen it, 404 to others;
    returns (show it as any ended job) once the owner has seen it."""
    if record.state is not JobState.LOST:
        return
    owner = who.tenant == record.request.tenant and who.role is not Role.VIEWER
    if not owner and who.role is not Role.ADMIN:
        raise NotFound(f"job {record.id} not found")
    events = service.events(record.id)
    if any(e.reason.startswith(SEEN) for e in events):
        return
    try:
        report = service.store.recovery_report()
    except StoreError:
        report = None
    body = gone(report, record)
    if owner:
        now = service.clock.now()
        service.store.append_event(
            JobEvent(record.id, now, JobState.LOST, record.attempt, f"{SEEN} ({who.name})", None)
        )
    raise Gone(body)
