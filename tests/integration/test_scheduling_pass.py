"""The scheduling pass on real Redis: parking never-fit jobs, and any number of placers never over-commit.

The member clusters are not the subject here, so the gateway only records the Jobs it is asked to create
(the two-broker test on kubesim, test_two_brokers.py, covers the real path). The clock is a test clock.
"""

from __future__ import annotations

import logging
import random
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace

import pytest

from adapters.redis_store import RedisStateStore
from broker.cache.fleet_cache import FleetCache
from broker.controller import scheduling
from broker.controller.service import BrokerService
from broker.core.errors import ClusterUnreachable
from broker.core.model import (
    ClusterSummary,
    ClusterTraits,
    Health,
    JobRequest,
    JobState,
    MigCapacity,
    ProductCapacity,
    Reservation,
)
from broker.core.ports import ReserveBatch, ReserveResult
from broker.core.workloads import WorkloadStatus
from tests.service_doubles import NOW, ManualClock, RecordingGateway

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"


def hist(*frees: int) -> tuple[int, ...]:
    out = [0] * (max(frees) + 1)
    for f in frees:
        out[f] += 1
    return tuple(out)


def cluster(name: str, *frees: int, product: str = "H100-80GB", mig_free: int = 0) -> ClusterSummary:
    h = hist(*frees)
    free = sum(frees)
    return ClusterSummary(
        cluster=name,
        health=Health.HEALTHY,
        heartbeat=NOW,
        products=(
            ProductCapacity(
                product, 81559, 8 * len(frees), 8 * len(frees), 8 * len(frees) - free, free, h, h, len(frees)
            ),
        ),
        mig=(MigCapacity(product, "1g.10gb", MIG, 14, mig_free, min(mig_free, 7)),) if mig_free else (),
    )


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="pass" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def service(store: RedisStateStore, clock: ManualClock, clusters: Sequence[str]) -> BrokerService:
    return BrokerService(store, RecordingGateway(), clock, {c: ClusterTraits(c) for c in clusters})


def test_a_never_fit_job_is_parked_until_the_fleet_changes(store: RedisStateStore) -> None:
    clock = ManualClock()
    store.put_summary(cluster("a", 8, 8))
    svc = service(store, clock, ["a", "b"])
    never, _ = svc.submit(JobRequest("l4-only", gpus_per_pod=1, gpu_products=("L4",)))
    svc.submit(JobRequest("too-big", gpus_per_pod=8, pods=3))  # can fit once GPUs free up

    svc.schedule_once()
    assert svc.evaluations == 2
    parked = svc.get(never.id)
    assert parked.state is JobState.QUEUED
    assert parked.reason == "0/1 clusters are available: 1 no L4."

    for _ in range(3):  # capacity changes (heartbeats, new free GPUs) don't wake a parked job
        clock.t += 10
        store.put_summary(replace(cluster("a", 8, 8), heartbeat=clock.t))
        svc.schedule_once()
    assert svc.evaluations == 2 + 3  # only the job that may fit later was looked at again

    clock.t += 10
    store.put_summary(replace(cluster("b", 8, product="L4"), heartbeat=clock.t))  # the fleet changed
    changed = {r.id: r for r in svc.schedule_once()}
    assert (changed[never.id].state, changed[never.id].cluster) == (JobState.PLACED, "b")


def test_a_job_that_does_not_fit_now_is_not_decided_again_until_something_changes(
    store: RedisStateStore,
) -> None:
    clock = ManualClock()
    store.put_summary(cluster("a", 8))
    svc = service(store, clock, ["a"])
    svc.submit(JobRequest("big", gpus_per_pod=8, pods=2))
    svc.schedule_once()
    svc.schedule_once()
    assert svc.evaluations == 1
    store.put_summary(replace(cluster("a", 8, 8), heartbeat=clock.t))
    [placed] = svc.schedule_once()
    assert placed.state is JobState.PLACED


def fits(frees: list[int], pods: list[int]) -> bool:
    """Whether every pod (GPUs each) can sit on some node at once: exact search, small inputs."""
    pods = sorted(pods, reverse=True)

    def go(i: int, room: list[int]) -> bool:
        if i == len(pods):
            return True
        tried: set[int] = set()
        for n, free in enumerate(room):
            if free >= pods[i] and free not in tried:
                tried.add(free)
                room[n] -= pods[i]
                if go(i + 1, room):
                    return True
                room[n] += pods[i]
        return False

    return go(0, list(frees))


