"""The one state writer: every job write of the controller goes through here.

Owns the write of a job's state: the store's compare-and-set (at the state, and where asked the
attempt, the writer read), fenced by the leader's token (a store made with fencing_token refuses a
write from a replica that lost the lease: broker.core.errors.Fenced), the event it appends in the same round
trip, the transition metric and span, and the update of the leader's records (JobRecords) with what was
written. A write that conflicts (another replica cancelled, the job moved on) reads that one record again
before the Conflict goes to the caller, so the next decision is made on what the store holds.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from broker import telemetry
from broker.controller.job_records import JobRecords
from broker.core.errors import Conflict
from broker.core.model import JobEvent, JobRecord, JobState
from broker.core.ports import Clock, JobWrite, StateStore


def event_of(record: JobRecord, reason: str) -> JobEvent:
    return JobEvent(
        job_id=record.id,
        at=record.updated_at,
        state=record.state,
        attempt=record.attempt,
        reason=reason,
        cluster=record.cluster,
        trace_id=telemetry.trace_id_of(record.trace_parent),
    )


@dataclass(frozen=True)
class Transition:
    """One job's transition of a batch (StateWriter.transition_many): transition's arguments."""

    record: JobRecord
    state: JobState
    reason: str
    expected: JobState | None = None
    expected_attempt: int | None = None


class StateWriter:
    def __init__(self, store: StateStore, clock: Clock, records: JobRecords) -> None:
        self.store = store
        self.clock = clock
        self.records = records

    def transition(
        self,
        record: JobRecord,
        state: JobState,
        reason: str,
        expected: JobState | None = None,
        expected_attempt: int | None = None,
        at: float | None = None,
    ) -> JobRecord:
        """The record in `state` with `reason` (and its event), if the stored one is still `expected`
        (at `expected_attempt`); else Conflict (the record is read again)."""
        now = self.clock.now() if at is None else at
        changed = replace(record, state=state, reason=reason, updated_at=now)
        with telemetry.job_span(
            "gpufed.job.state", record.trace_parent, **{"gpufed.state": str(state), "gpufed.reason": reason}
        ):
            saved = self._write(changed, expected, event_of(changed, reason), expected_attempt)
            telemetry.transitions.labels(str(state)).inc()
        return saved

    def transition_many(self, moves: Sequence[Transition]) -> list[JobRecord | Conflict]:
        """transition for many jobs in one round trip (the scheduling pass's PLACED writes): per move, in
        order, the record as written or its Conflict (that record read again). Fenced as transition."""
        now = self.clock.now()
        started = time.time_ns()
        writes = []
        for m in moves:
            changed = replace(m.record, state=m.state, reason=m.reason, updated_at=now)
            writes.append(JobWrite(changed, m.expected, event_of(changed, m.reason), m.expected_attempt))
        out = self.store.save_jobs(writes)
        for m, result in zip(moves, out, strict=True):
            if isinstance(result, Conflict):
                self.records.reread_one(m.record.id)
                continue
            self.records.put(result)
            telemetry.transitions.labels(str(m.state)).inc()
            telemetry.job_span_done(
                "gpufed.job.state",
                m.record.trace_parent,
                started,
                **{"gpufed.state": str(m.state), "gpufed.reason": m.reason},
            )
        return out

    def save(self, record: JobRecord) -> JobRecord:
        """A change that is not a transition (a new reason): compare-and-set at the record's state."""
        return self._write(record, record.state, None, None)

    def note(self, record: JobRecord, reason: str) -> JobRecord:
        """A new reason in the same state (member trouble), with its event, in one compare-and-set at the
        record's state and attempt."""
        changed = replace(record, reason=reason, updated_at=self.clock.now())
        return self._write(changed, record.state, event_of(changed, reason), record.attempt)

    def event(self, record: JobRecord, reason: str) -> None:
        self.store.append_event(event_of(record, reason))

    def _write(
        self, record: JobRecord, expected: JobState | None, event: JobEvent | None, attempt: int | None
    ) -> JobRecord:
        try:
            saved = self.store.save_job(record, expected, event, attempt)
        except Conflict:
            self.records.reread_one(record.id)
            raise
        self.records.put(saved)
        return saved
