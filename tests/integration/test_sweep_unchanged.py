"""The sweep of a quiet cluster (broker.controller.sweeping): a cluster whose Jobs are listed from a watch's
cache (broker.core.ports.ListingVersion) is walked again only when its Jobs or the leader's records moved
since its last clean sweep, or when that sweep left something undone; a left-over Job is still deleted
whichever side it came from. Real Redis, a gateway double that lists from memory with a version."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from adapters.redis_store import RedisStateStore
from broker.controller.dispatch import InlineDispatcher
from broker.controller.service import BrokerService
from broker.core.errors import ClusterRejected, ClusterUnreachable
from broker.core.k8s_names import ATTEMPT_LABEL
from broker.core.model import ClusterTraits, JobRequest, JobState
from broker.core.workloads import WorkloadRef
from broker.workload.manifest import JOB_ID_LABEL
from tests.service_doubles import ManualClock, WatchedGateway, idle_h100_node

pytestmark = pytest.mark.integration


class ListedGateway(WatchedGateway):
    """Lists the Jobs it holds from memory (`jobs`, by name), counting each list (`lists`); its listing
    version moves on every change of `jobs` (None with versioned=False: a gateway that lists from the
    member); deletes fail while `refuse` is set, lists while `unreachable` is."""

    def __init__(self, versioned: bool = True) -> None:
        super().__init__()
        self.jobs: dict[str, WorkloadRef] = {}
        self.lists = 0
        self.version = 1
        self.versioned = versioned
        self.refuse = False
        self.unreachable = False

    def plant(self, name: str, job_id: str, attempt: int) -> None:
        self.jobs[name] = WorkloadRef(name, "default", job_id, attempt)
        self.version += 1

    def create_workload(
        self, cluster: str, job: Mapping[str, Any], companions: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        super().create_workload(cluster, job, companions)
        labels = job["metadata"]["labels"]
        self.plant(str(job["metadata"]["name"]), str(labels[JOB_ID_LABEL]), int(labels[ATTEMPT_LABEL]))

    def delete_workload(self, cluster: str, namespace: str, name: str) -> None:
        if self.refuse:
            raise ClusterRejected(cluster, "delete refused")
        super().delete_workload(cluster, namespace, name)
        if self.jobs.pop(name, None) is not None:
            self.version += 1

    def list_workloads(self, cluster: str, namespace: str) -> list[WorkloadRef]:
        if self.unreachable:
            raise ClusterUnreachable(cluster, "GET jobs: timeout after 3 s", cause="timeout after 3 s")
        self.lists += 1
        return list(self.jobs.values())

    def listing_version(self, cluster: str, namespace: str) -> int | None:
        return self.version if self.versioned else None


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="sweep" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def placed(store: RedisStateStore, gateway: ListedGateway) -> tuple[BrokerService, str]:
    """A leader with one job placed on cluster a (its Job created there); the job's id."""
    clock = ManualClock()
    store.put_summary(idle_h100_node("a", clock.t))
    service = BrokerService(store, gateway, clock, {"a": ClusterTraits("a")})
    service.watch_changes()
    job, _ = service.submit(JobRequest("j", gpus_per_pod=1))
    service.schedule_once()
    assert service.get(job.id).state is JobState.PLACED and len(gateway.jobs) == 1
    return service, job.id


def test_a_quiet_cluster_is_walked_once_then_again_only_when_its_jobs_move(store: RedisStateStore) -> None:
    gateway = ListedGateway()
    service, job_id = placed(store, gateway)
    assert service.sweep_cluster("a") == [] and gateway.lists == 1
    assert service.sweep_cluster("a") == [] and gateway.lists == 1  # nothing moved: not walked
    gateway.plant("gf-stale", job_id, 0)  # an attempt the record has moved past, found in the cluster
    assert service.sweep_cluster("a") == ["a/gf-stale"] and gateway.lists == 2
    assert service.sweep_cluster("a") == [] and gateway.lists == 3  # the delete moved the listing
    assert service.sweep_cluster("a") == [] and gateway.lists == 3
    # the unfence sweep (a fenced cluster back) always walks
    assert service.sweep_cluster("a", raise_errors=True) == [] and gateway.lists == 4


class CountingDispatcher(InlineDispatcher):
    """Runs each task at once, counting the keyed ones (a sweep of a cluster is one)."""

    keyed = 0

    def submit_once(self, cluster: str, key: str, task: Callable[[], object]) -> bool:
        self.keyed += 1
        return super().submit_once(cluster, key, task)


def test_a_sweep_pass_hands_a_quiet_cluster_to_no_worker(store: RedisStateStore) -> None:
    """The periodic sweep decides that a cluster is unchanged before it hands it to a dispatch worker: at
    1,000 quiet members a pass started a thousand threads to find nothing."""
    gateway = ListedGateway()
    service, job_id = placed(store, gateway)
    counting = service.dispatcher = CountingDispatcher()
    assert service.sweep_orphans() == [] and gateway.lists == 1 and counting.keyed == 1
    assert service.sweep_orphans() == [] and gateway.lists == 1 and counting.keyed == 1  # no task
    gateway.plant("gf-stale", job_id, 0)
    assert service.sweep_orphans() == ["a/gf-stale"] and counting.keyed == 2


def test_a_record_moved_by_another_writer_makes_the_next_sweep_walk(store: RedisStateStore) -> None:
    gateway = ListedGateway()
    service, job_id = placed(store, gateway)
    assert service.sweep_cluster("a") == []
    (first,) = gateway.jobs
    live = service.get(job_id)
    # another replica moved the job on to attempt 2 (as a failover would): attempt 1's Job is left over
    store.save_job(replace(live, attempt=2, workload_name="moved-on"), expected_state=JobState.PLACED)
    assert service.sweep_cluster("a") == [f"a/{first}"]
    assert gateway.lists == 2


def test_a_delete_that_failed_is_tried_again_though_nothing_moved(store: RedisStateStore) -> None:
    gateway = ListedGateway()
    service, job_id = placed(store, gateway)
    gateway.refuse = True
    gateway.plant("gf-stale", job_id, 0)
    assert service.sweep_cluster("a") == [] and gateway.lists == 1
    assert service.sweep_cluster("a") == [] and gateway.lists == 2  # not clean: walked again
    gateway.refuse = False
    assert service.sweep_cluster("a") == ["a/gf-stale"]


def test_a_gateway_that_lists_from_the_member_is_walked_every_sweep(store: RedisStateStore) -> None:
    gateway = ListedGateway(versioned=False)
    service, _ = placed(store, gateway)
    for n in range(1, 4):
        assert service.sweep_cluster("a") == [] and gateway.lists == n


def test_a_fenced_cluster_whose_sweep_fails_stays_fenced_with_one_warning_then_is_lifted(
    store: RedisStateStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A cluster back to its pollers but not yet to the broker's calls (its list times out): the fence
    stays, the log says why once (a warning, no traceback), and the next failover pass that gets through lifts it."""
    gateway = ListedGateway()
    service, _ = placed(store, gateway)
    store.fence("a", "lost: no successful call for 30 s")
    gateway.unreachable = True
    with caplog.at_level(logging.WARNING, logger="broker.controller"):
        service.observe_clusters()
        service.observe_clusters()
    assert "a" in store.fenced()
    failures = [r for r in caplog.records if "stays fenced" in r.getMessage()]
    assert len(failures) == 1 and failures[0].levelno == logging.WARNING and failures[0].exc_info is None
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    gateway.unreachable = False
    service.observe_clusters()
    assert "a" not in store.fenced()
