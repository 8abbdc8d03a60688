"""Group commit of concurrent submits: the API's POST /v1/jobs hands each checked submit here, and the
submits that arrive while one write is under way go to the store together in the next one.

Why: a submit is one Redis round trip. Made on the event loop, the loop waits out every round trip and
serves one submit at a time; made on a worker thread each, the thread hand-offs cost more than the
call. Here one write is in flight at a time, on a worker thread, holding every submit that queued
meanwhile (at most `max_batch`), in one pipelined round trip (StateStore.create_jobs). Alone, a submit
is written at once; under load the batches grow with the load. Each caller gets its own answer: its
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
    def __init__(self, commit: Commit, max_batch: int = 256) -> None:
        """`commit` stores a batch and answers per submit (BrokerService.submit_many)."""
        self._commit = commit
        self._max_batch = max_batch
        self._waiting: list[tuple[Prepared, asyncio.Future[Outcome]]] = []
        self._writer: asyncio.Task[None] | None = None
        self.batches = 0  # writes made (submits / batches is the mean batch size)

    async def submit(self, prepared: Prepared) -> tuple[JobRecord, bool]:
        """Store one prepared submit (with whatever else is waiting); (record, created) or its error."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Outcome] = loop.create_future()
        self._waiting.append((prepared, answer))
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write_all())
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
