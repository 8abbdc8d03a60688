"""Audit records survive a Redis Sentinel failover (issue 48 finding 6): a primary, two replicas and
three sentinels (the distribution's redis-server), the audit trail's Redis stream (adapters.audit_store)
written through the AuditWriter (broker.api.audit_writer) as the API writes it, 20 records a second; the
primary SIGKILLed mid-stream. Every record is in the stream on the new primary afterwards (the writer
used to give up after three rounds, under a second, while a failover takes 2-3 s: 15-19 records lost).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.audit_store import RedisAuditLog
from adapters.redis_connect import client_for
from adapters.redis_sentinel_process import SentinelDeployment, sentinel_deployment
from broker.api.audit_writer import AuditWriter
from broker.tenancy.audit import AuditRecord
from tests.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.race]


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[SentinelDeployment]:
    with sentinel_deployment(tmp_path, replicas=2) as dep:
        yield dep


def _record(i: int) -> AuditRecord:
    return AuditRecord(
        at=time.time(),
        subject="ana",
        tenant="ml",
        role="user",
        verb="submit",
        object=f"job/j-{i}",
        outcome="success",
    )


def test_no_audit_record_is_dropped_when_the_primary_is_killed(deployment: SentinelDeployment) -> None:
    client = client_for(deployment.url(), socket_timeout=2, socket_connect_timeout=1)
    trail = RedisAuditLog(client, "auditfo")
    writer = AuditWriter([trail])
    old_primary = deployment.primary_port()
    sent = 0
    try:
        start = time.monotonic()
        killed = False
        while time.monotonic() - start < 8.0:
            if not killed and time.monotonic() - start > 2.0:
                deployment.kill(old_primary)
                killed = True
            writer.record(_record(sent))
            sent += 1
            time.sleep(0.05)  # the pace of the stream, not a wait for anything
        wait_for(lambda: deployment.primary_port() != old_primary, timeout=30, what="a replica promoted")
        assert writer.flush(timeout=60), "the held records were never written"
        entries: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(trail.key)  # type: ignore[assignment]
        stored = {json.loads(fields[b"r"])["object"] for _, fields in entries}
        missing = {f"job/j-{i}" for i in range(sent)} - stored
        assert not missing, f"{len(missing)} of {sent} records dropped"
    finally:
        writer.close()
        client.close()
