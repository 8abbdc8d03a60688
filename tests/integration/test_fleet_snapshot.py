"""The published fleet snapshot the API's views read (broker.cache.fleet_snapshot, broker.api.views), on
real Redis: it is the scheduler's model of what is placeable (live reservations deducted, fenced clusters
not offered), handed out unchanged while nothing moves, and explain and the queue read the same one."""

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
    NoFit,
    Placement,
    ProductCapacity,
    Reservation,
)
from tests.service_doubles import NOW, ManualClock, RecordingGateway

pytestmark = pytest.mark.integration


def h100(name: str, nodes: int) -> ClusterSummary:
    gpus = 8 * nodes
    by_free = (0,) * 8 + (nodes,)
    return ClusterSummary(
        cluster=name,
        health=Health.HEALTHY,
        heartbeat=NOW,
        products=(ProductCapacity("H100-80GB", 81559, gpus, gpus, 0, gpus, by_free, by_free, nodes),),
    )


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="snap" + uuid.uuid4().hex[:8])
    yield s
    s.close()


@pytest.fixture
def views(store: RedisStateStore) -> FleetViews:
    for c in ("a", "b"):
        store.put_summary(h100(c, 1))
    service = BrokerService(
        store, RecordingGateway(), ManualClock(), {c: ClusterTraits(c) for c in ("a", "b")}
    )
    return FleetViews.of(service)


def test_the_same_snapshot_while_nothing_moves_a_new_one_when_a_summary_does(
    views: FleetViews, store: RedisStateStore
) -> None:
    first = views.snapshots.current()
    assert views.snapshots.current() is first
    store.put_summary(h100("a", 2))
    second = views.snapshots.current()
    assert second is not first and second.generation == first.generation + 1
    assert [p.allocatable for s in second.observed if s.cluster == "a" for p in s.products] == [16]


def test_a_reservation_is_deducted_and_a_fenced_cluster_is_not_offered(
    views: FleetViews, store: RedisStateStore
) -> None:
    eight = JobRequest("eight", gpus_per_pod=8)
    decision, _ = views.explain(eight)
    assert isinstance(decision, Placement)
    taken = decision.cluster
    other = "b" if taken == "a" else "a"
    pair = store.cluster_marks([taken])[taken][:2]
    held = Reservation("j-held", 0, taken, "H100-80GB", "nvidia.com/gpu", 8, NOW, NOW + 120)
    assert store.reserve(held, NOW, *pair).ok
    decision, _ = views.explain(eight)
    assert isinstance(decision, Placement) and decision.cluster == other  # the held GPUs are not offered
    assert store.fence(other, "lost: test")
    snapshot = views.snapshots.current()
    assert other in snapshot.fenced and other not in {s.cluster for s in snapshot.placeable}
    assert {s.cluster for s in snapshot.observed} == {"a", "b"}  # the fleet view still shows it
    decision, _ = views.explain(eight)
    assert isinstance(decision, NoFit)  # as the scheduler sees it: one cluster full, the other fenced
    clusters = {c["name"]: c for c in views.clusters_body(events=0)["items"]}
    assert clusters[other]["fenced"] == "lost: test"
