"""The audit trail's record, what a reader asks of it, and the records a job's events imply. Pure.

One `AuditRecord` per write and per refused call (docs/tenancy.md, "Audit trail"):

    time           when it happened (seconds since the epoch)
    subject        who: the token's name, the OIDC subject, "system:anonymous" (no usable credential),
                   "system:gpufed" (the broker's own acts) or "system:config-reload"
    tenant, role   the tenant the act concerns (a job's) and the caller's role ("system" for the broker)
    verb, object   submit job/j-1, cancel job/j-1, read /v1/jobs, reload clusters.yaml, preempt job/j-2,
                   failover job/j-3, budget-stop job/j-4, ...
    outcome        success | denied (403) | unauthenticated (401) | failure (anything else refused)
    code, reason   the HTTP status (0 for the broker's own acts) and why, in words
    sourceAddress  the caller's address; traceId the job's or the request's trace (32 hex)

Never a token or a secret: records are made from names and messages, and `redact` removes anything that
looks like a bearer token or a JWT from every text field before a record is made.

Also here: `AuditQuery` (filters: subject, verb, tenant, outcome, since, until), continue tokens for
paging (`encode_continue`/`decode_continue`, bound to the filters they were made for), `from_job_event`
(a job event that records a preemption, a failover or a budget stop, as the broker's own act) and the
ports the records go through (`AuditSink`, `AuditLog`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from broker.core.model import JobEvent, JobState

__all__ = [
    "OUTCOMES",
    "SYSTEM",
    "AuditLog",
    "AuditQuery",
    "AuditRecord",
    "AuditSink",
    "decode_continue",
    "encode_continue",
    "from_job_event",
    "outcome_of",
    "redact",
]

OUTCOMES = ("success", "denied", "unauthenticated", "failure")
SYSTEM = "system:gpufed"
ANONYMOUS = "system:anonymous"

_JWT = re.compile(r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_BEARER = re.compile(r"(?i)(bearer\s+|token\s*[:=]\s*)[^\s,;\"']+")
_MAX_TEXT = 1000


def redact(text: str) -> str:
    """The text without anything that looks like a credential (a JWT, "Bearer <x>", "token: <x>")."""
    text = _JWT.sub("[redacted]", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)}[redacted]", text)
    return text[:_MAX_TEXT]


def outcome_of(code: int) -> str:
    if code < 400:
        return "success"
    return {401: "unauthenticated", 403: "denied"}.get(code, "failure")


@dataclass(frozen=True)
class AuditRecord:
    at: float
    subject: str
    tenant: str
    role: str
    verb: str
    object: str
    outcome: str
    code: int = 0
    reason: str = ""
    source_address: str = ""
    trace_id: str = ""

    def __post_init__(self) -> None:
        for name in ("subject", "tenant", "verb", "object", "reason"):
            object.__setattr__(self, name, redact(getattr(self, name)))

    def to_dict(self) -> dict[str, Any]:
        """The record as stored, logged and served (camelCase)."""
        return {
            "time": self.at,
            "subject": self.subject,
            "tenant": self.tenant,
            "role": self.role,
            "verb": self.verb,
            "object": self.object,
            "outcome": self.outcome,
            "code": self.code,
            "reason": self.reason,
            "sourceAddress": self.source_address,
            "traceId": self.trace_id,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AuditRecord:
        return cls(
            at=float(d["time"]),
            subject=str(d.get("subject", "")),
            tenant=str(d.get("tenant", "")),
            role=str(d.get("role", "")),
            verb=str(d.get("verb", "")),
            object=str(d.get("object", "")),
            outcome=str(d.get("outcome", "")),
            code=int(d.get("code", 0)),
            reason=str(d.get("reason", "")),
            source_address=str(d.get("sourceAddress", "")),
            trace_id=str(d.get("traceId", "")),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=False)


@dataclass(frozen=True)
class AuditQuery:
    """What a reader asks for: every filter given must match (exactly; since <= time < until)."""

    subject: str | None = None
    verb: str | None = None
    tenant: str | None = None
    outcome: str | None = None
    since: float | None = None
    until: float | None = None

    def matches(self, r: AuditRecord) -> bool:
        return (
            (self.subject is None or r.subject == self.subject)
            and (self.verb is None or r.verb == self.verb)
            and (self.tenant is None or r.tenant == self.tenant)
            and (self.outcome is None or r.outcome == self.outcome)
            and (self.since is None or r.at >= self.since)
            and (self.until is None or r.at < self.until)
        )

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


_STREAM_ID = re.compile(r"^\d{1,20}-\d{1,20}$")


def encode_continue(after: str, query: AuditQuery) -> str:
    """An opaque token for the next page: the position (a stream id) and the filters it belongs to."""
    raw = json.dumps({"after": after, "q": query.fingerprint()}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_continue(token: str, query: AuditQuery) -> str:
    """The position a continue token resumes after; ValueError (the reason) if it is not one of ours or
    was made for other filters."""
    try:
        doc = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, binascii.Error):
        raise ValueError("not a continue token from this endpoint") from None
    if not isinstance(doc, dict) or not _STREAM_ID.match(str(doc.get("after", ""))):
        raise ValueError("not a continue token from this endpoint")
    if doc.get("q") != query.fingerprint():
        raise ValueError("the token was made for other filters: repeat the first request's filters")
    return str(doc["after"])


def from_job_event(event: JobEvent, tenant_of: Callable[[str], str]) -> AuditRecord | None:
    """The broker's own act that a job event records, or None: a job preempted for another, failed over
    from a lost cluster, or stopped because its tenant's hard budget is spent. `tenant_of(job id)` is
    asked only for those (a lookup per event would cost a read per submit and per transition)."""
    if event.state not in (JobState.QUEUED, JobState.FAILED):
        return None
    reason = event.reason
    if reason.startswith("preempted by "):
        verb = "preempt"
    elif reason.startswith("hard budget: "):
        verb = "budget-stop"
    elif reason.startswith("cluster ") and " lost: " in reason:
        verb = "failover"
    else:
        return None
    return AuditRecord(
        at=event.at,
        subject=SYSTEM,
        tenant=tenant_of(event.job_id),
        role="system",
        verb=verb,
        object=f"job/{event.job_id}",
        outcome="success",
        reason=reason,
        trace_id=event.trace_id or "",
    )


class AuditSink(Protocol):
    def append(self, records: Sequence[AuditRecord]) -> None: ...


class AuditLog(AuditSink, Protocol):
    """Where records are kept and read back, newest first, in pages."""

    def page(
        self, query: AuditQuery, limit: int, after: str | None
    ) -> tuple[list[tuple[str, AuditRecord]], str | None]:
        """Up to `limit` matching records older than position `after` (None: the newest), each with its
        position, and the position to continue after (None: nothing older)."""
        ...
