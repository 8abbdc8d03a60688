"""Job notifications (docs/batch.md "Notifications"): which webhooks hear of a transition, what they are
sent, and how it is signed.

    TenantNotify      a tenant's default target and its signing secret (settings.tenants.<t>.notify)
    deliveries        the (url, delivery id) pairs a job event is to be delivered to: the job's own
                      `notify` and its tenant's, each when the event's state is in its `on`; never for
                      the events that record a delivery (DELIVERY_PREFIX) nor twice for one state of one
                      attempt (the delivery id names job, attempt, state and target)
    payload           the JSON body: {id, name, tenant, group, state, reason, attempt, cluster, at}
    signature         the X-Gpufed-Signature header: "t=<unix seconds>,v1=<hex HMAC-SHA256 of
                      '<t>.<body>' under the tenant's secret>" (a receiver recomputes it and compares in
                      constant time, and refuses a t too old: replays)
Pure: no I/O, no clock (times are arguments).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from broker.core.batch_fields import Notify
from broker.core.model import JobEvent, JobRecord

__all__ = [
    "DELIVERY_PREFIX",
    "SIGNATURE_HEADER",
    "TenantNotify",
    "deliveries",
    "payload",
    "signature",
    "verify",
]

SIGNATURE_HEADER = "X-Gpufed-Signature"
DELIVERY_PREFIX = "webhook "  # the reason of the events that record a delivery (never delivered themselves)


@dataclass(frozen=True)
class TenantNotify:
    notify: Notify | None = None  # every job of the tenant, unless the job names its own target
    secret: str = ""  # signs every delivery of the tenant's jobs ("" : unsigned)


def deliveries(record: JobRecord, event: JobEvent, tenant: TenantNotify | None) -> list[tuple[str, str]]:
    """(url, delivery id) for each target that wants this event."""
    if event.reason.startswith(DELIVERY_PREFIX):
        return []
    targets = [n for n in (record.request.batch.notify, tenant.notify if tenant else None) if n is not None]
    out: list[tuple[str, str]] = []
    state = str(event.state)
    for n in targets:
        if state in n.on and n.webhook not in (u for u, _ in out):
            url_id = hashlib.sha256(n.webhook.encode()).hexdigest()[:12]
            out.append((n.webhook, f"{record.id}:{event.attempt}:{state}:{url_id}"))
    return out


def payload(record: JobRecord, event: JobEvent) -> dict[str, Any]:
    req = record.request
    return {
        "id": record.id,
        "name": req.name,
        "tenant": req.tenant,
        "group": req.batch.group or None,
        "state": str(event.state),
        "reason": event.reason,
        "attempt": event.attempt,
        "cluster": event.cluster,
        "at": event.at,
    }


def body_bytes(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: str, header: str, body: bytes, now: float, tolerance: float = 300.0) -> bool:
    """What a receiver does: the header's MAC over its timestamp and the body, and a fresh timestamp."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance:
        return False
    return hmac.compare_digest(signature(secret, timestamp, body), header)
