"""A tenant's first job on a Kueue cluster, on real parts: with `createNamespaces`, the broker creates the
tenant's Namespace and its LocalQueue in the member cluster ahead of the Job, and Kueue admits the Job
through that queue. kubesim's demo fleet over HTTPS (onprem-b runs Kueue, ClusterQueue `gpu`), the broker's
poller (ClusterWatcher) writing the summary to real Redis, its gateway creating with the official client's
transport; everything read back with the official client.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from adapters.cluster_watcher import ClusterWatcher
from adapters.job_informer import WatchingGateway
from adapters.redis_store import RedisStateStore
from adapters.system_clock import SystemClock
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits, Health, JobRequest, JobState
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "onprem-b"
TRAITS = ClusterTraits(
    CLUSTER,
    kueue_local_queue="gpu",
    kueue_cluster_queue="gpu",
    tenant_namespace="gpufed-{tenant}",
    create_namespaces=True,
)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubesim-namespaces"), speed=20.0) as s:
        yield s


@pytest.fixture
def service(sim: Simulation, redis_url: str) -> Iterator[BrokerService]:
    store = RedisStateStore(redis_url, prefix="mns-int" + uuid.uuid4().hex[:8])
    watcher = ClusterWatcher(CLUSTER, sim.kubeconfig_path(CLUSTER), flush_interval_s=0.02)
    watcher.start()
    gateway = WatchingGateway.watching({CLUSTER: (sim.kubeconfig_path(CLUSTER), None)}, {CLUSTER: ""})
    gateway.start()
    try:

        def published() -> bool:
            store.put_summary(watcher.summary(TRAITS))
            summary = store.get_summary(CLUSTER)
            # healthy too: capacity can be listed before the health machine's first verdict
            if summary is None or summary.health is not Health.HEALTHY:
                return False
            return any(p.free > 0 for p in summary.products)

        wait_for(published, timeout=30, what=f"{CLUSTER}'s healthy summary in Redis")
        yield BrokerService(store, gateway, SystemClock(), {CLUSTER: TRAITS})
    finally:
        watcher.stop()
        gateway.close()
        store.close()


def _api(sim: Simulation) -> Any:
    return config.new_client_from_config(str(sim.kubeconfig_path(CLUSTER)), persist_config=False)  # type: ignore[no-untyped-call]


def test_a_tenants_first_job_creates_its_namespace_and_local_queue_and_kueue_admits_it(
    sim: Simulation, service: BrokerService
) -> None:
    namespace = "gpufed-vision"
    api = _api(sim)
    try:
        core: Any = client.CoreV1Api(api)
        batch: Any = client.BatchV1Api(api)
        custom: Any = client.CustomObjectsApi(api)
        assert namespace not in {n.metadata.name for n in core.list_namespace().items}

        first, _ = service.submit(JobRequest("first", tenant="vision", gpus_per_pod=1, duration_seconds=20))
        service.schedule_once()
        placed = service.get(first.id)
        assert (placed.state, placed.cluster) == (JobState.PLACED, CLUSTER), placed.reason

        created = core.read_namespace(namespace)
        assert created.metadata.labels["gpufed.io/tenant"] == "vision"
        assert created.metadata.labels["app.kubernetes.io/managed-by"] == "gpufed"
        queue = custom.get_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", namespace, "localqueues", "gpu"
        )
        assert queue["spec"]["clusterQueue"] == "gpu"
        [job] = batch.list_namespaced_job(namespace, label_selector=f"gpufed.io/job-id={first.id}").items
        assert job.metadata.labels["kueue.x-k8s.io/queue-name"] == "gpu"

        # Kueue admits it through the new LocalQueue: the Job is unsuspended and runs to the end
        def ended() -> bool:
            service.sync_status()
            return service.get(first.id).state is JobState.SUCCEEDED

        wait_for(ended, timeout=60, what=f"{first.id} SUCCEEDED through the tenant's LocalQueue")

        # a second job of the tenant finds both there: no error, and one Namespace and one LocalQueue still
        second, _ = service.submit(JobRequest("second", tenant="vision", gpus_per_pod=1, duration_seconds=20))
        service.schedule_once()
        assert service.get(second.id).state is JobState.PLACED, service.get(second.id).reason
        queues = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", namespace, "localqueues")
        assert [q["metadata"]["name"] for q in queues["items"]] == ["gpu"]
    finally:
        api.close()
