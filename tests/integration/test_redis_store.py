"""RedisStateStore against a real, private redis-server: summaries, reservations, jobs, idempotency, events."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest

from adapters.redis_store import RedisStateStore, summary_args
from broker.core.errors import Conflict
from broker.core.model import (
    ClusterSummary,
    Health,
    JobEvent,
    JobRecord,
    JobRequest,
    JobState,
    MigCapacity,
    MigNeed,
    Placement,
    ProductCapacity,
    QueueHeadroom,
    Reservation,
    Tier,
)
from broker.core.ports import ReserveResult
from broker.telemetry.event_lag import EventLagTally

pytestmark = pytest.mark.integration

NOW = 1_800_000_000.0
GPU = "nvidia.com/gpu"
MIG_1G = "nvidia.com/mig-1g.10gb"


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStateStore]:
    s = RedisStateStore(redis_url, prefix="t" + uuid.uuid4().hex[:10])
    yield s
    s.close()


def summary(cluster: str = "onprem-a", free: int = 8, mig_free: int = 0) -> ClusterSummary:
    """Two H100 nodes; the histogram puts all `free` GPUs on one of them."""
    hist = tuple(1 if k == free else 0 for k in range(free + 1))
    return ClusterSummary(
        cluster=cluster,
        tier=Tier.CLOUD,
        region="eu-west",
        health=Health.HEALTHY,
        heartbeat=NOW + 0.123456789,
        products=(
            ProductCapacity(
                product="H100-80GB",
                memory_mib=81559,
                total=16,
                allocatable=16,
                allocated=16 - free,
                free=free,
                nodes_by_free=hist,
                numa_blocks=hist,
                nodes=2,
            ),
        ),
        mig=(
            MigCapacity(
                product="H100-80GB",
                profile="1g.10gb",
                resource_name=MIG_1G,
                allocatable=14,
                free=mig_free,
                largest_free_on_node=min(mig_free, 7),
            ),
        ),
        queues=(QueueHeadroom("gpu-cq", "h100", GPU, 64, 8, borrowing_limit=16, local_queues=("gpu",)),),
        price_per_gpu_hour={"H100-80GB": 2.75},
        autoscale_headroom={"H100-80GB": 32},
        nodes_total=2,
        nodes_ready=2,
        bad_nodes=1,
        labels={"zone": "a"},
    )


def resv(
    job: str, units: int, *, cluster: str = "onprem-a", resource: str = GPU, ttl: float = 60.0
) -> Reservation:
    return Reservation(
        job_id=job,
        attempt=0,
        cluster=cluster,
        product="H100-80GB",
        resource_name=resource,
        units=units,
        created_at=NOW,
        expires_at=NOW + ttl,
    )


def job(job_id: str, key: str | None = None, state: JobState = JobState.QUEUED) -> JobRecord:
    return JobRecord(
        id=job_id,
        request=JobRequest(
            name="train",
            tenant="team-a",
            command=("python", "train.py"),
            gpus_per_pod=2,
            pods=4,
            gpu_products=("H100-80GB",),
            mig_need=MigNeed(memory_gb=10),
            labels={"team": "a"},
            duration_seconds=12.5,
        ),
        state=state,
        created_at=NOW,
        updated_at=NOW,
        idempotency_key=key,
        placement=Placement("onprem-a", "H100-80GB", GPU, 2, 4, 87, {"binpack": 90}, preferred_nodes=("n1",)),
    )


# --------------------------------------------------------------------------- summaries


def test_summary_round_trips_exactly_and_its_version_bumps_on_every_write(store: RedisStateStore) -> None:
    first = store.put_summary(summary())
    second = store.put_summary(summary(free=4))

    assert (first.version, second.version) == (1, 2)
    assert store.get_summary("onprem-a") == second
    assert store.observed_summaries() == [second]
    assert store.get_summary("nowhere") is None


def test_summaries_of_several_clusters_are_listed_and_a_deleted_one_is_gone(store: RedisStateStore) -> None:
    store.put_summary(summary("b"))
    store.put_summary(summary("a"))
    store.delete_summary("b")

    assert [s.cluster for s in store.observed_summaries()] == ["a"]


def test_a_heartbeat_moves_the_heartbeat_every_reader_sees_not_the_version(store: RedisStateStore) -> None:
    from adapters.summary_batch import beat_summaries

    written = store.put_summary(replace(summary("a"), published_at=NOW + 1))
    store.put_summary(replace(summary("b"), published_at=NOW + 1))
    assert beat_summaries(
        store, [("a", written.version, NOW + 10, NOW + 11), ("b", 99, NOW + 10, NOW + 11)]
    ) == [
        True,
        False,  # not at that version: the poller writes it in full instead
    ]
    beaten = replace(written, heartbeat=NOW + 10, published_at=NOW + 11)
    assert store.get_summary("a") == beaten
    assert store.observed_summaries()[0] == beaten
    assert store.cluster_states(["a"])["a"].summary == beaten
    marks = store.cluster_marks(["a", "b", "nowhere"])
    assert marks["a"] == (written.version, 0, 2, NOW + 10, NOW + 11)  # written twice, one version
    assert set(marks) == {"a", "b"} and marks["b"].heartbeat == summary("b").heartbeat

    # a full write by an older poller (no heartbeat fields) is read as its JSON says, beat or not
    old = replace(summary("a"), published_at=NOW + 20, heartbeat=NOW + 19)
    store._put_summary(keys=store.summary_keys(old), args=summary_args(old)[:2])
    assert store.get_summary("a") == replace(old, version=written.version + 1)


def test_when_each_summary_was_written_is_read_without_the_summaries(store: RedisStateStore) -> None:
    from adapters.summary_batch import publications, put_summaries

    store.put_summary(replace(summary("a"), published_at=NOW + 1))
    put_summaries(store, [replace(summary("b"), published_at=NOW + 2, health=Health.UNKNOWN)])
    store.put_summary(replace(summary("gone"), published_at=NOW))
    store.delete_summary("gone")
    # a summary an older poller wrote (the JSON only, no fields of its own) is read in full
    old = replace(summary("old"), published_at=NOW + 3)
    store._put_summary(keys=store.summary_keys(old), args=summary_args(old)[:2])

    assert publications(store, ["a", "b", "gone", "old", "never"]) == {
        "a": (NOW + 1, Health.HEALTHY),
        "b": (NOW + 2, Health.UNKNOWN),
        "old": (NOW + 3, Health.HEALTHY),
    }
    # an older poller's write drops the fields: they never outlive the summary they describe
    a = replace(summary("a"), published_at=NOW + 5, health=Health.DEGRADED)
    store._put_summary(keys=store.summary_keys(a), args=summary_args(a)[:2])
    assert publications(store, ["a"]) == {"a": (NOW + 5, Health.DEGRADED)}


# --------------------------------------------------------------------------- reservations


def test_reserve_is_a_compare_and_set_on_the_summary_version_and_the_ledger(store: RedisStateStore) -> None:
    v1 = store.put_summary(summary(free=8)).version
    assert {c: m[:2] for c, m in store.cluster_marks(["onprem-a", "nowhere"]).items()} == {
        "onprem-a": (v1, 0)
    }

    first = store.reserve(resv("j1", 3), NOW, v1, 0)
    assert first == ReserveResult(ReserveResult.RESERVED, v1, 1)
    # a second placer that decided on the same state loses: the ledger moved
    assert store.reserve(resv("j2", 3), NOW, v1, 0) == ReserveResult(ReserveResult.STALE, v1, 1)
    # ...and after a new summary, the old version loses too
    v2 = store.put_summary(summary(free=8)).version
    assert store.reserve(resv("j2", 3), NOW, v1, 1).status == ReserveResult.STALE
    assert store.reserve(resv("j2", 3), NOW, v2, 1).ok
    assert [r.job_id for r in store.live_reservations(NOW)] == ["j1", "j2"]


@pytest.mark.race
def test_concurrent_placers_on_one_state_commit_exactly_one(store: RedisStateStore) -> None:
    version = store.put_summary(summary(free=8)).version
    results: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(12)

    def attempt(job_id: str) -> None:
        start.wait()
        outcome = store.reserve(resv(job_id, 8), NOW, version, 0)
        with lock:
            results.append(outcome.status)

    threads = [threading.Thread(target=attempt, args=(f"j{i}",)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(results) == [ReserveResult.RESERVED] + [ReserveResult.STALE] * 11
    assert len(store.live_reservations(NOW)) == 1


def test_a_reservation_belongs_to_its_placer_and_attempt(store: RedisStateStore) -> None:
    v = store.put_summary(summary(free=8)).version
    mine = replace(resv("j1", 2), attempt=1, owner="placer-a")
    theirs = replace(mine, owner="placer-b")

    assert store.reserve(mine, NOW, v, 0).ok
    # the race of the bug report: reserve(j), reserve(j), release(j) must leave the winner's hold
    assert store.reserve(theirs, NOW, v, 1).status == ReserveResult.HELD
    assert store.release("j1", 1, "placer-b") is False
    assert [r.owner for r in store.live_reservations(NOW)] == ["placer-a"]
    # a newer attempt (the job moved on) replaces the old hold; the old attempt can't release it
    newer = replace(theirs, attempt=2)
    assert store.reserve(newer, NOW, v, 1).ok
    assert store.release("j1", 1, "placer-a") is False
    assert store.confirm("j1", 2) is True
    assert store.live_reservations(NOW) == []


def test_a_cluster_without_a_summary_cannot_be_reserved(store: RedisStateStore) -> None:
    assert store.reserve(resv("j1", 1, cluster="unknown"), NOW, 1, 0).status == ReserveResult.NO_CLUSTER


def test_expired_reservations_stop_counting_and_are_pruned(store: RedisStateStore) -> None:
    v = store.put_summary(summary(free=8)).version
    assert store.reserve(resv("j1", 8, ttl=10), NOW, v, 0).ok
    [held] = store.placeable_summaries(NOW + 5)
    assert held.products[0].free == 0
    [freed] = store.placeable_summaries(NOW + 11)
    assert freed.products[0].free == 8

    assert store.prune_expired(NOW + 11) == 1
    assert store.cluster_marks(["onprem-a"])["onprem-a"][:2] == (v, 2)  # caches see the change
    assert store.live_reservations(NOW) == []


def test_moving_a_reservation_to_another_cluster_frees_the_first(store: RedisStateStore) -> None:
    va = store.put_summary(summary(free=8)).version
    vb = store.put_summary(summary("onprem-b", free=8)).version
    assert store.reserve(resv("j1", 6), NOW, va, 0).ok
    assert store.reserve(resv("j1", 8, cluster="onprem-b"), NOW, vb, 0).ok
    states = store.cluster_states(["onprem-a", "onprem-b"])
    assert states["onprem-a"].reservations == ()
    assert states["onprem-a"].ledger == 2  # bumped by the move, so caches read it again
    assert [r.job_id for r in states["onprem-b"].reservations] == ["j1"]
    assert states["onprem-b"].summary == store.get_summary("onprem-b")


def test_placeable_summaries_are_observed_minus_live_reservations(store: RedisStateStore) -> None:
    v = store.put_summary(summary(free=8, mig_free=6)).version
    assert store.reserve(resv("j1", 3), NOW, v, 0).ok
    assert store.reserve(resv("j2", 2, resource=MIG_1G), NOW, v, 1).ok

    [placeable] = store.placeable_summaries(NOW)
    h100 = placeable.product("H100-80GB")
    assert h100 is not None
    assert (h100.free, h100.allocated, h100.max_free_on_one_node) == (5, 11, 5)
    assert placeable.mig[0].free == 4
    assert placeable.mig[0].largest_free_on_node == 4
    [later] = store.placeable_summaries(NOW + 3600)
    assert later == store.get_summary("onprem-a")


# --------------------------------------------------------------------------- jobs


def test_a_job_record_round_trips_exactly(store: RedisStateStore) -> None:
    record = job("job-1", key="k-1")
    assert store.create_job(record) == record
    assert store.get_job("job-1") == record
    assert store.get_job("job-unknown") is None


def test_the_same_idempotency_key_returns_the_same_job(store: RedisStateStore) -> None:
    first = store.create_job(job("job-1", key="submit-42"))
    again = store.create_job(job("job-2", key="submit-42"))

    assert again.id == first.id == "job-1"
    assert store.get_job("job-2") is None
    assert [j.id for j in store.list_jobs()] == ["job-1"]


@pytest.mark.race
def test_concurrent_submissions_with_one_key_create_one_job(store: RedisStateStore) -> None:
    ids: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def submit(i: int) -> None:
        start.wait()
        got = store.create_job(job(f"job-{i}", key="same"))
        with lock:
            ids.append(got.id)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(set(ids)) == 1
    assert len(store.list_jobs()) == 1


def test_creating_an_existing_job_id_without_a_key_is_a_conflict(store: RedisStateStore) -> None:
    store.create_job(job("job-1"))
    with pytest.raises(Conflict):
        store.create_job(job("job-1"))


def test_a_batch_of_submits_is_stored_in_one_call_each_with_its_own_answer(store: RedisStateStore) -> None:
    store.create_job(job("job-0"))
    answers = store.create_jobs(
        [
            (job("job-1"), None),
            (job("job-0"), None),  # an id already taken: a Conflict for this one only
            (job("job-2", key="nightly"), None),
            (job("job-3", key="nightly"), None),  # the same key later in the same batch: the first job
        ]
    )

    assert [a.id if isinstance(a, JobRecord) else type(a) for a in answers] == [
        "job-1",
        Conflict,
        "job-2",
        "job-2",
    ]
    assert sorted(j.id for j in store.list_jobs()) == ["job-0", "job-1", "job-2"]
    assert store.get_job("job-1") == job("job-1")


def test_save_job_with_a_stale_expected_state_raises_conflict(store: RedisStateStore) -> None:
    record = store.create_job(job("job-1"))
    placed = store.save_job(replace(record, state=JobState.PLACED), expected_state=JobState.QUEUED)

    with pytest.raises(Conflict, match="found PLACED"):
        store.save_job(replace(record, state=JobState.CANCELLED), expected_state=JobState.QUEUED)
    assert store.get_job("job-1") == placed


def test_list_jobs_follows_state_transitions(store: RedisStateStore) -> None:
    a = store.create_job(job("a"))
    store.create_job(job("b"))
    store.save_job(replace(a, state=JobState.RUNNING), expected_state=JobState.QUEUED)

    assert [j.id for j in store.list_jobs([JobState.QUEUED])] == ["b"]
    assert [j.id for j in store.list_jobs([JobState.RUNNING, JobState.PLACED])] == ["a"]
    assert [j.id for j in store.list_jobs()] == ["a", "b"]


# --------------------------------------------------------------------------- events


def test_events_stream_in_order_per_job_and_fleet_wide(store: RedisStateStore) -> None:
    states = [JobState.QUEUED, JobState.PLACED, JobState.ADMITTED, JobState.RUNNING, JobState.SUCCEEDED]
    for i, st in enumerate(states):
        store.append_event(JobEvent("job-1", NOW + i, st, 0, reason=f"step {i}", cluster="onprem-a"))
        store.append_event(JobEvent("job-2", NOW + i, JobState.QUEUED, i))

    events = store.job_events("job-1")
    assert [e.state for e in events] == states
    assert events[1] == JobEvent("job-1", NOW + 1, JobState.PLACED, 0, reason="step 1", cluster="onprem-a")
    fleet = store.read_events(None)
    assert [e.job_id for _, e in fleet] == ["job-1", "job-2"] * 5
    first_id = store.read_events("job-1")[1][0]
    assert [e.state for _, e in store.read_events("job-1", after=first_id)] == states[2:]
    assert store.job_events("nobody") == []


def test_a_live_reader_gets_events_appended_after_it_started(store: RedisStateStore) -> None:
    store.append_event(JobEvent("job-1", NOW, JobState.QUEUED, 0))
    [(last, _)] = store.read_events("job-1")
    got: list[JobEvent] = []
    reader = threading.Thread(target=lambda: got.extend(e for _, e in store.read_events("job-1", last, 5000)))
    reader.start()
    store.append_event(JobEvent("job-1", NOW + 1, JobState.PLACED, 0))
    reader.join()

    assert [e.state for e in got] == [JobState.PLACED]


def test_event_lag_counts_added_in_batches_add_up_to_one_histogram_per_cluster(
    store: RedisStateStore,
) -> None:
    """A poller adds its counts once a pass; two passes and two clusters read back as Prometheus buckets."""
    bounds = (0.1, 0.5, 1.0)
    store.put_summary(summary("a"))
    store.put_summary(summary("b"))
    first, second = EventLagTally(bounds), EventLagTally(bounds)
    for seconds in (0.05, 0.3, 0.3, 4.0):
        first.observe("a", seconds)
    first.observe("b", 0.7)
    second.observe("a", 0.1)
    store.add_event_lags(first.drain(), bounds)
    store.add_event_lags(second.drain(), bounds)
    store.add_event_lags({}, bounds)  # an idle pass writes nothing

    lags = store.event_lags(bounds)
    a_buckets, a_sum, a_count = lags["a"]
    assert a_buckets == [(0.1, 2.0), (0.5, 4.0), (1.0, 4.0), (float("inf"), 5.0)]
    assert a_count == 5 and a_sum == pytest.approx(4.75)
    assert lags["b"][0] == [(0.1, 0.0), (0.5, 0.0), (1.0, 1.0), (float("inf"), 1.0)]
