"""The observed summaries the never-fit warning reads (broker/cache/observed_fleet.py), over real Redis:
only the declared clusters, as observed (a reservation deducts nothing), read again when a summary's
version moves or the declared clusters change, and not when only reservations move (a burst of
submits moves every ledger; re-reading then was the cost this view exists to avoid)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from adapters.redis_store import RedisStateStore
from broker.cache.observed_fleet import ObservedFleet
from broker.core.model import ClusterSummary, Health, ProductCapacity, Reservation

NOW = 1_000.0


def summary(name: str, free: int) -> ClusterSummary:
    hist = (0,) * 8 + (1,) if free == 8 else tuple(1 if i == free else 0 for i in range(free + 1))
    return ClusterSummary(
        cluster=name,
        health=Health.HEALTHY,
        heartbeat=NOW,
        products=(ProductCapacity("H100-80GB", 81559, 8, 8, 8 - free, free, hist, hist, 1),),
    )


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="observed" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def free(summaries: tuple[ClusterSummary, ...]) -> dict[str, int]:
    return {s.cluster: s.products[0].free for s in summaries}


def test_the_declared_clusters_as_observed_read_again_only_when_a_summary_moves(
    store: RedisStateStore,
) -> None:
    for name, gpus in (("b", 8), ("a", 8), ("undeclared", 8)):
        store.put_summary(summary(name, gpus))
    declared = ["b", "a"]
    fleet = ObservedFleet(store, lambda: declared)

    first = fleet.current()
    assert [s.cluster for s in first] == ["a", "b"]
    assert free(first) == {"a": 8, "b": 8}

    # a reservation moves the ledger, not the summary: nothing is read again and nothing is deducted
    a = store.cluster_states(["a"])["a"]
    held = Reservation("job-1", 1, "a", "H100-80GB", "nvidia.com/gpu", 4, NOW, NOW + 60)
    assert store.reserve(held, NOW, a.summary.version, a.ledger).ok
    assert fleet.current() is first
    assert fleet.reads == 1

    # a new summary is read, with its version
    store.put_summary(summary("b", 3))
    moved = fleet.current()
    assert free(moved) == {"a": 8, "b": 3}
    assert fleet.reads == 2

    # the declared clusters change (a config reload): the new one is read, the one left is gone
    declared[:] = ["undeclared", "b"]
    assert free(fleet.current()) == {"b": 3, "undeclared": 8}
    assert fleet.reads == 3


def test_a_cluster_without_a_summary_yet_is_left_out_until_it_has_one(store: RedisStateStore) -> None:
    store.put_summary(summary("a", 8))
    fleet = ObservedFleet(store, lambda: ["a", "new"])
    assert [s.cluster for s in fleet.current()] == ["a"]
    store.put_summary(summary("new", 2))
    assert free(fleet.current()) == {"a": 8, "new": 2}
