"""broker.controller.submit_batcher: concurrent submits share a write, one at a time; each caller gets its own answer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import pytest

from broker.controller.submit_batcher import Outcome, Prepared, SubmitBatcher
from broker.core.errors import Conflict, StoreError
from broker.core.model import JobEvent, JobRecord, JobRequest, JobState


def prepared(i: int) -> Prepared:
    record = JobRecord(f"j-{i}", JobRequest(f"job-{i}"))
    return record, JobEvent(record.id, 0.0, JobState.QUEUED, 0, "submitted")


class Store:
    """Records each batch; the first write waits until released, so the others queue behind it."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.release = threading.Event()

    def commit(self, batch: Sequence[Prepared]) -> list[Outcome]:
        self.release.wait(timeout=10)
        self.batches.append([r.id for r, _ in batch])
        return [Conflict(f"{r.id} exists") if r.id == "j-3" else (r, True) for r, _ in batch]


def test_submits_arriving_during_a_write_go_together_in_the_next_and_errors_stay_their_own() -> None:
    store = Store()

    async def scenario() -> list[object]:
        batcher = SubmitBatcher(store.commit)
        first = asyncio.ensure_future(batcher.submit(prepared(0)))
        await asyncio.sleep(0)  # the first write starts (and waits for the release)
        rest = [asyncio.ensure_future(batcher.submit(prepared(i))) for i in range(1, 6)]
        await asyncio.sleep(0)
        store.release.set()
        return await asyncio.gather(first, *rest, return_exceptions=True)

    answers = asyncio.run(scenario())

    assert store.batches == [["j-0"], ["j-1", "j-2", "j-3", "j-4", "j-5"]]
    assert isinstance(answers[3], Conflict)
    assert [a[0].id for a in answers if isinstance(a, tuple)] == ["j-0", "j-1", "j-2", "j-4", "j-5"]


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
