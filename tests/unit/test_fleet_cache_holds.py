"""The fleet cache's placeable view while a pass holds its decisions (broker/cache/fleet_cache.py): each
hold is added to the view in one step, and the view is always what deducting every live reservation
from the observed summary gives; a hold that replaces the job's other reservation, and one that
expires, are counted as they are."""

from __future__ import annotations

from collections.abc import Sequence

from broker.cache.fleet_cache import FleetCache
from broker.cache.reservations import deduct
from broker.core.model import ClusterSummary, ProductCapacity, Reservation
from broker.core.ports import ClusterState, SummaryMarks

NOW = 1_000.0
GPU = "nvidia.com/gpu"
OBSERVED = ClusterSummary(
    "a",
    version=3,
    products=(ProductCapacity("H100-80GB", 81559, 64, 64, 0, 64, (0,) * 8 + (8,), (0,) * 8 + (8,), nodes=8),),
)


class OneCluster:
    """The two reads FleetCache makes of the StateStore port, over one cluster's state."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.reads = 0

    def cluster_marks(self, clusters: Sequence[str]) -> dict[str, SummaryMarks]:
        s = self.state
        return {"a": SummaryMarks(s.summary.version, s.ledger, 1, None, None)} if "a" in clusters else {}

    def cluster_states(self, clusters: Sequence[str]) -> dict[str, ClusterState]:
        self.reads += 1
        return {"a": self.state} if "a" in clusters else {}


def hold(job: str, gpus: int, expires: float = NOW + 60) -> Reservation:
    return Reservation(job, 1, "a", "H100-80GB", GPU, gpus, NOW, expires)


def cache_over(*stored: Reservation) -> tuple[FleetCache, OneCluster]:
    store = OneCluster(ClusterState(OBSERVED, stored, ledger=7))
    cache = FleetCache(store, ["a"])  # type: ignore[arg-type]  # the two methods it calls
    cache.refresh()
    return cache, store


def free(cache: FleetCache, now: float = NOW) -> int:
    view = cache.placeable("a", now)
    assert view is not None
    return view.products[0].free


def test_each_hold_is_in_the_view_as_a_full_deduction_would_count_it() -> None:
    cache, store = cache_over(hold("old", 8))
    assert free(cache) == 56
    for i, gpus in enumerate([1, 3, 8, 2, 7]):
        cache.hold(hold(f"j{i}", gpus))
        state = cache.state("a")
        assert state is not None
        assert cache.placeable("a", NOW) == deduct(OBSERVED, state.reservations, NOW)
    assert free(cache) == 56 - 21
    cache.settle("a", [], ledger=8)  # the store took the batch: the same reservations, the same view
    assert free(cache) == 56 - 21 and store.reads == 1


def test_a_hold_that_replaces_the_jobs_other_reservation_counts_only_the_new_one() -> None:
    cache, _ = cache_over(hold("j", 8))
    assert free(cache) == 56
    cache.hold(hold("j", 2))
    assert free(cache) == 62


def test_a_hold_stops_counting_when_it_expires() -> None:
    cache, _ = cache_over()
    cache.hold(hold("short", 4, expires=NOW + 5))
    cache.hold(hold("long", 2))
    assert free(cache) == 58
    assert free(cache, NOW + 5) == 62