@pytest.mark.race
def test_four_concurrent_placers_never_over_commit(
    store: RedisStateStore, caplog: pytest.LogCaptureFixture
) -> None:
    """4 brokers' services place 160 random jobs at once, with a poller re-writing the summaries
    meanwhile; whatever interleaving happens, the live reservations fit the nodes and slices at once."""
    clock = ManualClock()
    layout = {"a": [8, 8, 6, 4, 3], "b": [8, 8, 8, 2]}
    mig_free = {"a": 9, "b": 5}
    summaries = {c: cluster(c, *f, mig_free=mig_free[c]) for c, f in layout.items()}
    for s in summaries.values():
        store.put_summary(s)
    placers = [service(store, clock, list(layout)) for _ in range(4)]
    rng = random.Random(20261201)
    for i in range(160):
        if rng.random() < 0.25:
            req = JobRequest(f"m{i}", mig_profile="1g.10gb", mig_slices_per_pod=rng.choice((1, 2)))
        else:
            req = JobRequest(f"w{i}", gpus_per_pod=rng.choice((1, 2, 3, 4, 8)), pods=rng.choice((1, 1, 2)))
        placers[i % 4].submit(req)

    stop = threading.Event()

    def poller() -> None:
        while not stop.is_set():
            for s in summaries.values():
                store.put_summary(s)  # same capacity, new version: placers must re-read and re-decide

    def place(svc: BrokerService) -> None:
        for _ in range(6):
            svc.schedule_once()

    threads = [threading.Thread(target=poller)] + [threading.Thread(target=place, args=(p,)) for p in placers]
    for t in threads:
        t.start()
    for t in threads[1:]:
        t.join()
    stop.set()
    threads[0].join()

    held: list[Reservation] = store.live_reservations(NOW)
    placed = store.list_jobs([JobState.PLACED])
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert len(held) == len(placed) > 10
    assert len({r.job_id for r in held}) == len(held)
    for c, frees in layout.items():
        pods = [
            r.units_per_pod for r in held if r.cluster == c and r.resource_name == GPU for _ in range(r.pods)
        ]
        assert fits(frees, pods), (c, frees, sorted(pods))
        slices = sum(r.units for r in held if r.cluster == c and r.resource_name == MIG)
        assert slices <= mig_free[c]
    created = [name for p in placers for name in p.gateway.created_names()]  # type: ignore[attr-defined]
    assert len(created) == len(set(created)) == len(placed)  # each placed job created once, by one placer


def test_a_cluster_seen_failing_is_lost_at_its_deadline_and_the_loop_is_told_when(
    store: RedisStateStore,
) -> None:
    clock = ManualClock()
    store.put_summary(cluster("a", 8))
    store.put_summary(cluster("b", 8))
    svc = service(store, clock, ["a", "b"])
    job, _ = svc.submit(JobRequest("train", gpus_per_pod=8, clusters=("a",)))
    svc.schedule_once()
    assert svc.get(job.id).cluster == "a"

    # the poller saw a's calls fail from NOW on (its last success): lost at NOW + 10 s, not later
    failing = replace(
        cluster("a", 8),
        health=Health.DEGRADED,
        health_reason="4 of 6 calls failed (last: connection refused)",
        published_at=NOW,
    )
    store.put_summary(failing)
    clock.t = NOW + 6
    assert svc.observe_clusters() == []
    assert svc.seconds_until_a_loss() == pytest.approx(4.0)

    # the poller still writes its verdict (nothing succeeded since NOW): lost at NOW + 10 s, not later
    store.put_summary(replace(failing, published_at=NOW + 9))
    clock.t = NOW + 10.01
    moved = svc.observe_clusters()
    assert [r.id for r in moved] == [job.id]
    assert "cluster a lost" in svc.get(job.id).reason and "connection refused" in svc.get(job.id).reason
    assert svc.seconds_until_a_loss() is None  # fenced now: nothing more to wake for


