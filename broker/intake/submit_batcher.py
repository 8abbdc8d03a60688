"""Group commit of concurrent submits: the API's POST /v1/jobs hands each checked submit here, and the
submits that arrive while one write is under way go to the store together in the next one.

Why: a submit is one Redis round trip. Made on the event loop, the loop waits out every round trip and
serves one submit at a time; made on a worker thread each, the thread hand-offs cost more than the
call. Here at most `writers` (two) writes are in flight at a time, each on a worker thread, each holding
every submit that queued meanwhile (at most `max_batch`), in one pipelined round trip
(StateStore.create_jobs). Alone, a submit is written at once; under load the batches grow with the load.
Two, not one: on a busy machine a write's time is mostly waiting (for Redis to be scheduled, for the
worker thread to get the GIL back), and with one in flight every submit waited out the whole write
before its own; a second overlaps that wait (docs/benchmarks.md, "Submits with two writes in flight").
Two concurrent writes are as safe as one: each job's create is atomic on its own (its Idempotency-Key
and name checked in the same script), and submits in flight together have no order between them. Each caller gets its own answer: its
record, or the error its job met (a Conflict, a StoreError) raised in its own request only.

Owns no state beyond the queue of waiting submits: nothing is accepted until the store has it, so a
crash loses only submits whose callers have not been answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from broker.core.errors import Conflict, StoreError
from broker.core.model import JobEvent, JobRecord

Prepared = tuple[JobRecord, JobEvent]
Outcome = tuple[JobRecord, bool] | StoreError | Conflict
Commit = Callable[[Sequence[Prepared]], list[Outcome]]

__all__ = ["SubmitBatcher"]


class SubmitBatcher:
    def __init__(self, commit: Commit, max_batch: int = 256, writers: int = 2) -> None:
        """`commit` stores a batch and answers per submit (BrokerService.submit_many)."""
        self._commit = commit
        self._max_batch = max_batch
        self._writers_max = writers
        self._waiting: list[tuple[Prepared, asyncio.Future[Outcome]]] = []
        self._writers: set[asyncio.Task[None]] = set()
        self.batches = 0  # writes made (submits / batches is the mean batch size)

    async def submit(self, prepared: Prepared) -> tuple[JobRecord, bool]:
        """Store one prepared submit (with whatever else is waiting); (record, created) or its error."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Outcome] = loop.create_future()
        self._waiting.append((prepared, answer))
        if len(self._writers) < self._writers_max:
            writer = loop.create_task(self._write_all())
            self._writers.add(writer)
            writer.add_done_callback(self._writers.discard)
        outcome = await answer
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def _write_all(self) -> None:
        while self._waiting:
            batch = self._waiting[: self._max_batch]
            del self._waiting[: self._max_batch]
            try:
                outcomes = await asyncio.to_thread(self._commit, [p for p, _ in batch])
            except Exception as e:  # a fault: every caller of the batch gets it, as a direct call would
                for _, answer in batch:
                    if not answer.done():
                        answer.set_exception(e)
                continue
            finally:
                self.batches += 1
            for (_, answer), outcome in zip(batch, outcomes, strict=True):
                if not answer.done():  # its caller may have gone (client disconnected)
                    answer.set_result(outcome)
