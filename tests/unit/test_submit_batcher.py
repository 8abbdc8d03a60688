"""broker.intake.submit_batcher: concurrent submits share a write, one at a time; each caller gets its own answer."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import pytest

from broker.core.errors import Conflict, StoreError
from broker.core.model import JobEvent, JobRecord, JobRequest, JobState
from broker.intake.submit_batcher import Outcome, Prepared, SubmitBatcher


def prepared(i: int) -> Prepared:
    record = JobRecord(f"j-{i}", JobRequest(f"job-{i}"))
    return record, JobEvent(record.id, 0.0, JobState.QUEUED, 0, "submitted")


class Store:
    """Records each batch and how many writes were in flight at once; every write waits until
    released, so the submits that arrive meanwhile queue behind the writes in flight."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.release = threading.Event()
        self._lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0

    def commit(self, batch: Sequence[Prepared]) -> list[Outcome]:
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.release.wait(timeout=10)
        with self._lock:
            self.in_flight -= 1
            self.batches.append([r.id for r, _ in batch])
        return [Conflict(f"{r.id} exists") if r.id == "j-3" else (r, True) for r, _ in batch]


async def in_flight(store: Store, count: int) -> None:
    """Until `count` writes are in the store's commit (a deadline, not a guess at a delay)."""
    deadline = time.monotonic() + 10
    while store.in_flight < count:
        assert time.monotonic() < deadline, f"{count} writes never got under way"
        await asyncio.sleep(0.001)


def test_submits_arriving_during_two_writes_go_together_in_the_next_and_errors_stay_their_own() -> None:
    store = Store()

    async def scenario() -> list[object]:
        batcher = SubmitBatcher(store.commit, writers=2)
        first = []
        for i in range(2):  # two writes start, one submit each (and wait for the release)
            first.append(asyncio.ensure_future(batcher.submit(prepared(i))))
            await in_flight(store, i + 1)
        rest = [asyncio.ensure_future(batcher.submit(prepared(i))) for i in range(2, 7)]
        await asyncio.sleep(0)
        store.release.set()
        return await asyncio.gather(*first, *rest, return_exceptions=True)

    answers = asyncio.run(scenario())

    assert store.most_in_flight == 2  # never a third write while two are in flight
    assert sorted(store.batches) == [["j-0"], ["j-1"], ["j-2", "j-3", "j-4", "j-5", "j-6"]]
    assert isinstance(answers[3], Conflict)
    assert [a[0].id for a in answers if isinstance(a, tuple)] == ["j-0", "j-1", "j-2", "j-4", "j-5", "j-6"]


def test_with_one_writer_a_write_holds_every_submit_that_came_during_the_one_before() -> None:
    store = Store()

    async def scenario() -> None:
        batcher = SubmitBatcher(store.commit, writers=1)
        first = asyncio.ensure_future(batcher.submit(prepared(0)))
        await in_flight(store, 1)
        rest = [asyncio.ensure_future(batcher.submit(prepared(i))) for i in range(1, 4)]
        await asyncio.sleep(0)
        store.release.set()
        await asyncio.gather(first, *rest, return_exceptions=True)

    asyncio.run(scenario())
    assert store.batches == [["j-0"], ["j-1", "j-2", "j-3"]]
    assert store.most_in_flight == 1


def test_a_failed_write_fails_every_submit_it_held_and_the_next_write_goes_on() -> None:
    calls = 0

    def commit(batch: Sequence[Prepared]) -> list[Outcome]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise StoreError("redis: connection refused")
        return [(r, True) for r, _ in batch]

    async def scenario() -> tuple[BaseException | None, tuple[JobRecord, bool]]:
        batcher = SubmitBatcher(commit)
        with pytest.raises(StoreError, match="refused") as failed:
            await batcher.submit(prepared(0))
        return failed.value, await batcher.submit(prepared(1))

    _, (record, created) = asyncio.run(scenario())
    assert (record.id, created) == ("j-1", True)
