"""A workload kind's object is followed by watch, as a Job is: the leader's status sync learns that a
JobSet changed from the informer and reads it from memory, so a status change of one kind job costs no
GET on the member (kubesim over real HTTPS, counted by its request counters; real Redis; the demo
fleet's onprem-a, which serves JobSet; no kubesim controllers: the JobSet changes only when the test
changes it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.job_informer import WatchingGateway
from adapters.kube_informer import WatchSettings
from adapters.redis_store import RedisStateStore
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits, JobRequest, JobState
from broker.intake.parse import spec_of
from broker.workload.kinds import registry
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import poll_for
from tests.service_doubles import ManualClock, idle_h100_node

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "onprem-a"
NS = "default"
JOBSETS = "jobsets.jobset.x-k8s.io"
SETTINGS = WatchSettings(watch_timeout_s=30, read_slack_s=5, backoff_base_s=0.05, backoff_max_s=0.5)


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Simulation]:
    with Simulation(
        load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml"), tmp_path, speed=0, controllers=False
    ) as s:
        yield s


@pytest.fixture
def gateway(sim: Simulation) -> Iterator[WatchingGateway]:
    gw = WatchingGateway.watching({CLUSTER: (sim.kubeconfig_path(CLUSTER), None)}, {CLUSTER: NS}, SETTINGS)
    gw.start()
    try:
        poll_for(
            "the Jobs and the kinds followed", lambda: gw.synced(CLUSTER) and gw.kinds_synced(CLUSTER), 30
        )
        yield gw
    finally:
        gw.close()


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="kinds" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def jobset_request() -> JobRequest:
    obj: dict[str, Any] = yaml.safe_load((REPO / "examples" / "jobset.yaml").read_text())
    return registry.with_workload(obj, spec_of(obj).to_request())


def gets(sim: Simulation) -> int:
    return sim.api(CLUSTER).request_counts().get(("get", JOBSETS), 0)


def test_a_jobset_status_change_reaches_status_sync_without_a_get(
    sim: Simulation, gateway: WatchingGateway, store: RedisStateStore
) -> None:
    clock = ManualClock()
    summary = idle_h100_node(CLUSTER, clock.t)
    store.put_summary(
        replace(summary, workload_apis=("jobset.x-k8s.io/v1alpha2",), workload_apis_observed=True)
    )
    service = BrokerService(store, gateway, clock, {CLUSTER: ClusterTraits(CLUSTER)})
    service.watch_changes()
    job, _ = service.submit(jobset_request())
    service.schedule_once()
    assert service.dispatcher.wait_idle(30)  # the JobSet created in its member
    placed = service.get(job.id)
    assert placed.state is JobState.PLACED and placed.workload_name is not None
    name = placed.workload_name
    cache = gateway.follower.kind_caches[CLUSTER][("jobset.x-k8s.io/v1alpha2", "JobSet")]
    poll_for("the JobSet in the informer's cache", lambda: cache.get(name, NS), 30)
    service.sync_status()  # the first pass compares every job (from memory)
    assert service.dispatcher.wait_idle(30)  # the cluster's sync worker is done
    service.work.take_jobs()
    before = gets(sim)

    def complete(obj: dict[str, Any]) -> None:
        obj["status"] = {
            "conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}]
        }

    sim.call(lambda: sim.store(CLUSTER).mutate(JOBSETS, NS, name, complete))
    poll_for("the informer's word that the JobSet changed", lambda: service.work.pending() > 0, 30)

    def ended() -> bool:
        service.sync_status()  # what the loop does when woken by the informer
        return service.get(job.id).state is JobState.SUCCEEDED

    assert poll_for("the job ended", ended, 30)
    assert gets(sim) == before  # read from the watch's cache, not by a GET on the member
