"""Tenant namespaces, their quotas and the Namespace created on first use, in scheduling passes over real
Redis with a fake clock. The member clusters are summaries put in the store and a gateway that records
what it is asked to create (tests/integration/test_member_tenancy.py runs the real path on kubesim)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from adapters.redis_store import RedisStateStore
from broker.api.views import FleetViews
from broker.controller.service import BrokerService
from broker.core.model import (
    ClusterSummary,
    ClusterTraits,
    Health,
    JobRequest,
    JobState,
    MemberNamespace,
    ProductCapacity,
    QuotaStatus,
)
from tests.service_doubles import NOW, ManualClock, RecordingGateway

pytestmark = pytest.mark.integration

TENANTS = "gpufed-{tenant}"


def h100_cluster(name: str, *namespaces: MemberNamespace) -> ClusterSummary:
    """Two idle 8-GPU H100 nodes; the tenant namespaces the pollers saw."""
    by_free = (0,) * 8 + (2,)
    return ClusterSummary(
        cluster=name,
        health=Health.HEALTHY,
        heartbeat=NOW,
        products=(ProductCapacity("H100-80GB", 81559, 16, 16, 0, 16, by_free, by_free, 2),),
        namespaces=namespaces,
        namespaces_observed=True,
    )


def gpu_quota(namespace: str, used: int, hard: int = 16) -> MemberNamespace:
    quota = QuotaStatus("gpu", {"requests.nvidia.com/gpu": hard}, {"requests.nvidia.com/gpu": used})
    return MemberNamespace(namespace, quotas=(quota,))


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="mtenancy" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def service_over(store: RedisStateStore, *traits: ClusterTraits) -> tuple[BrokerService, RecordingGateway]:
    gateway = RecordingGateway()
    return BrokerService(store, gateway, ManualClock(), {t.name: t for t in traits}), gateway


def recorded(gateway: RecordingGateway) -> list[tuple[str, str, tuple[str, ...]]]:
    """Each create the gateway saw: the cluster, the Job's namespace and the companions' kinds."""
    return [(c.cluster, c.namespace, c.kinds) for c in gateway.created]


def test_a_tenant_at_its_namespace_quota_is_placed_on_another_cluster_with_the_reason(
    store: RedisStateStore,
) -> None:
    store.put_summary(h100_cluster("onprem-a", gpu_quota("gpufed-ml", 14)))
    store.put_summary(h100_cluster("onprem-b", gpu_quota("gpufed-ml", 0)))
    service, gateway = service_over(
        store,
        ClusterTraits("onprem-a", tenant_namespace=TENANTS),
        ClusterTraits("onprem-b", tenant_namespace=TENANTS),
    )
    record, _ = service.submit(JobRequest("train", tenant="ml", gpus_per_pod=4))
    service.schedule_once()
    assert service.get(record.id).cluster == "onprem-b"
    assert recorded(gateway) == [("onprem-b", "gpufed-ml", ())]
    verdicts = {
        v.cluster: v
        for v in FleetViews.of(service).explain(JobRequest("more", tenant="ml", gpus_per_pod=4))[1]
    }
    assert "quota gpufed-ml: nvidia.com/gpu 14/16, job needs 4" in str(verdicts["onprem-a"])


def test_jobs_placed_in_one_pass_are_charged_to_the_namespace_quota_so_none_is_refused(
    store: RedisStateStore,
) -> None:
    store.put_summary(h100_cluster("onprem-a", gpu_quota("gpufed-ml", 8, hard=12)))
    service, gateway = service_over(store, ClusterTraits("onprem-a", tenant_namespace=TENANTS))
    ids = [service.submit(JobRequest(f"t{i}", tenant="ml", gpus_per_pod=4))[0].id for i in range(2)]
    service.schedule_once()
    by_state = {service.get(i).state: service.get(i) for i in ids}  # same age: either may go first
    assert set(by_state) == {JobState.PLACED, JobState.QUEUED} and len(gateway.created) == 1
    assert by_state[JobState.QUEUED].reason == (
        "0/1 clusters are available: 1 quota gpufed-ml: nvidia.com/gpu 12/12, job needs 4."
    )


def test_a_missing_namespace_is_reported_unless_the_broker_may_create_it(store: RedisStateStore) -> None:
    store.put_summary(h100_cluster("onprem-a", gpu_quota("gpufed-cv", 0)))
    service, gateway = service_over(store, ClusterTraits("onprem-a", tenant_namespace=TENANTS))
    record, _ = service.submit(JobRequest("train", tenant="ml", gpus_per_pod=4))
    service.schedule_once()
    waiting = service.get(record.id)
    assert waiting.state is JobState.QUEUED and gateway.created == []
    assert waiting.reason == (
        "0/1 clusters are available: 1 namespace gpufed-ml missing (the broker may not create it)."
    )

    # allowed to create it: the Namespace goes ahead of the Job (a config change is a new look at parked jobs)
    creates = ClusterTraits("onprem-a", tenant_namespace=TENANTS, create_namespaces=True)
    service.set_traits({"onprem-a": creates}, at_once=True)
    service.schedule_once()
    assert recorded(gateway) == [("onprem-a", "gpufed-ml", ("Namespace",))]
