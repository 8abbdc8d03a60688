"""The batched writes of a scheduling pass on a real redis-server: reserve_many, save_jobs, release_many.

A pass decides many jobs, then reserves them with one compare-and-set per cluster and records them PLACED
in one round trip: each cluster's batch must win or lose as a whole against the state it was decided on,
each job's write must succeed or conflict on its own, and a fenced writer must write nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from adapters.redis_process import private_redis
from adapters.redis_store import RedisStateStore
from broker.core.errors import Conflict, Fenced
from broker.core.model import JobRecord, JobState
from broker.core.ports import JobWrite, ReserveBatch, ReserveResult
from tests.integration.test_redis_store import NOW, job, resv, store, summary

pytestmark = pytest.mark.integration

__all__ = ["store"]  # the fixture, shared with test_redis_store


def test_a_batch_is_held_as_a_whole_on_the_state_it_was_decided_on(store: RedisStateStore) -> None:
    va = store.put_summary(summary("onprem-a", free=8)).version
    vb = store.put_summary(summary("onprem-b", free=8)).version
    on_a = ReserveBatch("onprem-a", va, 0, (resv("j1", 2), resv("j2", 2), resv("j3", 2)))
    on_b = ReserveBatch("onprem-b", vb, 0, (resv("j4", 4, cluster="onprem-b"),))

    [a, b] = store.reserve_many([on_a, on_b], NOW)

    assert [r.status for r in a] == [ReserveResult.RESERVED] * 3
    assert {r.ledger for r in a} == {3}  # the ledger moved once per hold: caches see every one
    assert b == [ReserveResult(ReserveResult.RESERVED, vb, 1)]
    assert {c: m[:2] for c, m in store.cluster_marks(["onprem-a", "onprem-b"]).items()} == {
        "onprem-a": (va, 3),
        "onprem-b": (vb, 1),
    }
    assert sorted(r.job_id for r in store.live_reservations(NOW)) == ["j1", "j2", "j3", "j4"]


def test_a_cluster_that_moved_since_the_decision_refuses_its_whole_batch_and_only_its_own(
    store: RedisStateStore,
) -> None:
    va = store.put_summary(summary("onprem-a", free=8)).version
    vb = store.put_summary(summary("onprem-b", free=8)).version
    moved = store.put_summary(summary("onprem-a", free=2)).version  # a poller published meanwhile

    [a, b] = store.reserve_many(
        [
            ReserveBatch("onprem-a", va, 0, (resv("j1", 2), resv("j2", 2))),
            ReserveBatch("onprem-b", vb, 0, (resv("j3", 2, cluster="onprem-b"),)),
        ],
        NOW,
    )

    assert a == [ReserveResult(ReserveResult.STALE, moved, 0)] * 2
    assert [r.status for r in b] == [ReserveResult.RESERVED]
    assert [r.job_id for r in store.live_reservations(NOW)] == ["j3"]


def test_a_job_another_placer_holds_is_refused_alone_in_its_batch(store: RedisStateStore) -> None:
    v = store.put_summary(summary("onprem-a", free=8)).version
    assert store.reserve(replace(resv("j1", 2), owner="placer-b"), NOW, v, 0).ok

    [a] = store.reserve_many([ReserveBatch("onprem-a", v, 1, (resv("j1", 2), resv("j2", 2)))], NOW)

    assert [r.status for r in a] == [ReserveResult.HELD, ReserveResult.RESERVED]
    assert a[-1].ledger == 2
    assert {(r.job_id, r.owner) for r in store.live_reservations(NOW)} == {("j1", "placer-b"), ("j2", "")}


def test_each_write_of_a_batch_lands_or_conflicts_on_its_own(store: RedisStateStore) -> None:
    for i in (1, 2, 3):
        store.create_job(job(f"j{i}"))
    store.save_job(replace(job("j2"), state=JobState.CANCELLED), expected_state=JobState.QUEUED)

    out = store.save_jobs(
        [JobWrite(replace(job(f"j{i}"), state=JobState.PLACED), JobState.QUEUED) for i in (1, 2, 3)]
    )

    assert [type(o) for o in out] == [type(job("j1")), Conflict, type(job("j1"))]
    assert "found CANCELLED" in str(out[1])
    got = store.get_job("j2")
    assert got is not None and got.state is JobState.CANCELLED  # the cancel is never overwritten
    assert store.job_ids(JobState.PLACED) == {"j1", "j3"}


def test_a_fenced_writer_reserves_and_writes_nothing(redis_url: str) -> None:
    prefix = "t" + uuid.uuid4().hex[:10]
    current = RedisStateStore(redis_url, prefix, fencing_token=lambda: 2)
    stale = RedisStateStore(redis_url, prefix, fencing_token=lambda: 1)
    try:
        current.client.set(f"{prefix}:leader-token", "2")
        v = current.put_summary(summary(free=8)).version
        current.create_job(job("j1"))

        with pytest.raises(Fenced):
            stale.reserve_many([ReserveBatch("onprem-a", v, 0, (resv("j1", 2),))], NOW)
        with pytest.raises(Fenced):
            stale.save_jobs([JobWrite(replace(job("j1"), state=JobState.PLACED), JobState.QUEUED)])

        assert current.live_reservations(NOW) == []
        got = current.get_job("j1")
        assert got is not None and got.state is JobState.QUEUED
    finally:
        current.close()
        stale.close()


def test_release_many_forgets_each_jobs_hold_in_one_call(store: RedisStateStore) -> None:
    v = store.put_summary(summary(free=8)).version
    store.reserve_many([ReserveBatch("onprem-a", v, 0, (resv("j1", 2), resv("j2", 2), resv("j3", 2)))], NOW)

    # any attempt of j1, attempt 0 of j3 (held), attempt 1 of j2 (not held: kept), a job never held
    assert store.release_many([("j1", None), ("j3", 0), ("j2", 1), ("unknown", None)]) == 2

    assert [r.job_id for r in store.live_reservations(NOW)] == ["j2"]
    assert store.cluster_marks(["onprem-a"])["onprem-a"][:2] == (v, 5)


@pytest.mark.race
def test_batched_writes_land_once_each_after_redis_forgot_its_scripts() -> None:
    """A restarted or failed-over Redis holds no scripts: each batched call it answers NOSCRIPT did
    nothing, so the batch loads the script and sends just those calls again, and every write lands
    exactly once (a private redis-server: SCRIPT FLUSH would touch other tests' scripts)."""
    with private_redis() as rs:
        s = RedisStateStore(rs.url, prefix="t" + uuid.uuid4().hex[:10])
        try:
            first = [job("a1"), job("a2")]
            assert all(isinstance(r, JobRecord) for r in s.create_jobs([(r, None) for r in first]))
            s.client.script_flush()
            again = [job("b1"), job("b2"), job("a1")]  # a1 exists: its own Conflict, the others land
            answers = s.create_jobs([(r, None) for r in again])
            assert [a.id for a in answers if isinstance(a, JobRecord)] == ["b1", "b2"]
            assert isinstance(answers[2], Conflict)
            assert sorted(r.id for r in s.list_jobs()) == ["a1", "a2", "b1", "b2"]
            s.client.script_flush()
            [a] = s.reserve_many(
                [
                    ReserveBatch(
                        "onprem-a", s.put_summary(summary("onprem-a", free=8)).version, 0, (resv("b1", 2),)
                    )
                ],
                NOW,
            )
            assert [r.status for r in a] == [ReserveResult.RESERVED]
            assert [r.job_id for r in s.live_reservations(NOW)] == ["b1"]
        finally:
            s.close()
