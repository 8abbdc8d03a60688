"""Member trouble in the controller (broker.controller.member_troubles) over real Redis, with a gateway
double that says what the pods say and a hand-moved clock: the reason and one event per change, the
withdraw after memberPendingSeconds (the Job deleted before the record leaves the attempt, the cluster
avoided), an image that cannot be pulled, and a race: no attempt is ever alive twice."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from adapters.redis_store import RedisStateStore
from broker.controller.base import ServiceSettings
from broker.controller.service import BrokerService
from broker.core.errors import Conflict, Fenced
from broker.core.model import ClusterTraits, ImagePullFailure, JobRequest, JobState
from broker.core.workloads import MemberTrouble, PodTrouble, Termination, WorkloadStatus
from broker.workload.member_trouble import TroublePolicy
from tests.service_doubles import ManualClock, WatchedGateway, idle_h100_node

pytestmark = pytest.mark.integration

SCHED = "0/1 nodes are available: 1 Insufficient memory."
POLICY = TroublePolicy(member_pending_seconds=120, image_pull_fail_seconds=300, avoid_seconds=600)


class TroubledGateway(WatchedGateway):
    """A watching gateway double whose pods report `trouble` (by cluster) for every live Job there, whose
    Jobs read as started (a pod pending) on a troubled cluster and ready elsewhere, and which counts, on
    every create, the live Jobs of the same job id (`doubles`: must stay empty)."""

    def __init__(self) -> None:
        super().__init__()
        self.trouble: dict[str, PodTrouble] = {}
        self.termination: Termination | None = None
        self.live: dict[str, str] = {}  # Job name -> cluster
        self.doubles: list[str] = []

    def create_workload(
        self, cluster: str, job: Mapping[str, Any], companions: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        name = str(job["metadata"]["name"])
        job_id = str(job["metadata"]["labels"]["gpufed.io/job-id"])
        with self._lock:
            alive = [n for n in self.live if n.startswith(f"gf-{job_id}-")]
            if alive:
                self.doubles.append(f"{name} created while {alive} alive")
            self.live[name] = cluster
        super().create_workload(cluster, job, companions)

    def delete_workload(self, cluster: str, namespace: str, name: str) -> None:
        with self._lock:
            self.live.pop(name, None)
        super().delete_workload(cluster, namespace, name)

    def read_workload(self, cluster: str, namespace: str, name: str) -> WorkloadStatus:
        with self._lock:
            here = self.live.get(name) == cluster
            told = self.status.get(name)
        if told is not None:
            return told
        if not here:
            return WorkloadStatus(name, namespace, exists=False)
        if cluster in self.trouble:
            return WorkloadStatus(name, namespace, exists=True, active=1)
        return WorkloadStatus(name, namespace, exists=True, active=1, ready=1)

    def member_trouble(self, cluster: str, namespace: str, name: str) -> MemberTrouble:
        with self._lock:
            here = self.live.get(name) == cluster
        return MemberTrouble(self.trouble.get(cluster) if here else None, self.termination)

    def last_termination(self, cluster: str, namespace: str, name: str) -> MemberTrouble:
        return self.member_trouble(cluster, namespace, name)


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="trouble" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def leader(store: RedisStateStore, gateway: TroubledGateway, clock: ManualClock) -> BrokerService:
    for c in ("a", "b"):
        store.put_summary(idle_h100_node(c, clock.t))
    traits = {c: ClusterTraits(c) for c in ("a", "b")}
    service = BrokerService(store, gateway, clock, traits, settings=ServiceSettings(trouble_policy=POLICY))
    service.watch_changes()
    return service


def placed_on(service: BrokerService, job_id: str, cluster: str) -> str:
    service.schedule_once()
    record = service.get(job_id)
    assert record.cluster == cluster and record.workload_name, record
    return record.workload_name


def test_the_members_words_are_the_reason_once_per_change(store: RedisStateStore) -> None:
    clock, gateway = ManualClock(), TroubledGateway()
    service = leader(store, gateway, clock)
    gateway.trouble["a"] = PodTrouble("ImagePullBackOff", 'Back-off pulling image "registry.invalid/x"')
    job, _ = service.submit(JobRequest("j", gpus_per_pod=1, clusters=("a",)))
    placed_on(service, job.id, "a")
    for _ in range(5):
        clock.t += 1
        service.sync_status()
    record = service.get(job.id)
    assert (
        record.reason == 'member trouble on a: ImagePullBackOff: Back-off pulling image "registry.invalid/x"'
    )
    said = [e.reason for e in service.events(job.id) if e.reason.startswith("member trouble")]
    assert said == [record.reason]  # once, not once per pass
    gateway.trouble["a"] = PodTrouble("ErrImagePull", "lookup registry.invalid: no such host")
    service.workload_changed("a", job.id)
    service.sync_status()
    said = [e.reason for e in service.events(job.id) if e.reason.startswith("member trouble")]
    assert said[-1] == "member trouble on a: ErrImagePull: lookup registry.invalid: no such host"
    assert len(said) == 2
    del gateway.trouble["a"]  # the pull worked: the pod runs
    service.workload_changed("a", job.id)
    service.sync_status()
    assert service.get(job.id).state is JobState.RUNNING


def test_pending_past_member_pending_seconds_is_withdrawn_and_placed_elsewhere(
    store: RedisStateStore,
) -> None:
    clock, gateway = ManualClock(), TroubledGateway()
    service = leader(store, gateway, clock)
    gateway.trouble["a"] = PodTrouble("Unschedulable", SCHED)
    job, _ = service.submit(JobRequest("j", gpus_per_pod=1, clusters=("a", "b")))
    service.schedule_once()
    first = service.get(job.id)
    if first.cluster == "b":  # the placer's choice: make the trouble follow it
        gateway.trouble = {"b": gateway.trouble.pop("a")}
    bad = str(first.cluster)
    service.sync_status()
    clock.t += POLICY.member_pending_seconds - 1
    service.sync_status()
    assert service.get(job.id).state is JobState.ADMITTED  # not yet
    clock.t += 1
    for c in ("a", "b"):
        store.put_summary(idle_h100_node(c, clock.t))
    service.sync_status()
    withdrawn = service.get(job.id)
    assert withdrawn.state is JobState.QUEUED, withdrawn
    assert withdrawn.reason.startswith(f"withdrawn from {bad} after 120 s: Unschedulable: {SCHED}")
    assert withdrawn.avoid == ((bad, clock.t + POLICY.avoid_seconds),)
    assert first.workload_name in gateway.deleted
    good = "b" if bad == "a" else "a"
    assert placed_on(service, job.id, good)
    assert service.get(job.id).attempt == first.attempt + 1
    assert gateway.doubles == []


def test_an_unpullable_image_fails_and_requeue_is_honoured(store: RedisStateStore) -> None:
    clock, gateway = ManualClock(), TroubledGateway()
    service = leader(store, gateway, clock)
    gateway.trouble["a"] = PodTrouble("ImagePullBackOff", 'Back-off pulling image "registry.invalid/x"')
    fail, _ = service.submit(JobRequest("f", gpus_per_pod=1, clusters=("a",)))
    again, _ = service.submit(
        JobRequest("r", gpus_per_pod=1, clusters=("a",), on_image_pull_failure=ImagePullFailure.REQUEUE)
    )
    service.schedule_once()
    service.sync_status()
    clock.t += POLICY.image_pull_fail_seconds
    for c in ("a", "b"):
        store.put_summary(idle_h100_node(c, clock.t))  # their pollers still report
    service.sync_status()
    failed = service.get(fail.id)
    assert failed.state is JobState.FAILED
    assert failed.reason.startswith("image pull failed on a for 300 s: ImagePullBackOff: Back-off pulling")
    requeued = service.get(again.id)
    assert requeued.state is JobState.QUEUED and "(onImagePullFailure: requeue)" in requeued.reason
    assert gateway.live == {}  # both attempts' Jobs deleted


def test_a_failed_job_carries_its_last_exit_code(store: RedisStateStore) -> None:
    clock, gateway = ManualClock(), TroubledGateway()
    service = leader(store, gateway, clock)
    job, _ = service.submit(JobRequest("j", gpus_per_pod=1, clusters=("a",)))
    name = placed_on(service, job.id, "a")
    gateway.termination = Termination("OOMKilled", 137, "p-0", "main")
    gateway.change(
        "a",
        job.id,
        name,
        WorkloadStatus(name, "default", exists=True, failed=1, failed_terminal=True, message="backoff limit"),
    )
    service.sync_status()
    failed = service.get(job.id)
    assert failed.state is JobState.FAILED
    assert (
        failed.reason
        == "failed on a: backoff limit (last termination: container main OOMKilled, exit code 137)"
    )


@pytest.mark.race
def test_no_attempt_is_ever_alive_twice_when_withdraws_race(store: RedisStateStore, redis_url: str) -> None:
    """The leader withdraws and places again while a paused ex-leader (its token stale) runs the same
    passes and an API replica cancels some jobs: on every create, no other Job of that job is alive."""
    clock, gateway = ManualClock(), TroubledGateway()
    store.client.set(f"{store.prefix}:leader-token", 2)
    current = RedisStateStore(redis_url, store.prefix, fencing_token=lambda: 2)
    stale_store = RedisStateStore(redis_url, store.prefix, fencing_token=lambda: 1)
    try:
        gateway.trouble["a"] = PodTrouble("Unschedulable", SCHED)
        service = leader(current, gateway, clock)
        jobs = [service.submit(JobRequest(f"j{i}", gpus_per_pod=1, clusters=("a", "b")))[0] for i in range(8)]
        service.schedule_once()
        stale = BrokerService(
            stale_store,
            gateway,
            clock,
            {c: ClusterTraits(c) for c in ("a", "b")},
            settings=ServiceSettings(trouble_policy=POLICY),
        )
        stale.records.ensure()
        service.sync_status()
        stale.sync_status()
        clock.t += POLICY.member_pending_seconds
        for c in ("a", "b"):
            current.put_summary(idle_h100_node(c, clock.t))
        api = BrokerService(store, gateway, clock, {c: ClusterTraits(c) for c in ("a", "b")})
        errors: list[BaseException] = []

        def run(step: Any, times: int) -> None:
            try:
                for _ in range(times):
                    with contextlib.suppress(Conflict, Fenced):
                        step()
            except BaseException as exc:  # a failure in a thread must fail the test
                errors.append(exc)

        def leader_sync() -> None:
            for j in jobs:
                service.workload_changed("a", j.id)
            service.sync_status()

        def leader_schedule() -> None:  # placing again while the sync withdraws (as with the concurrent
            service.schedule_once()  # dispatcher's per-cluster workers)

        def stale_pass() -> None:
            for j in jobs:
                stale.workload_changed("a", j.id)
            stale.sync_status()
            stale.schedule_once()

        def cancels() -> None:
            for j in jobs[::3]:
                api.cancel(j.id)

        steps = ((leader_sync, 20), (leader_schedule, 300), (stale_pass, 20), (cancels, 1))
        threads = [threading.Thread(target=run, args=step) for step in steps]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert gateway.doubles == []
        for j in jobs:
            record = service.store.get_job(j.id)
            assert record is not None
            alive = [n for n in gateway.live if n.startswith(f"gf-{j.id}-")]
            assert len(alive) <= 1, (record, alive)
    finally:
        current.close()
        stale_store.close()


def test_a_job_withdrawn_from_every_cluster_is_parked_until_the_fleet_changes(store: RedisStateStore) -> None:
    """Issue 48 finding 9: a pod no node can take (more memory than any has) was withdrawn from each
    member in turn and offered again once its avoid time ran out, bouncing forever. Withdrawn from every
    cluster it may use, it is parked with the reason and offered again once the fleet changes (a larger
    node joins)."""
    clock, gateway = ManualClock(), TroubledGateway()
    service = leader(store, gateway, clock)
    gateway.trouble = {c: PodTrouble("Unschedulable", SCHED) for c in ("a", "b")}
    job, _ = service.submit(JobRequest("fat", gpus_per_pod=1, clusters=("a", "b")))
    for turn in range(2):  # withdrawn from the one it was placed on, then from the other
        service.schedule_once()
        placed = service.get(job.id)
        assert placed.cluster is not None, (turn, placed)
        for _ in range(4):  # pending past memberPendingSeconds (120 s), a look every 61 s
            service.workload_changed(placed.cluster, job.id)
            service.sync_status()
            clock.t += 61
            for c in ("a", "b"):
                store.put_summary(idle_h100_node(c, clock.t))
        assert service.get(job.id).cluster is None, (turn, service.get(job.id))
    parked = service.get(job.id)
    assert parked.state is JobState.QUEUED and parked.reason.startswith(
        "parked: withdrawn from every cluster"
    ), parked
    assert "Insufficient memory" in parked.reason and parked.avoid == ()
    attempts = parked.attempt
    clock.t += POLICY.avoid_seconds + 60  # long after it would have been offered again
    for c in ("a", "b"):
        store.put_summary(idle_h100_node(c, clock.t))
    service.schedule_once()
    assert service.get(job.id).cluster is None and service.get(job.id).attempt == attempts  # no bounce
    # a larger node joins cluster b: the fleet changed, the job is offered to every cluster again
    larger = idle_h100_node("b", clock.t)
    larger = dataclasses.replace(
        larger, products=tuple(dataclasses.replace(p, max_node_memory_mib=4 << 20) for p in larger.products)
    )
    store.put_summary(larger)
    service.schedule_once()
    again = service.get(job.id)
    assert again.cluster in ("a", "b") and again.attempt == attempts + 1, again
    assert gateway.doubles == []
