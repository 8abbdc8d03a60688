"""A job lost with the state store is explained, not denied (issue 21, case 6).

A job that was only QUEUED when Redis lost its data has no Job in any member cluster, so the rebuild
(broker.ha.recovery) cannot bring it back; its report names it. Asked for by id, such a job answers
410 Gone with the rebuild's report (when, why, what to do) instead of 404 "no job with id".

    gone(report_json, job_id)   the 410 body for a lost job id, or None when the id is not one
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any


def gone(report_json: str | None, job_id: str | None) -> dict[str, Any] | None:
    if not report_json or not job_id:
        return None
    try:
        report = json.loads(report_json)
    except ValueError:
        return None
    if not isinstance(report, dict) or job_id not in (report.get("lost_queued_ids") or []):
        return None
    at = float(report.get("at") or 0.0)
    when = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "error": "gone",
        "message": (
            f"job {job_id} was lost: it was QUEUED (not yet in any member cluster) when the state store "
            f"lost its data, and the rebuild at {when} could not recover it from the clusters; submit it again"
        ),
        "lost": {"at": at, "when": when, "reason": "state store lost while QUEUED", "report": report},
    }
