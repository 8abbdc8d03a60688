"""Burst-back in the control loop's passes, on real Redis with a manual clock (docs/burst.md).

The service runs over the Redis store and burst ledger; the member clusters are the recording gateway
(tests/service_doubles.py). The move itself (migrate_job: the checkpoint stop path, issue 25 part A) is
not this module's subject: a subclass records the calls, and says which jobs checkpoint.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.redis_burst import RedisBurstLedger
from adapters.redis_store import RedisStateStore
from broker.burst.burst_back import BurstBackPolicy, BurstBackSettings
from broker.burst.gate import BurstGate
from broker.burst.settings import BurstSettings
from broker.controller.control_loop import ControlLoop
from broker.controller.service import BrokerService
from broker.core.model import (
    ClusterSummary,
    ClusterTraits,
    Health,
    JobRecord,
    JobRequest,
    JobState,
    ProductCapacity,
    Tier,
)
from broker.core.workloads import WorkloadStatus
from tests.service_doubles import ManualClock, RecordingGateway

pytestmark = pytest.mark.integration

H100 = "H100-80GB"
PRICE = 4.25
TRAITS = {
    "op": ClusterTraits("op"),
    "op2": ClusterTraits("op2"),
    "cloud": ClusterTraits("cloud", tier=Tier.CLOUD, price_per_gpu_hour={H100: PRICE}),
}


def h100(name: str, free: int, at: float, tier: Tier = Tier.ONPREM) -> ClusterSummary:
    by_free = (0,) * free + (1,)
    return ClusterSummary(
        cluster=name,
        tier=tier,
        health=Health.HEALTHY,
        heartbeat=at,
        products=(ProductCapacity(H100, 81559, 8, 8, 8 - free, free, by_free, by_free, 1),),
        price_per_gpu_hour={H100: PRICE} if tier is Tier.CLOUD else {},
    )


class CountingLedger(RedisBurstLedger):
    """The real Redis ledger, counting the run-time reads (what an idle pass must not do)."""

    run_time_reads = 0

    def run_times(self) -> dict[str, list[float]]:
        self.run_time_reads += 1
        return super().run_times()


class Moving(BrokerService):
    """Records migrate_job's calls (part A's, replaced at merge); jobs named ckpt-* checkpoint (60 s)."""

    migrations: list[tuple[str, str | None, str, str]]

    failing: set[str]  # job ids whose move fails (a fault in the member cluster, say)

    def migrate_job(self, job_id: str, *, to_cluster: str | None, reason: str, by: str) -> JobRecord:
        if job_id in self.failing:
            raise RuntimeError("member API exploded")
        self.migrations.append((job_id, to_cluster, reason, by))
        return self.get(job_id)

    def checkpoint_of(self, record: JobRecord) -> tuple[float | None, float | None]:
        return (60.0, None) if record.request.name.startswith("ckpt-") else (None, None)


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="bback" + uuid.uuid4().hex[:8])
    yield s
    s.close()


class World:
    def __init__(self, store: RedisStateStore, settings: BurstBackSettings) -> None:
        self.store, self.clock, self.gw = store, ManualClock(), RecordingGateway()
        self.ledger = CountingLedger(store.client, store.prefix)
        gate = BurstGate(self.ledger, BurstSettings(burst_back=settings))
        self.svc = Moving(store, self.gw, self.clock, TRAITS, burst=gate)
        self.svc.migrations, self.svc.failing = [], set()
        self.loop = ControlLoop(self.svc)
        self.op_free = 0
        self.summaries()

    def summaries(self) -> None:
        """What the pollers write every heartbeat (a new version each time: the cache's generation moves)."""
        self.store.put_summary(h100("op", self.op_free, self.clock.t))
        self.store.put_summary(h100("op2", self.op_free, self.clock.t))
        self.store.put_summary(h100("cloud", 8, self.clock.t, Tier.CLOUD))

    def tick(self, seconds: float) -> None:
        """Time passes; the pollers write their heartbeats; one control-loop pass."""
        self.clock.t += seconds
        self.summaries()
        self.loop.run_once()

    def run_on_cloud(self, name: str, **kw: Any) -> str:
        """A job that bursts (op is full) and runs there; its id."""
        record, _ = self.svc.submit(
            JobRequest(name=name, tenant="ml", gpus_per_pod=8, allow_burst=True, **kw)
        )
        self.tick(1)
        placed = self.svc.get(record.id)
        assert (placed.state, placed.cluster) == (JobState.PLACED, "cloud")
        assert placed.workload_name is not None
        self.gw.status[placed.workload_name] = WorkloadStatus(
            name=placed.workload_name, namespace="default", exists=True, active=1, ready=1
        )
        self.tick(1)
        self.tick(1)
        assert self.svc.get(record.id).state is JobState.RUNNING
        return record.id


SETTINGS = BurstBackSettings(interval_seconds=30, free_for_seconds=300, cooldown_seconds=1800)


def test_a_checkpointing_cloud_job_moves_back_once_on_prem_stayed_free(store: RedisStateStore) -> None:
    w = World(store, SETTINGS)
    job = w.run_on_cloud("ckpt-train", duration_seconds=4 * 3600)
    w.op_free = 8  # op frees up
    w.tick(1)
    freed_at = w.clock.t
    evaluations, reads = w.svc.burst_back_state.evaluations, w.ledger.run_time_reads
    passes = 0
    while not w.svc.migrations and passes < 40:  # a pass every 10 s, heartbeats each time
        w.tick(10)
        passes += 1
    assert w.svc.migrations == [(job, "op", "burst-back", "broker")]
    assert w.clock.t - freed_at >= 300  # not before op had been free for 5 min
    # cost follows change: of those ~30 passes, only the change, the deadline of the 5 min and the
    # interval after it were evaluated, and the run times were read once, for the move
    assert w.svc.burst_back_state.evaluations - evaluations <= 3, (passes, w.svc.burst_back_state)
    assert w.ledger.run_time_reads - reads == 1
    reason = w.svc.events(job)[-1].reason
    assert reason.startswith("burst-back: est. $")
    assert "on-prem op (H100-80GB) free 5 min" in reason
    # the saving is shown with the tenant's spend: 8 GPUs x $4.25 x (time left - the 60 s grace)
    assert w.svc.burst is not None
    spend = w.svc.burst.spend_now(w.clock.t, [], TRAITS)["ml"]
    left = 4 * 3600 - (w.clock.t - w.svc.get(job).updated_at)
    assert spend.avoided == pytest.approx(8 * PRICE * (left - 60) / 3600, rel=1e-3)
    assert spend.moved_back == 1
    # the double did not move it: it is still on the cloud, and is not bounced within the cooldown
    for _ in range(5):
        w.tick(60)
    assert len(w.svc.migrations) == 1


def test_no_move_for_a_tenant_that_says_never_a_job_that_does_not_checkpoint_or_a_queued_job(
    store: RedisStateStore,
) -> None:
    w = World(store, BurstBackSettings(free_for_seconds=300, tenants={"ml": BurstBackPolicy.NEVER}))
    w.run_on_cloud("ckpt-never", duration_seconds=4 * 3600)
    w.op_free = 8
    for _ in range(12):
        w.tick(30)
    assert w.svc.migrations == []

    w = World(store, SETTINGS)
    w.run_on_cloud("plain", duration_seconds=4 * 3600)  # no checkpoint: would restart from scratch
    w.op_free = 8
    for _ in range(12):
        w.tick(30)
    assert w.svc.migrations == []


def test_the_queue_comes_first(store: RedisStateStore) -> None:
    w = World(store, SETTINGS)
    w.run_on_cloud("ckpt-train", duration_seconds=4 * 3600)
    # jobs that may only run on-prem wait for op and op2; their free GPUs are theirs, not burst-back's
    waiting, _ = w.svc.submit(JobRequest(name="onprem-only", tenant="ml", gpus_per_pod=8, clusters=("op",)))
    w.svc.submit(JobRequest(name="onprem-only-2", tenant="ml", gpus_per_pod=8, clusters=("op2",)))
    w.svc.migrations.clear()
    w.op_free = 8
    for _ in range(12):
        w.clock.t += 30
        w.summaries()
        w.svc.observe_clusters()
        w.svc.burst_back()  # without the scheduling pass: the queued job still waits
    assert w.svc.get(waiting.id).state is JobState.QUEUED
    assert w.svc.migrations == []


def test_a_move_that_fails_is_logged_and_the_others_go_on(
    store: RedisStateStore, caplog: pytest.LogCaptureFixture
) -> None:
    w = World(store, SETTINGS)
    first = w.run_on_cloud("ckpt-a", duration_seconds=6 * 3600)  # the larger saving: tried first
    second = w.run_on_cloud("ckpt-b", duration_seconds=3 * 3600)
    w.svc.failing.add(first)
    w.op_free = 8  # op and op2 free up: one node each
    for _ in range(40):
        w.tick(10)
        if w.svc.migrations:
            break
    assert [m[0] for m in w.svc.migrations] == [second]
    assert any(f"burst-back of {first}" in r.getMessage() and r.exc_info for r in caplog.records)
