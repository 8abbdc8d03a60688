"""Redis that survives its primary: Sentinel (a primary, two replicas, three sentinels started here from
the distribution's redis-server) under a stream of 200 submits/s to the real API with
`redisDurability: replica`; the primary SIGKILLed mid-stream. Every acknowledged submit is still there
after the failover, no Idempotency-Key made two jobs, submits succeed again within 10 s, and the
password in the redis+sentinel URL shows up in no answer and no log line."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.kube import KubeGateway
from adapters.redis_connect import client_for
from adapters.redis_durability import DurableRedisStore
from adapters.redis_lease import RedisLease
from adapters.redis_sentinel_process import SentinelDeployment, sentinel_deployment
from adapters.system_clock import SystemClock
from benchmarks.redis_failover import PASSWORD, stream_through_failover
from broker.controller.service import BrokerService
from broker.core.errors import StoreError
from broker.core.model import ClusterTraits, JobRequest
from tests.conftest import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.flaky(reruns=0)]


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[SentinelDeployment]:
    with sentinel_deployment(tmp_path, replicas=2, password=PASSWORD) as dep:
        yield dep


@pytest.mark.race
def test_no_acknowledged_submit_is_lost_or_doubled_when_the_primary_is_killed(
    deployment: SentinelDeployment, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    old_primary = deployment.primary_port()
    result = asyncio.run(stream_through_failover(deployment, rate=200, seconds=6, kill_after=2))
    assert deployment.primary_port() != old_primary, "the sentinels never promoted a replica"
    assert result.failed_attempts > 0, "the kill went unnoticed: the stream did not span the failover"
    assert result.never_answered == 0 and result.acknowledged == result.sent == 1200
    assert result.lost == 0
    assert result.duplicated == 0 and result.conflicts == 0
    # submits succeed again once the sentinels have promoted a replica; how soon is a figure of
    # benchmarks/redis_failover.py (docs/benchmarks.md), not of this test: here only that they do
    assert result.unavailable_s < 60.0, result.line()
    assert not [b for b in result.bodies if PASSWORD in b]
    assert PASSWORD not in caplog.text


def test_the_lease_and_a_plain_client_follow_the_new_primary(deployment: SentinelDeployment) -> None:
    lease = RedisLease(deployment.url(), "gpufed-sentinel-lease", "replica-a", lease_seconds=3)
    assert lease.acquire_or_renew() is not None
    deployment.kill(deployment.primary_port())
    # The killed primary's lease key was replicated: once a replica is promoted, the holder keeps it.
    wait_for(lambda: _renews(lease), timeout=20, what="the lease renewed on the new primary")
    client = client_for(deployment.url(), socket_timeout=2)
    assert client.get("gpufed-sentinel-lease:leader") is not None
    lease.close()


def _renews(lease: RedisLease) -> bool:
    try:
        return lease.acquire_or_renew() is not None
    except Exception:
        return False


def test_with_no_replica_to_confirm_a_submit_is_refused_and_its_retry_is_the_same_job(redis_url: str) -> None:
    """The session's Redis has no replica: under redisDurability replica nothing is acknowledged (503 with
    the reason), yet what was written stays one job per Idempotency-Key."""
    store = DurableRedisStore(redis_url, timeout_ms=50, prefix="gpufed-durability")
    service = BrokerService(store, KubeGateway({}), SystemClock(), {"c1": ClusterTraits(name="c1")})
    try:
        prepared = [service.prepare_submit(JobRequest(name=f"d{i}"), f"key-{i}") for i in range(3)]
        for _ in range(2):  # the first try and its retry with the same keys
            outcomes = store.create_jobs(prepared)
            assert all(isinstance(o, StoreError) and "0 of 1 replica" in str(o) for o in outcomes)
        assert len(store.list_jobs()) == 3
        assert store.ack.waits == 2  # one WAIT per batch, not per submit
        with pytest.raises(StoreError, match="Idempotency-Key"):
            store.create_job(*service.prepare_submit(JobRequest(name="single"), "key-single"))
    finally:
        keys = list(store.client.scan_iter(match="gpufed-durability:*"))
        if keys:
            store.client.delete(*keys)
        store.close()
