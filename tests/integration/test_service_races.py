"""BrokerService races between the API threads and the control loop, on real Redis and a kubesim cluster.

A cancel that lands while schedule_once is dispatching the same job must never leave a Job running in the
member cluster (holding GPUs nobody accounts for) behind a CANCELLED record. The interleavings are forced
by running the other side from inside a step of this one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from adapters.kube import KubeGateway
from adapters.kube_rest import KubeRest
from adapters.redis_store import RedisStateStore
from adapters.system_clock import SystemClock
from broker.api.views import FleetViews
from broker.controller.dispatching import UNANSWERED_CREATE_RETRIES
from broker.controller.service import BrokerService
from broker.core.errors import OutcomeUnknown
from broker.core.model import ClusterTraits, Health, JobEvent, JobRecord, JobRequest, JobState
from broker.core.workloads import WorkloadStatus
from tests.service_doubles import idle_h100_node

pytestmark = [pytest.mark.integration, pytest.mark.race]

sim_mod = pytest.importorskip("kubesim.sim")
fleet_mod = pytest.importorskip("kubesim.fleet")


class HookedGateway(KubeGateway):
    """The real gateway; `before_create` runs first, as another thread that got there first would.
    `unanswered` creates are sent and never answered (nor made); then `answer_lost` creates are made but
    their answer comes too late: both read as OutcomeUnknown, as a client's read timeout does."""

    before_create: Callable[[], object] | None = None
    unanswered: int = 0
    answer_lost: int = 0
    creates: int = 0

    def create_workload(
        self, cluster: str, job: Mapping[str, Any], companions: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        self.creates += 1
        hook, self.before_create = self.before_create, None
        if hook is not None:
            hook()
        late = OutcomeUnknown(
            cluster, "POST jobs: timeout after 5 s (sent, not answered)", "timeout after 5 s"
        )
        if self.unanswered:
            self.unanswered -= 1
            raise late
        super().create_workload(cluster, job, companions)
        if self.answer_lost:
            self.answer_lost -= 1
            raise late

    reads: int = 0

    def read_workload(self, cluster: str, namespace: str, name: str) -> WorkloadStatus:
        self.reads += 1
        return super().read_workload(cluster, namespace, name)


class HookedStore(RedisStateStore):
    """The real store; `before_save` runs before the next save of a record in the given state."""

    before_save: tuple[JobState, Callable[[], Any]] | None = None

    def save_job(
        self,
        record: JobRecord,
        expected_state: JobState | None = None,
        event: JobEvent | None = None,
        expected_attempt: int | None = None,
    ) -> JobRecord:
        if self.before_save is not None and record.state is self.before_save[0]:
            hook, self.before_save = self.before_save[1], None
            hook()
        return super().save_job(record, expected_state, event, expected_attempt)


@pytest.fixture
def world(tmp_path: Path, redis_url: str) -> Iterator[tuple[BrokerService, HookedStore, HookedGateway]]:
    fleet = fleet_mod.synthetic_fleet(1, 1, gpus_per_node=8)
    with sim_mod.Simulation(fleet, tmp_path, speed=0) as sim:
        name = fleet.clusters[0].name
        store = HookedStore(redis_url, prefix="race" + uuid.uuid4().hex[:8])
        gateway = HookedGateway({name: KubeRest.from_kubeconfig(name, sim.kubeconfig_path(name))})
        clock = SystemClock()
        store.put_summary(idle_h100_node(name, clock.now()))
        service = BrokerService(store, gateway, clock, {name: ClusterTraits(name=name)})
        try:
            yield service, store, gateway
        finally:
            gateway.close()
            store.close()


def _submit(service: BrokerService) -> JobRecord:
    record, _ = service.submit(JobRequest(name="race", gpus_per_pod=1))
    return record


def _jobs_in_cluster(service: BrokerService, job_id: str) -> list[str]:
    gateway = service.gateway
    assert isinstance(gateway, KubeGateway)
    (cluster,) = service.traits
    rest = gateway._rest(cluster)
    jobs = rest.request("GET", "/apis/batch/v1/namespaces/default/jobs")["items"]
    return [
        j["metadata"]["name"]
        for j in jobs
        if j["metadata"].get("labels", {}).get("gpufed.io/job-id") == job_id
    ]


def test_a_cancel_while_the_job_is_being_created_leaves_no_job_in_the_cluster(
    world: tuple[BrokerService, HookedStore, HookedGateway],
) -> None:
    service, store, gateway = world
    job = _submit(service)
    gateway.before_create = lambda: service.cancel(job.id)  # the user's DELETE lands mid-dispatch

    service.schedule_once()

    assert service.get(job.id).state is JobState.CANCELLED
    assert _jobs_in_cluster(service, job.id) == []
    assert store.live_reservations(SystemClock().now()) == []


def test_a_cancel_by_the_api_process_while_the_job_is_being_created_leaves_no_job_in_the_cluster(
    world: tuple[BrokerService, HookedStore, HookedGateway],
) -> None:
    """The same race with the cancel made by another process (the API's own service on the same store, as
    `apiProcesses` runs it): the leader learns of it through the change stream, not its own write."""
    service, store, gateway = world
    job = _submit(service)
    api = BrokerService(store, gateway, SystemClock(), dict(service.traits))
    gateway.before_create = lambda: api.cancel(job.id)

    service.schedule_once()

    assert service.get(job.id).state is JobState.CANCELLED
    assert _jobs_in_cluster(service, job.id) == []
    assert store.live_reservations(SystemClock().now()) == []


def test_a_cancel_of_a_queued_job_that_the_loop_places_meanwhile_removes_its_workload(
    world: tuple[BrokerService, HookedStore, HookedGateway],
) -> None:
    service, store, _ = world
    job = _submit(service)
    # cancel() read the job as QUEUED; before it writes CANCELLED the control loop places and creates it.
    store.before_save = (JobState.CANCELLED, service.schedule_once)

    cancelled = service.cancel(job.id)

    assert cancelled.state is JobState.CANCELLED
    assert _jobs_in_cluster(service, job.id) == []
    assert store.live_reservations(SystemClock().now()) == []


def test_a_cancel_does_not_overwrite_a_job_that_finished_meanwhile(
    world: tuple[BrokerService, HookedStore, HookedGateway],
) -> None:
    service, store, _ = world
    job = _submit(service)
    service.schedule_once()
    placed = service.get(job.id)
    assert placed.state is JobState.PLACED

    def finish() -> None:
        store.save_job(replace(placed, state=JobState.SUCCEEDED), expected_state=JobState.PLACED)

    store.before_save = (JobState.CANCELLED, finish)

    with pytest.raises(Exception, match="SUCCEEDED"):
        service.cancel(job.id)
    assert service.get(job.id).state is JobState.SUCCEEDED


def test_a_status_read_that_returns_after_the_job_moved_on_does_not_write_the_old_attempt_back(
    world: tuple[BrokerService, HookedStore, HookedGateway], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of attempt 1 that hung on its cluster returns after the job was failed over and placed
    again (attempt 2, in the same state): what it saw of attempt 1 must not overwrite attempt 2."""
    service, store, gateway = world
    job = _submit(service)
    service.schedule_once()
    first = service.get(job.id)
    assert (first.state, first.attempt) == (JobState.PLACED, 1)
    second = replace(first, attempt=2, workload_name=f"{first.workload_name}-a2")

    def slow_read(cluster: str, namespace: str, name: str) -> WorkloadStatus:
        store.save_job(second, expected_state=JobState.PLACED)  # meanwhile: failed over, placed again
        # what attempt 1's Job said: it completed (a write of SUCCEEDED over attempt 2, which runs on)
        return WorkloadStatus(name=name, namespace=namespace, exists=True, succeeded=1, complete=True)

    monkeypatch.setattr(gateway, "read_workload", slow_read)
    service.sync_status()

    assert service.get(job.id) == second


def test_a_summary_left_in_redis_by_a_cluster_no_longer_declared_is_never_chosen(
    world: tuple[BrokerService, HookedStore, HookedGateway],
) -> None:
    """A cluster removed from clusters.yaml keeps its summary in Redis (fresh for the staleness limit, or
    for as long as another broker on the same prefix still watches it). Choosing it reserved capacity and
    then failed the whole scheduling pass on the missing traits, pass after pass."""
    service, store, _ = world
    (declared,) = service.traits
    current = store.get_summary(declared)
    assert current is not None
    store.put_summary(replace(current, cluster="a-retired-cluster"))  # sorts first: wins the tie
    job = _submit(service)

    service.schedule_once()

    placed = service.get(job.id)
    assert placed.state is JobState.PLACED and placed.cluster == declared
    assert [v.cluster for v in FleetViews.of(service).explain(job.request)[1]] == [declared]


def test_a_refused_create_backs_off_instead_of_retrying_every_pass(
    world: tuple[BrokerService, HookedStore, HookedGateway],
) -> None:
    """A member cluster that refuses the manifest (or can't be reached) sends the job back to QUEUED with
    the reason, and the job waits 2**n s before the n+1-th try instead of hammering the cluster."""
    service, store, gateway = world
    job = _submit(service)

    def refuse() -> None:
        from broker.core.errors import ClusterRejected

        raise ClusterRejected("c", "admission webhook said no")

    gateway.before_create = refuse
    service.schedule_once()
    failed = service.get(job.id)
    assert failed.state is JobState.QUEUED
    assert failed.dispatch_failures == 1
    assert "dispatch-failed" in failed.reason and "admission webhook said no" in failed.reason
    assert failed.not_before > SystemClock().now()
    assert store.live_reservations(SystemClock().now()) == []

    assert service.schedule_once() == []  # still backing off: not even tried
    assert service.get(job.id).dispatch_failures == 1

    store.save_job(replace(service.get(job.id), not_before=0.0), expected_state=JobState.QUEUED)
    service.schedule_once()  # the backoff is over and the cluster takes it now
    assert service.get(job.id).state is JobState.PLACED
    assert _jobs_in_cluster(service, job.id) != []


def test_a_create_made_but_answered_too_late_is_sent_again_by_name_not_placed_again(
    world: tuple[BrokerService, HookedStore, HookedGateway],
) -> None:
    """An overloaded member makes the Job but answers after the client's deadline. The job keeps its
    attempt and its room: the create is sent again by the same name (409: made), and no second Job of a
    second attempt is made (the late first one used to be swept as stale)."""
    service, store, gateway = world
    job = _submit(service)
    gateway.answer_lost = 1

    service.schedule_once()

    placed = service.get(job.id)
    assert placed.state is JobState.PLACED and placed.attempt == 1 and placed.dispatch_failures == 0
    assert _jobs_in_cluster(service, job.id) == [placed.workload_name]
    assert gateway.creates == 2
    assert [r.job_id for r in store.live_reservations(SystemClock().now())] == [job.id]


def test_a_create_never_answered_is_requeued_after_its_retries(
    world: tuple[BrokerService, HookedStore, HookedGateway],
) -> None:
    """A member that takes a create and never answers (hung): the create is sent UNANSWERED_CREATE_RETRIES
    more times, then the job goes back to the queue with the reason and backs off, its room released."""
    service, store, gateway = world
    job = _submit(service)
    gateway.unanswered = 1 + UNANSWERED_CREATE_RETRIES

    service.schedule_once()

    failed = service.get(job.id)
    assert gateway.creates == 1 + UNANSWERED_CREATE_RETRIES
    assert failed.state is JobState.QUEUED and failed.dispatch_failures == 1
    assert "dispatch-failed" in failed.reason and "not answered" in failed.reason
    assert _jobs_in_cluster(service, job.id) == []
    assert store.live_reservations(SystemClock().now()) == []


def test_one_job_that_breaks_placement_does_not_stop_the_others(
    world: tuple[BrokerService, HookedStore, HookedGateway],
) -> None:
    service, _, gateway = world
    first = _submit(service)
    second = _submit(service)
    calls = {"n": 0}

    def explode_once() -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug in one job's path")

    gateway.before_create = explode_once
    service.schedule_once()
    states = {service.get(j.id).state for j in (first, second)}
    assert JobState.PLACED in states


def test_the_sweep_removes_left_over_attempts_and_leaves_the_live_one_and_strangers(
    world: tuple[BrokerService, HookedStore, HookedGateway],
) -> None:
    """A create that timed out but landed, or a cluster that came back after its job moved, leaves a Job
    of an attempt nobody wants: the sweep deletes it. The live attempt and Jobs of job ids this broker
    never saw (another broker's) stay."""
    service, store, gateway = world
    (cluster,) = service.traits
    job = _submit(service)
    service.schedule_once()
    live = service.get(job.id)
    assert live.state is JobState.PLACED and live.attempt == 1

    rest = gateway._rest(cluster)

    def plant(name: str, job_id: str, attempt: int) -> None:
        rest.request(
            "POST",
            "/apis/batch/v1/namespaces/default/jobs",
            body={
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": name,
                    "labels": {"gpufed.io/job-id": job_id, "gpufed.io/attempt": str(attempt)},
                },
                "spec": {
                    "template": {
                        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
                    }
                },
            },
        )

    # the record moved on to attempt 2 (as after a failover); attempt 1's Job is left over
    store.save_job(replace(live, attempt=2, workload_name="moved-on"), expected_state=JobState.PLACED)
    plant("moved-on", job.id, 2)
    plant("someone-elses", "j-not-ours", 1)

    deleted = service.sweep_orphans()

    assert deleted == [f"{cluster}/{live.workload_name}"]
    assert sorted(_jobs_in_cluster(service, job.id)) == ["moved-on"]
    names = [
        j["metadata"]["name"] for j in rest.request("GET", "/apis/batch/v1/namespaces/default/jobs")["items"]
    ]
    assert "someone-elses" in names
    assert any("left-over" in e.reason for e in service.events(job.id))


def test_jobs_on_a_cluster_its_pollers_report_unreachable_are_not_read_until_it_answers(
    world: tuple[BrokerService, HookedStore, HookedGateway],
) -> None:
    """A hung cluster would stall the whole control loop on its timeouts; the pollers' health says so."""
    service, store, gateway = world
    (cluster,) = service.traits
    job = _submit(service)
    service.schedule_once()
    assert service.get(job.id).state is JobState.PLACED
    summary = store.get_summary(cluster)
    assert summary is not None

    store.put_summary(replace(summary, health=Health.UNREACHABLE))
    before = gateway.reads
    service.sync_status()
    assert service.sweep_orphans() == []
    assert gateway.reads == before

    store.put_summary(replace(summary, health=Health.HEALTHY))
    service.sync_status()
    assert gateway.reads == before + 1
