"""The controller follows change, not the jobs it holds: Job statuses by event, other writers by the
change stream, and an idle pass that reads no job record from Redis (real Redis, a watching gateway
double, a hand-moved clock)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest

from adapters.redis_store import RedisStateStore
from broker.controller.service import BrokerService
from broker.controller.status_sync import STATUS_RESYNC_SECONDS
from broker.core.errors import Conflict
from broker.core.model import ClusterTraits, Health, JobRequest, JobState
from broker.core.workloads import WorkloadStatus
from tests.service_doubles import ManualClock, WatchedGateway, idle_h100_node


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="events" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def running(name: str) -> WorkloadStatus:
    return WorkloadStatus(name=name, namespace="default", exists=True, active=1, ready=1)


def leader(store: RedisStateStore, gateway: WatchedGateway, clock: ManualClock) -> BrokerService:
    store.put_summary(idle_h100_node("a", clock.t))
    service = BrokerService(store, gateway, clock, {"a": ClusterTraits("a")})
    service.watch_changes()
    return service


def record_reads(store: RedisStateStore) -> int:
    """HGET calls the Redis server has answered (a job record read is one)."""
    stats = store.client.info("commandstats")
    return int(stats.get("cmdstat_hget", {}).get("calls", 0))


def test_a_pass_reads_only_the_jobs_whose_job_changed(store: RedisStateStore) -> None:
    clock, gateway = ManualClock(), WatchedGateway()
    service = leader(store, gateway, clock)
    jobs = [service.submit(JobRequest(f"j{i}", gpus_per_pod=1))[0] for i in range(3)]
    service.schedule_once()
    service.sync_status()  # the first pass compares every job (from memory)
    gateway.read_names.clear()

    placed = service.get(jobs[1].id)
    assert placed.workload_name is not None
    gateway.change("a", placed.id, placed.workload_name, running(placed.workload_name))
    service.sync_status()

    assert gateway.read_names == [placed.workload_name]  # not the two that did not change
    assert service.get(placed.id).state is JobState.RUNNING

    gateway.read_names.clear()
    clock.t += STATUS_RESYNC_SECONDS
    store.put_summary(idle_h100_node("a", clock.t))  # its poller still reports
    service.sync_status()  # the slow resync compares them all again
    assert sorted(gateway.read_names) == sorted(str(service.get(j.id).workload_name) for j in jobs)


def test_without_a_synced_watch_every_placed_job_is_read_each_pass(store: RedisStateStore) -> None:
    clock, gateway = ManualClock(), WatchedGateway()
    service = leader(store, gateway, clock)
    for i in range(2):
        service.submit(JobRequest(f"j{i}", gpus_per_pod=1))
    service.schedule_once()
    service.sync_status()
    gateway.watching = False  # the watch broke: nothing says what changed
    gateway.read_names.clear()

    service.sync_status()

    assert len(gateway.read_names) == 2


def test_an_idle_pass_reads_no_job_record(store: RedisStateStore) -> None:
    clock, gateway = ManualClock(), WatchedGateway()
    service = leader(store, gateway, clock)
    for i in range(20):
        service.submit(JobRequest(f"j{i}", gpus_per_pod=1, clusters=("a",)))
    service.schedule_once()
    for j in service.jobs([JobState.PLACED]):
        gateway.change("a", j.id, str(j.workload_name), running(str(j.workload_name)))
    service.observe_clusters()
    service.sync_status()
    service.schedule_once()
    assert len(service.jobs([JobState.RUNNING])) == 8  # one 8-GPU node

    before = record_reads(store)
    for _ in range(5):  # nothing changes
        service.observe_clusters()
        service.sync_status()
        service.enforce_budgets()
        service.schedule_once()

    assert record_reads(store) == before


def test_a_cancel_by_another_replica_reaches_the_leaders_records(
    store: RedisStateStore, redis_url: str
) -> None:
    clock, gateway = ManualClock(), WatchedGateway()
    service = leader(store, gateway, clock)
    job, _ = service.submit(JobRequest("j", gpus_per_pod=1))
    service.schedule_once()
    placed = service.get(job.id)
    other = RedisStateStore(redis_url, prefix=store.prefix)
    try:
        api = BrokerService(other, WatchedGateway(), clock, {"a": ClusterTraits("a")})
        api.cancel(job.id)
    finally:
        other.close()

    service.sync_status()  # the pass catches up with the change stream

    assert service.records.get(job.id) is not None
    assert service.records.get(job.id).state is JobState.CANCELLED  # type: ignore[union-attr]
    assert placed.state is JobState.PLACED
    assert service.records.in_states([JobState.PLACED]) == []  # nothing left to follow or place


def test_a_write_that_conflicts_reads_that_record_again(store: RedisStateStore, redis_url: str) -> None:
    clock, gateway = ManualClock(), WatchedGateway()
    service = leader(store, gateway, clock)
    job, _ = service.submit(JobRequest("j", gpus_per_pod=1))
    service.schedule_once()
    stale = service.records.get(job.id)
    assert stale is not None and stale.state is JobState.PLACED
    other = RedisStateStore(redis_url, prefix=store.prefix)
    try:  # another writer moves it on; the leader has not caught up yet
        other.save_job(replace(stale, state=JobState.CANCELLED), expected_state=JobState.PLACED)
    finally:
        other.close()

    with pytest.raises(Conflict):
        service.writer.transition(stale, JobState.RUNNING, "pods ready", expected=JobState.PLACED)

    again = service.records.get(job.id)
    assert again is not None and again.state is JobState.CANCELLED


def test_a_change_on_a_cluster_that_does_not_answer_is_read_once_it_does(store: RedisStateStore) -> None:
    clock, gateway = ManualClock(), WatchedGateway()
    service = leader(store, gateway, clock)
    job, _ = service.submit(JobRequest("j", gpus_per_pod=1))
    service.schedule_once()
    service.sync_status()
    placed = service.get(job.id)
    name = str(placed.workload_name)
    gateway.read_names.clear()

    store.put_summary(replace(idle_h100_node("a", clock.t), health=Health.UNREACHABLE))
    gateway.change("a", job.id, name, running(name))
    service.sync_status()
    assert gateway.read_names == []  # a call to it would only time out

    store.put_summary(idle_h100_node("a", clock.t))
    service.sync_status()
    assert gateway.read_names == [name]
    assert service.get(job.id).state is JobState.RUNNING