def test_a_silent_cluster_is_lost_only_while_its_own_poller_shard_still_reports(
    store: RedisStateStore, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    for name in ("a", "a2", "b"):
        store.put_summary(replace(cluster(name, 8), published_at=NOW))
    svc = service(store, clock, ["a", "a2", "b"])
    svc.shard_of = {"a": "shard-0", "a2": "shard-0", "b": "shard-1"}.__getitem__
    job, _ = svc.submit(JobRequest("train", gpus_per_pod=8, clusters=("a",)))
    svc.schedule_once()
    assert svc.get(job.id).cluster == "a"

    # every poller stalls (a loaded host, Ray stuck): silence well past 3 x clusterLostSeconds
    clock.t = NOW + 60
    with caplog.at_level(logging.WARNING, logger="broker.controller"):
        assert svc.observe_clusters() == []
        assert svc.observe_clusters() == []
    assert svc.get(job.id).state is JobState.PLACED and store.fenced() == {}
    blind = [r.getMessage() for r in caplog.records if "cannot see its clusters" in r.getMessage()]
    assert len(blind) == 1, blind  # said once per spell, not per pass

    # b's shard writes again, a's shard does not (killed, slow to restart on a loaded host): the
    # silence is the shard's, not a's, and a's job stays where it runs
    caplog.clear()
    store.put_summary(replace(cluster("b", 8), heartbeat=clock.t, published_at=clock.t))
    with caplog.at_level(logging.WARNING, logger="broker.controller"):
        assert svc.observe_clusters() == []
        clock.t += 60
        store.put_summary(replace(cluster("b", 8), heartbeat=clock.t, published_at=clock.t))
        assert svc.observe_clusters() == []
    assert svc.get(job.id).state is JobState.PLACED and store.fenced() == {}
    said = [r.getMessage() for r in caplog.records if "poller shard shard-0" in r.getMessage()]
    assert len(said) == 1 and "2 clusters" in said[0] and "a, a2" in said[0], said

    # a's shard writes a2 again, not a: a is silent on its own while its poller works, so its jobs move
    store.put_summary(replace(cluster("a2", 8), heartbeat=clock.t, published_at=clock.t))
    moved = svc.observe_clusters()
    assert [r.id for r in moved] == [job.id]
    assert "a" in store.fenced() and "a2" not in store.fenced()


def test_a_heartbeat_reaches_the_placers_cache_without_reading_the_summary(store: RedisStateStore) -> None:
    from adapters.summary_batch import beat_summaries

    clock = ManualClock()
    written = store.put_summary(replace(cluster("a", 8), published_at=NOW))
    svc = service(store, clock, ["a"])
    svc.cache.refresh()
    reads, generation = svc.cache.reads, svc.cache.generation

    assert beat_summaries(store, [("a", written.version, NOW + 30, NOW + 30)]) == [True]
    clock.t = NOW + 35  # without the heartbeat, a would have been silent for 35 s
    svc.cache.refresh()
    assert svc.cache.reads == reads  # no summary read again
    assert svc.cache.generation > generation  # but what is placeable may have changed
    assert [s.heartbeat for s in svc.cache.observed()] == [NOW + 30]
    job, _ = svc.submit(JobRequest("train", gpus_per_pod=8))
    svc.schedule_once()
    assert svc.get(job.id).cluster == "a"


def test_most_of_a_large_fleet_lost_at_once_pauses_failover_until_fewer_are_lost(
    store: RedisStateStore, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    names = [f"c{i}" for i in range(10)]
    for name in names:
        store.put_summary(cluster(name, 8))
    svc = service(store, clock, names)
    job, _ = svc.submit(JobRequest("train", gpus_per_pod=8, clusters=("c0",)))
    svc.schedule_once()
    assert svc.get(job.id).cluster == "c0"

    # six of ten members stop answering in the same minute: the broker's own view is the likelier fault
    def refused(name: str) -> ClusterSummary:
        return replace(cluster(name, 8), health=Health.UNREACHABLE, health_reason="connection refused")

    for name in names[:6]:
        store.put_summary(refused(name))
    clock.t = NOW + 11
    with caplog.at_level(logging.ERROR, logger="broker.controller"):
        assert svc.observe_clusters() == []
        assert svc.observe_clusters() == []
    assert svc.get(job.id).state is JobState.PLACED and store.fenced() == {}
    paused = [r.getMessage() for r in caplog.records if "failover paused" in r.getMessage()]
    assert len(paused) == 1 and paused[0].startswith("6 of 10 clusters lost at once"), paused

    # four come back: two of ten lost is an outage of two members, and c0's job moves
    for name in names[2:6]:
        store.put_summary(replace(cluster(name, 8), heartbeat=clock.t))
    moved = svc.observe_clusters()
    assert [r.id for r in moved] == [job.id]
    assert set(store.fenced()) == {"c0", "c1"}


def test_a_job_that_fits_only_a_fenced_cluster_is_placed_there_once_the_fence_is_lifted(
    store: RedisStateStore,
) -> None:
    clock = ManualClock()
    store.put_summary(cluster("a", 8))
    store.put_summary(cluster("b", 8, product="A100-80GB"))
    svc = service(store, clock, ["a", "b"])
    job, _ = svc.submit(JobRequest("train", gpus_per_pod=8, gpu_products=("H100-80GB",)))
    svc.schedule_once()
    assert svc.get(job.id).cluster == "a"

    # a is lost and fenced: the job is requeued, and with only b offered it can never fit (parked)
    clock.t = NOW + 11
    store.put_summary(replace(cluster("a", 8), health=Health.UNREACHABLE, health_reason="connection refused"))
    store.put_summary(replace(cluster("b", 8, product="A100-80GB"), heartbeat=clock.t))
    svc.observe_clusters()
    svc.schedule_once()
    assert svc.get(job.id).state is JobState.QUEUED and "no H100-80GB" in svc.get(job.id).reason
    assert svc.get(job.id).reason.startswith("0/2 clusters are available")  # the lost one still counted
    assert "1 unreachable" in svc.get(job.id).reason

    # a answers again and its sweep lifts the fence (seen by the next pass's observe, as in the control
    # loop): the parked job is decided again and goes back to a
    clock.t = NOW + 20
    store.put_summary(replace(cluster("a", 8), heartbeat=clock.t))
    svc.observe_clusters()
    assert store.fenced() == {}
    svc.observe_clusters()
    changed = {r.id: r for r in svc.schedule_once()}
    assert (changed[job.id].state, changed[job.id].cluster) == (JobState.PLACED, "a")


def test_jobs_that_cannot_be_read_are_logged_once_per_cluster_not_per_job_per_pass(
    store: RedisStateStore, caplog: pytest.LogCaptureFixture
) -> None:
    down = threading.Event()

    def reads(name: str, namespace: str, live: bool) -> WorkloadStatus:
        if down.is_set():
            raise ClusterUnreachable("a", "connection refused")
        return WorkloadStatus(name=name, namespace=namespace, exists=live, active=1, ready=1)

    clock = ManualClock()
    store.put_summary(cluster("a", 8, 8))
    svc = BrokerService(store, RecordingGateway(reads), clock, {"a": ClusterTraits("a")})
    for name in ("one", "two"):
        svc.submit(JobRequest(name, gpus_per_pod=8))
    svc.schedule_once()
    down.set()
    with caplog.at_level(logging.INFO, logger="broker.controller"):
        for _ in range(5):
            svc.sync_status()
        down.clear()
        svc.sync_status()
        svc.sync_status()
    said = [r.getMessage() for r in caplog.records if r.name.startswith("broker.controller")]
    assert len([m for m in said if m.startswith("cannot read")]) == 1, said  # not 2 jobs x 5 passes
    assert said.count("Jobs on a can be read again") == 1


class PublishingStore(RedisStateStore):
    """The real store; `publish` is written (as a poller would) just before the pass's next reserve."""

    publish: ClusterSummary | None = None

    def reserve_many(self, batches: Sequence[ReserveBatch], now: float) -> list[list[ReserveResult]]:
        if self.publish is not None:
            summary, self.publish = self.publish, None
            self.put_summary(summary)
        return super().reserve_many(batches, now)


def test_jobs_decided_on_a_cluster_that_moved_before_the_reserve_are_decided_again_on_what_it_is_now(
    redis_url: str,
) -> None:
    store = PublishingStore(redis_url, prefix="pass" + uuid.uuid4().hex[:8])
    try:
        clock = ManualClock()
        store.put_summary(cluster("a", 8))
        store.put_summary(cluster("b", 8))
        svc = service(store, clock, ["a", "b"])
        for i in range(4):
            svc.submit(JobRequest(f"four-{i}", gpus_per_pod=4))
        store.publish = cluster("a", 4)  # something outside the broker took half of a meanwhile

        svc.schedule_once()

        placed = store.list_jobs([JobState.PLACED])
        held = store.live_reservations(NOW)
        assert len(placed) == 3  # 4 free on a and 8 on b hold three jobs of 4, not four
        assert sum(r.units for r in held if r.cluster == "a") <= 4
        assert sum(r.units for r in held if r.cluster == "b") <= 8
        assert sorted(r.job_id for r in held) == sorted(j.id for j in placed)
        assert len(store.list_jobs([JobState.QUEUED])) == 1
    finally:
        store.close()


def test_a_pass_places_a_bounded_number_and_asks_for_the_next_pass_at_once(
    store: RedisStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scheduling, "PLACED_PER_PASS", 3)
    monkeypatch.setattr(scheduling, "RESERVE_BATCH", 2)
    clock = ManualClock()
    store.put_summary(cluster("a", 8))
    svc = service(store, clock, ["a"])
    for i in range(5):
        svc.submit(JobRequest(f"one-{i}", gpus_per_pod=1))
    svc.work.wait(0)  # the submits' wake-up, taken

    svc.schedule_once()

    assert len(store.list_jobs([JobState.PLACED])) == 3
    assert svc.work.wait(0)  # woken: the loop runs the next pass without waiting for its interval
    svc.schedule_once()
    assert len(store.list_jobs([JobState.PLACED])) == 5
    assert len(store.live_reservations(NOW)) == 5


def test_a_batch_of_reservations_is_deducted_in_the_order_it_was_decided(store: RedisStateStore) -> None:
    """Two nodes with 3 free GPUs; one batch holds 1 + 2 + 1 + 2 GPUs, decided in that order (best fit:
    it fills both nodes). Read back in creation-then-job-id order (1, 1, 2, 2: a batch is created at one
    moment), best fit could not place the last 2-GPU pod and the cache showed a node with a GPU free on a
    full cluster: a 1-GPU job was placed on it. In commit order the cluster is full."""
    clock = ManualClock()
    store.put_summary(cluster("a", 3, 3))
    state = store.cluster_states(["a"])["a"]
    decided = [("j-c", 1), ("j-x", 2), ("j-d", 1), ("j-y", 2)]  # decision order; job ids sort 1, 1, 2, 2
    batch = ReserveBatch(
        "a",
        state.summary.version,
        state.ledger,
        tuple(
            Reservation(job, 1, "a", "H100-80GB", GPU, units, NOW, NOW + 600, owner="p1")
            for job, units in decided
        ),
    )
    assert [r.status for r in store.reserve_many([batch], NOW)[0]] == [ReserveResult.RESERVED] * 4
    placer = service(store, clock, ["a"])
    job, _ = placer.submit(JobRequest("one-more", gpus_per_pod=1))
    placer.schedule_once()
    assert placer.get(job.id).state is JobState.QUEUED
    seen = placer.cache.placeable("a", NOW)
    assert seen is not None
    (product,) = seen.products
    assert not any(product.nodes_by_free[1:])  # no node with a GPU free


def test_a_hold_refused_for_another_placers_job_leaves_that_placers_reservation_counted(
    store: RedisStateStore,
) -> None:
    """Placer p2 holds job J (4 GPUs) on a one-node cluster of 8. Placer p1, which also saw J queued,
    decides J and K (4 GPUs each) in one batch: its hold of J replaces p2's reservation in p1's cache. The
    store refuses J (p2 holds it) and holds K. Dropping only p1's refused hold left p2's 4 GPUs uncounted
    in p1's cache (4 free on a full node, the next decision over-committed); the cache reads the cluster
    again instead, and sees it full."""
    store.put_summary(cluster("a", 8))
    state = store.cluster_states(["a"])["a"]

    def resv(job: str, owner: str) -> Reservation:
        return Reservation(job, 1, "a", "H100-80GB", GPU, 4, NOW, NOW + 600, owner=owner)

    assert store.reserve(resv("J", "p2"), NOW, state.summary.version, state.ledger).ok
    cache = FleetCache(store, ["a"])
    cache.refresh()
    for job in ("J", "K"):
        cache.hold(resv(job, "p1"))
    mine = cache.state("a")
    assert mine is not None
    batch = ReserveBatch("a", mine.summary.version, mine.ledger, (resv("J", "p1"), resv("K", "p1")))
    results = store.reserve_many([batch], NOW)[0]
    assert [r.ok for r in results] == [False, True]
    cache.settle("a", ["J"], results[-1].ledger)
    seen = cache.placeable("a", NOW)
    assert seen is not None
    assert not any(seen.products[0].nodes_by_free[1:])  # p2's J and p1's K fill the node
    after = cache.state("a")
    assert after is not None
    assert {(r.job_id, r.owner) for r in after.reservations} == {("J", "p2"), ("K", "p1")}
