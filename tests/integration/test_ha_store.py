"""Leader lease, fencing tokens and Redis loss, on real Redis servers and a kubesim cluster (in process).

- A paused ex-leader's late writes (save_job, reserve, fence) are refused once another replica holds the
  lease: its fencing token is no longer the current one; nothing it sends is written.
- The elector hands the lease over when the leader releases it (shutdown) and when it stops renewing.
- Redis restarted empty: submits are refused (503) until the records are rebuilt from the Jobs in the
  member cluster; then a retried Idempotency-Key returns the original job (never a second run), the
  rebuilt records follow their Jobs, and the jobs that were only QUEUED are reported lost.
- Redis with AOF (the recommended setting) restarted: nothing is lost, no rebuild is needed.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters import redis_process
from adapters.kube import KubeGateway
from adapters.kube_rest import KubeRest
from adapters.redis_lease import RedisLease
from adapters.redis_process import RedisProcess
from adapters.redis_store import RedisStateStore
from adapters.system_clock import SystemClock
from broker.controller.service import BrokerService, ServiceSettings
from broker.core.errors import ClusterUnreachable, Fenced, NotFound, Recovering
from broker.core.k8s_names import CLOSED_ANNOTATION
from broker.core.model import ClusterTraits, JobRecord, JobRequest, JobState, Reservation
from broker.core.workloads import WorkloadRef
from broker.ha.leadership import Leadership
from broker.ha.recovery import StoreRecovery
from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for
from tests.service_doubles import ManualClock, RecordingGateway, idle_h100_node

pytestmark = pytest.mark.integration


@pytest.mark.race
def test_a_paused_ex_leaders_late_writes_are_refused_by_its_fencing_token(redis_url: str) -> None:
    prefix = "fence" + uuid.uuid4().hex[:8]
    old = RedisLease(redis_url, prefix, "replica-a", lease_seconds=0.5)
    new = RedisLease(redis_url, prefix, "replica-b", lease_seconds=5)
    old_token = old.acquire_or_renew()
    assert old_token is not None
    assert new.acquire_or_renew() is None  # held by replica-a
    api = RedisStateStore(redis_url, prefix)
    paused = RedisStateStore(redis_url, prefix, fencing_token=lambda: old_token)
    now = SystemClock().now()
    api.put_summary(idle_h100_node("c1", now))
    record = api.create_job(JobRecord(id="j1", request=JobRequest("x", gpus_per_pod=1), created_at=now))
    # while it holds the lease its writes go through
    paused.save_job(record, JobState.QUEUED)
    # replica-a is paused (GC, SIGSTOP) past its lease; replica-b takes over with a newer token
    new_token = wait_for(new.acquire_or_renew, timeout=10, what="replica-b to take the expired lease")
    assert isinstance(new_token, int) and new_token > old_token
    placed = JobRecord(id="j1", request=record.request, state=JobState.PLACED, attempt=1, cluster="c1")
    with pytest.raises(Fenced):
        paused.save_job(placed, JobState.QUEUED)
    resv = Reservation("j1", 1, "c1", "H100-80GB", "nvidia.com/gpu", 1, now, now + 60, owner="a")
    with pytest.raises(Fenced):
        paused.reserve(resv, now, 1, 0)
    with pytest.raises(Fenced):
        paused.fence("c1", "lost")
    stored = api.get_job("j1")
    assert stored is not None and stored.state is JobState.QUEUED
    assert api.live_reservations(now) == [] and api.fenced() == {}
    # its scheduling pass stops at the first refused write (the control loop ends the pass with one
    # warning), instead of trying, failing and logging a traceback for every queued job
    gateway = RecordingGateway()
    stale = BrokerService(paused, gateway, SystemClock(), {"c1": ClusterTraits("c1")})
    with pytest.raises(Fenced):
        stale.schedule_once()
    assert gateway.created == []
    # the new leader's writes go through
    current = RedisStateStore(redis_url, prefix, fencing_token=lambda: new_token)
    current.save_job(placed, JobState.QUEUED)
    assert old.acquire_or_renew() is None  # the ex-leader learns it lost the lease
    for c in (old, new):
        c.close()
    for s in (api, paused, current):
        s.close()


@pytest.mark.race
def test_the_lease_changes_hands_on_release_and_when_the_leader_stops_renewing(redis_url: str) -> None:
    prefix = "elect" + uuid.uuid4().hex[:8]
    roles: dict[str, list[str]] = {"a": [], "b": []}
    electors = {
        name: Leadership(
            RedisLease(redis_url, prefix, f"replica-{name}", lease_seconds=1.0),
            on_elected=functools.partial(roles[name].append, "elected"),
            on_deposed=functools.partial(roles[name].append, "deposed"),
        )
        for name in ("a", "b")
    }
    for e in electors.values():
        e.start()
    wait_for(lambda: any(e.leader for e in electors.values()), timeout=10, what="a leader")
    first = next(n for n, e in electors.items() if e.leader)
    second = "b" if first == "a" else "a"
    assert not electors[second].leader
    first_token = electors[first].token
    electors[first].stop(release=True)  # shutdown: hands the lease over at once
    wait_for(lambda: electors[second].leader, timeout=10, what="the follower to take over")
    assert (electors[second].token or 0) > (first_token or 0)
    assert roles[first] == ["elected", "deposed"]
    # the leader stops renewing (stopped without release: as if paused); the other takes the lease
    # when it expires, and the paused one steps down at its next renew
    electors[second].stop(release=False)
    revived = electors[first]
    revived.start()
    wait_for(lambda: revived.leader, timeout=10, what="the lease to expire and be taken")
    paused = electors[second]
    paused.token = 7  # it believes it still leads
    paused.tick()
    assert not paused.leader and roles[second][-1] == "deposed"
    revived.stop()


@pytest.fixture
def restartable_redis(tmp_path: Path) -> Iterator[list[RedisProcess]]:
    """A private redis-server without persistence that the test may stop and start again (same port)."""
    server = redis_process.spawn(tmp_path, redis_process.free_port())
    holder = [server]
    try:
        yield holder
    finally:
        redis_process.stop(holder[0].process)


def _restart(holder: list[RedisProcess], directory: Path, appendonly: bool = False) -> None:
    redis_process.stop(holder[0].process)
    holder[0] = redis_process.spawn(directory, holder[0].port, appendonly)


@pytest.mark.race
def test_redis_restarted_empty_rebuilds_the_records_from_the_cluster_and_keeps_idempotency_keys(
    tmp_path: Path, restartable_redis: list[RedisProcess]
) -> None:
    fleet = synthetic_fleet(1, 1, gpus_per_node=8)
    prefix = "rebuild" + uuid.uuid4().hex[:8]
    url = restartable_redis[0].url
    with Simulation(fleet, tmp_path / "kube", speed=1.0) as sim:
        name = fleet.clusters[0].name
        store = RedisStateStore(url, prefix, require_marker=True)
        gateway = KubeGateway({name: KubeRest.from_kubeconfig(name, sim.kubeconfig_path(name))})
        clock = SystemClock()
        traits = {name: ClusterTraits(name=name)}
        service = BrokerService(store, gateway, clock, traits, settings=ServiceSettings(federation=prefix))
        recovery = StoreRecovery(store, gateway, clock, traits, prefix)
        try:
            store.put_summary(idle_h100_node(name, clock.now()))
            with pytest.raises(Recovering):  # nothing may be accepted before the store is initialised
                service.submit(JobRequest("early", gpus_per_pod=1))
            first = recovery.check()
            assert first is not None and first.recovered == 0
            ids = {}
            for i in range(4):
                job, _ = service.submit(
                    JobRequest(f"run-{i}", gpus_per_pod=1, duration_seconds=3600), idempotency_key=f"k{i}"
                )
                ids[f"k{i}"] = job.id
            queued, _ = service.submit(JobRequest("never-fits", gpus_per_pod=64), idempotency_key="kq")
            done, _ = service.submit(
                JobRequest("short", gpus_per_pod=1, duration_seconds=1), idempotency_key="kd"
            )

            def all_running() -> bool:
                service.schedule_once()
                service.sync_status()
                return all(service.get(i).state is JobState.RUNNING for i in ids.values())

            wait_for(all_running, timeout=60, interval=0.2, what="4 jobs RUNNING")
            wait_for(
                lambda: all_running() and service.get(done.id).state is JobState.SUCCEEDED,
                timeout=60,
                interval=0.2,
                what="the short job SUCCEEDED",
            )
            (closed,) = [r for r in gateway.list_workloads(name, "default") if r.job_id == done.id]
            assert closed.annotations[CLOSED_ANNOTATION].startswith("SUCCEEDED at ")  # its end recorded
            assert recovery.check() is None  # the store is intact: nothing to do

            _restart(restartable_redis, tmp_path)  # no persistence: Redis comes back empty
            with pytest.raises(Recovering):  # a retried key now could run a job twice: refused
                service.submit(JobRequest("run-0", gpus_per_pod=1), idempotency_key="k0")
            store.put_summary(idle_h100_node(name, clock.now()))  # the pollers write it again
            report = recovery.check()
            assert report is not None
            assert report.recovered == 4 and set(report.recovered_ids) == set(ids.values())
            assert report.lost_queued == 1 and report.lost_queued_ids == [queued.id]
            assert report.clusters_listed == [name] and report.clusters_pending == []
            assert store.recovery_report() is not None

            for key, job_id in ids.items():
                again, created = service.submit(JobRequest("retry", gpus_per_pod=1), idempotency_key=key)
                assert (again.id, created) == (job_id, False)
                assert again.request.name == f"run-{key[1:]}"  # the submitted request, from the Job
            for job_id in ids.values():
                rebuilt = service.get(job_id)
                assert rebuilt.state is JobState.PLACED and rebuilt.cluster == name and rebuilt.attempt == 1
            wait_for(all_running, timeout=60, interval=0.2, what="the rebuilt records to follow their Jobs")
            with pytest.raises(NotFound):  # closed before the loss: its Job waits for its TTL, not reloaded
                service.get(done.id)
            refs = [r for r in gateway.list_workloads(name, "default") if r.job_id != done.id]
            assert sorted(r.job_id for r in refs) == sorted(ids.values())  # none ran twice
            assert all(r.attempt == 1 for r in refs)
        finally:
            gateway.close()
            store.close()


@pytest.mark.race
def test_redis_with_aof_restarted_loses_nothing(tmp_path: Path) -> None:
    port = redis_process.free_port()
    server = redis_process.spawn(tmp_path, port, appendonly=True)
    try:
        store = RedisStateStore(server.url, "aof", require_marker=True)
        store.set_run_marker("r1")
        ids = []
        for i in range(60):
            record = JobRecord(id=f"j{i}", request=JobRequest(f"n{i}"), idempotency_key=f"key-{i}")
            ids.append(store.create_job(record).id)
        store.close()
        redis_process.stop(server.process)  # a restart (a rolling upgrade of Redis, a node drain)
        server = redis_process.spawn(tmp_path, port, appendonly=True)
        store = RedisStateStore(server.url, "aof", require_marker=True)
        assert store.run_marker() == "r1"  # no rebuild needed
        assert sorted(r.id for r in store.list_jobs([JobState.QUEUED])) == sorted(ids)
        again = store.create_job(JobRecord(id="new", request=JobRequest("n0"), idempotency_key="key-0"))
        assert again.id == "j0"
        store.close()
    finally:
        redis_process.stop(server.process)


def test_elector_threads_do_not_leak(redis_url: str) -> None:
    """A stopped elector leaves no thread behind (a broker restarted in-process many times)."""
    before = {t.name for t in threading.enumerate()}
    e = Leadership(RedisLease(redis_url, "leak" + uuid.uuid4().hex[:6], "x", 1.0), lambda: None, lambda: None)
    e.start()
    wait_for(lambda: e.leader, timeout=10, what="the only replica to lead")
    e.stop()
    assert {t.name for t in threading.enumerate()} <= before


def test_a_draining_replica_refuses_writes_with_retry_after_and_says_so(redis_url: str) -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from broker.ha import drain as ha

    prefix = "drain" + uuid.uuid4().hex[:6]
    lease = RedisLease(redis_url, prefix, "replica-d", 5.0)
    leadership = Leadership(lease, lambda: None, lambda: None)
    leadership.tick()
    store = RedisStateStore(redis_url, prefix)
    drain = ha.Drain()
    app = FastAPI()

    @app.post("/v1/jobs")
    def submit() -> dict[str, str]:
        return {"id": "j1"}

    ha.install(app, drain, leadership, lease.holder_now, store)
    http = TestClient(app)
    assert http.post("/v1/jobs").status_code == 200
    status = http.get("/v1/status").json()
    assert status["role"] == "leader" and status["leader"] == "replica-d" and status["draining"] is False
    drain.begin()
    refused = http.post("/v1/jobs")
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "2"
    assert refused.json()["error"] == "draining"
    assert http.get("/v1/status").json()["draining"] is True  # reads are still served
    with pytest.raises(RuntimeError, match="draining"):
        drain.readiness()
    leadership.stop()
    assert lease.holder_now() is None  # released on the way out
    lease.close()
    store.close()


class _DownLister(RecordingGateway):
    """A member cluster that refuses every list while `down`, then lists no Jobs."""

    def __init__(self) -> None:
        super().__init__()
        self.down = True

    def list_workloads(self, cluster: str, namespace: str) -> list[WorkloadRef]:
        if self.down:
            raise ClusterUnreachable(cluster, "connection refused")
        return []


def test_a_cluster_that_cannot_be_listed_for_a_rebuild_is_said_once_until_it_answers(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = RedisStateStore(redis_url, "unlisted" + uuid.uuid4().hex[:8], require_marker=True)
    gateway = _DownLister()
    recovery = StoreRecovery(store, gateway, ManualClock(), {"east": ClusterTraits("east")}, "gpufed")
    try:
        with caplog.at_level(logging.WARNING, logger="broker.ha.recovery"):
            report = recovery.check()  # the store is empty: a rebuild, with east not answering
            assert report is not None and report.clusters_pending == ["east"]
            for _ in range(5):
                assert recovery.check() is None  # east listed again at every check
            gateway.down = False
            recovery.check()  # east answers: nothing pending any more
        said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cannot list east")]
        assert len(said) == 1, said  # once, not once per check
    finally:
        store.close()
