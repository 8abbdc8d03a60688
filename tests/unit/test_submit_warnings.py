"""The submit answer's never-fit warnings (broker/intake/submit_warnings.py): the fleet is read off the event
loop, only the first submit waits for it, and a submit after the TTL is answered from the summaries
already read while the next read runs; a read that fails keeps the last summaries."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence

import pytest

from broker.core.errors import StoreError
from broker.core.model import ClusterSummary, JobEvent, JobRecord, JobRequest, JobState, ProductCapacity
from broker.intake.submit_warnings import SubmitWarnings
from tests.service_doubles import ManualClock

pytestmark = pytest.mark.anyio

SMALL = ClusterSummary(
    "c1", products=(ProductCapacity("H100-80GB", 81920, 8, 8, 0, 8, (0,) * 8 + (1,), nodes=1),)
)
LARGE = ClusterSummary(
    "c1", products=(ProductCapacity("H100-80GB", 81920, 800, 800, 0, 800, (0,) * 8 + (100,), nodes=100),)
)
BIG_JOB = JobRequest("big", gpus_per_pod=8, pods=10)  # never fits SMALL, fits LARGE


def prepared(request: JobRequest = BIG_JOB) -> tuple[JobRecord, JobEvent]:
    record = JobRecord(id="j1", request=request, state=JobState.QUEUED, created_at=0.0, updated_at=0.0)
    return record, JobEvent(job_id="j1", at=0.0, state=JobState.QUEUED, attempt=0)


class GatedFleet:
    """The fleet read: answers `summaries`, each read held until `gate` is set (a slow Redis)."""

    def __init__(self, summaries: Sequence[ClusterSummary]) -> None:
        self.summaries = summaries
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()
        self.fail = False

    def __call__(self) -> Sequence[ClusterSummary]:
        self.started.set()
        if not self.gate.wait(30):
            raise AssertionError("the test never let the read finish")
        if self.fail:
            raise StoreError("redis: connection refused")
        return self.summaries


async def warned(warnings: SubmitWarnings) -> bool:
    record, _ = await asyncio.wait_for(warnings.with_warnings(prepared()), timeout=10)
    return bool(record.warnings)


async def until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll `condition` on the event loop (the background read needs it) until true, for at most 10 s."""
    deadline = asyncio.get_running_loop().time() + 10
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.01)


async def unwarned(warnings: SubmitWarnings) -> bool:
    return not await warned(warnings)


async def test_the_first_submit_waits_for_the_first_read() -> None:
    fleet = GatedFleet([SMALL])
    warnings = SubmitWarnings(fleet, ManualClock())
    assert await warned(warnings)
    assert warnings.reads == 1


async def test_within_the_ttl_submits_share_one_read() -> None:
    fleet = GatedFleet([SMALL])
    clock = ManualClock()
    warnings = SubmitWarnings(fleet, clock, ttl_s=1.0)
    for _ in range(5):
        assert await warned(warnings)
        clock.t += 0.1
    assert warnings.reads == 1


async def test_a_submit_after_the_ttl_does_not_wait_for_the_next_read() -> None:
    fleet = GatedFleet([SMALL])
    clock = ManualClock()
    warnings = SubmitWarnings(fleet, clock, ttl_s=1.0)
    assert await warned(warnings)
    fleet.summaries = [LARGE]  # the fleet grew: the job would fit now
    fleet.gate.clear()  # and the next read is slow
    fleet.started.clear()
    clock.t += 2.0
    # answered from the summaries read before (a second stale), while the read is held
    assert await warned(warnings)
    assert await asyncio.to_thread(fleet.started.wait, 10)
    assert await warned(warnings)  # the read is still under way: no second one is started
    assert warnings.reads == 2
    fleet.gate.set()
    # the read lands: the job is no longer warned about
    await until(lambda: unwarned(warnings), "the new summaries were never used")
    assert warnings.reads == 2


async def test_a_read_that_fails_keeps_the_last_summaries_and_is_tried_after_the_ttl() -> None:
    fleet = GatedFleet([SMALL])
    clock = ManualClock()
    warnings = SubmitWarnings(fleet, clock, ttl_s=1.0)
    assert await warned(warnings)
    fleet.fail = True
    clock.t += 2.0
    assert await warned(warnings)  # starts the read that fails

    async def read_ended() -> bool:
        return not warnings.refreshing

    await until(read_ended, "the failed read never ended")
    assert await warned(warnings)  # still the last summaries, and no new read within the TTL
    assert warnings.reads == 2
    fleet.fail = False
    fleet.summaries = [LARGE]
    clock.t += 2.0
    assert await warned(warnings)  # the TTL since the failed read is over: read again
    await until(lambda: unwarned(warnings), "the read after the failure never landed")
    assert warnings.reads == 3


async def test_the_first_read_failing_is_the_submits_error() -> None:
    fleet = GatedFleet([SMALL])
    fleet.fail = True
    warnings = SubmitWarnings(fleet, ManualClock())
    with pytest.raises(StoreError):
        await warnings.with_warnings(prepared())
