"""The leader's records catch up with the store's change stream once for a crowd: at 1,000 members a
sweep pass asks from a thousand dispatch threads at once, and each ask was a store read in turn, the
control loop's own waiting behind them. Over real Redis; the store is held inside a read to line the
crowd up."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from adapters.redis_store import RedisStateStore
from broker.controller.job_records import JobRecords
from broker.core.model import JobRecord, JobRequest, JobState

pytestmark = pytest.mark.integration

CROWD = 8


class HeldStore(RedisStateStore):
    """The real store; once `hold` is set, the next read of the change stream returns only when `go` is
    set, after it has read (so what is written meanwhile is not in its answer)."""

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__(url, prefix=prefix)
        self.hold = False
        self.holding = threading.Event()
        self.go = threading.Event()
        self.change_reads = 0

    def read_changes(
        self, after: str, block_ms: int | None = None, count: int = 10_000
    ) -> list[tuple[str, str, str]]:
        self.change_reads += 1
        rows = super().read_changes(after, block_ms, count)
        if self.hold:
            self.hold = False
            self.holding.set()
            self.go.wait(30)
        return rows


@pytest.fixture
def store(redis_url: str) -> Iterator[HeldStore]:
    s = HeldStore(redis_url, prefix="records" + uuid.uuid4().hex[:8])
    yield s
    s.close()


def _queued(name: str) -> JobRecord:
    return JobRecord(
        id=f"j{uuid.uuid4().hex[:12]}",
        request=JobRequest(name=name, gpus_per_pod=1),
        state=JobState.QUEUED,
        created_at=time.time(),
        updated_at=time.time(),
    )


def _until(check: object, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.01)


def test_catch_ups_waiting_behind_a_read_share_the_next_and_each_sees_what_was_written_before_it(
    store: HeldStore,
) -> None:
    records = JobRecords(store)
    records.ensure()  # built
    store.hold = True
    first = threading.Thread(target=records.catch_up)
    first.start()
    assert store.holding.wait(10)  # the first read is done, its answer held
    written = store.create_job(_queued("after the first read"))  # not in the first read's answer

    answers: list[set[str]] = []
    crowd = [threading.Thread(target=lambda: answers.append(records.catch_up())) for _ in range(CROWD)]
    for t in crowd:
        t.start()
    _until(lambda: records.waiting == 1 + CROWD, "the crowd waits behind the first read")
    reads_before = store.change_reads
    store.go.set()
    for t in [first, *crowd]:
        t.join(10)

    assert store.change_reads - reads_before == 1  # one read for the whole crowd, not one each
    assert len(answers) == CROWD and all(written.id in a for a in answers)
    found = records.get(written.id)
    assert found is not None and found.state is JobState.QUEUED


def test_a_catch_up_alone_reads_every_time(store: HeldStore) -> None:
    records = JobRecords(store)
    records.ensure()
    reads = store.change_reads
    for n in range(3):
        written = store.create_job(_queued(f"job {n}"))
        assert written.id in records.catch_up()
    assert store.change_reads - reads == 3
