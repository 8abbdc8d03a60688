"""Getting audit records to where they are kept, off the request path.

AuditWriter     `record(r)` queues a record (never blocks a request); one daemon thread hands what is
                queued, in batches, to each sink (the Redis stream, the JSON-lines file). A sink that fails
                holds its records (at most `max_held`, the oldest dropped and counted beyond) and is tried
                again with a growing pause (0.2 s doubling to 2 s) for up to `hold_seconds` (default 60:
                a Redis Sentinel failover takes 2-3 s; issue 48 finding 6, the writer used to give up
                after three rounds, under a second), then they are counted lost; the other sinks are not
                held up. One warning when a sink fails, one line when it works again with how many held
                records it took. `flush()` waits until every queued record is written (or given up on).
EventAuditor    follows the fleet-wide job event stream and turns the broker's own acts in it (preemption,
                failover, budget stop; broker.tenancy.audit.from_job_event) into records. Every replica
                may run one: the records of a span of events are written only by the replica that moves
                the shared cursor over that span (a compare-and-set in the store), so each act is
                recorded once.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from broker import telemetry
from broker.core.model import JobEvent
from broker.tenancy.audit import AuditRecord, AuditSink, from_job_event

__all__ = ["AuditWriter", "DerivedAuditLog", "EventAuditor"]

log = logging.getLogger(__name__)

RETRY_SECONDS = 0.2  # a batch a sink refused is tried again this often (only then does the writer poll)


@dataclass
class _Held:
    """What a failing sink holds: its records, since when it fails, when to try it next."""

    records: list[AuditRecord]
    since: float
    next_try: float
    pause: float = 0.2


class AuditWriter:
    def __init__(
        self,
        sinks: Sequence[AuditSink],
        max_queue: int = 100_000,
        batch: int = 500,
        hold_seconds: float = 60.0,
        max_held: int = 100_000,
    ) -> None:
        self._sinks = list(sinks)
        # None: the wake close() sends (the writer blocks on the queue with no timeout while nothing is held)
        self._queue: queue.Queue[AuditRecord | None] = queue.Queue(maxsize=max_queue)
        self._batch, self._hold_seconds, self._max_held = batch, hold_seconds, max_held
        self._pending: dict[int, _Held] = {}  # sink index -> what it holds while it fails
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._busy = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="gpufed-audit", daemon=True)
        self._thread.start()

    def record(self, r: AuditRecord) -> None:
        with self._idle:
            try:
                self._queue.put_nowait(r)
            except queue.Full:
                full = True
            else:
                full = False
                self._busy += 1
        if full:
            self.dropped += 1
            telemetry.audit_lost.labels("queue").inc()
            log.error("audit queue full: a record of %s %s by %s was dropped", r.verb, r.object, r.subject)
        else:
            telemetry.audit_records.labels(r.outcome).inc()

    def flush(self, timeout: float = 10.0) -> bool:
        """True once every record queued before the call is handed to its sinks (or given up on): what a
        sink refused is held and tried again, for up to `hold_seconds`, before that."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0 and not self._pending, timeout=timeout)

    def close(self) -> None:
        self.flush()
        self._stop.set()
        with contextlib.suppress(queue.Full):  # a full queue wakes the writer anyway
            self._queue.put_nowait(None)
        self._thread.join(timeout=5)

    def _take(self) -> list[AuditRecord]:
        # Idle (nothing queued, no batch held for a retry) the thread sleeps until a record or close()
        # comes: no wake-up at all; a held batch is tried again every RETRY_SECONDS.
        try:
            first = self._queue.get(timeout=RETRY_SECONDS if self._pending else None)
        except queue.Empty:
            return []
        batch = [first] if first is not None else []
        while len(batch) < self._batch:
            try:
                record = self._queue.get_nowait()
            except queue.Empty:
                break
            if record is not None:
                batch.append(record)
        return batch

    def _lose(self, sink: AuditSink, records: list[AuditRecord], why: str) -> None:
        log.error("audit: %d record(s) could not be written to %s: %s", len(records), sink, why)
        telemetry.audit_lost.labels(type(sink).__name__).inc(len(records))

    def _write(self, index: int, sink: AuditSink, records: list[AuditRecord], held: _Held | None) -> None:
        try:
            sink.append(records)
        except Exception as exc:  # a sink down (Redis, a full disk) must not stop the others
            now = time.monotonic()
            if held is None:
                log.warning(
                    "audit: writing to %s failed (%s); holding the records, trying again for up to %.0f s",
                    sink,
                    exc,
                    self._hold_seconds,
                )
                self._pending[index] = _Held(list(records), now, now + 0.2)
            elif now - held.since >= self._hold_seconds:
                self._lose(sink, held.records, f"{exc} (failing for {now - held.since:.0f} s)")
                self._pending.pop(index, None)
            else:
                held.pause = min(2.0, held.pause * 2)
                held.next_try = now + held.pause
            return
        if held is not None:
            log.info(
                "audit: %s works again: %d held record(s) written after %.1f s",
                sink,
                len(records),
                time.monotonic() - held.since,
            )
        self._pending.pop(index, None)

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self._take()
            for index, sink in enumerate(self._sinks):
                held = self._pending.get(index)
                if held is None:
                    if batch:
                        self._write(index, sink, batch, None)
                    continue
                held.records.extend(batch)
                over = len(held.records) - self._max_held
                if over > 0:  # bounded: the oldest go, counted
                    self._lose(sink, held.records[:over], f"more than {self._max_held} held")
                    del held.records[:over]
                if time.monotonic() >= held.next_try:
                    self._write(index, sink, held.records, held)
            with self._idle:  # flush() waits for the queue and for held records (written or given up)
                self._busy -= len(batch)
                self._idle.notify_all()


class DerivedAuditLog(Protocol):
    def advance(self, before: str, after: str, records: Sequence[AuditRecord]) -> bool:
        """Append `records` and move the cursor from `before` to `after`, only if it is still at
        `before`; False when another replica moved it first."""
        ...

    def cursor(self, start: Callable[[], str]) -> str:
        """The cursor (set to `start()` if there is none yet)."""
        ...


class EventAuditor:
    def __init__(
        self,
        read_events: Callable[[str, int], list[tuple[str, JobEvent]]],
        tenant_of: Callable[[str], str],
        derived: DerivedAuditLog,
        start: Callable[[], str],
        also: Sequence[AuditSink] = (),
        block_ms: int = 1000,
    ) -> None:
        """`read_events(after, block_ms)`: fleet-wide events after a stream id; `tenant_of(job_id)`;
        `start()`: where a new cursor starts (the newest event now: history is not replayed)."""
        self._read, self._tenant_of, self._derived = read_events, tenant_of, derived
        self._start, self._also, self._block_ms = start, list(also), block_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpufed-audit-events", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)

    def step(self) -> int:
        """One read of the stream past the shared cursor: the number of records this replica wrote."""
        before = self._derived.cursor(self._start)
        events = self._read(before, self._block_ms)
        if not events:
            return 0
        records = [r for _, e in events if (r := from_job_event(e, self._tenant_of)) is not None]
        if not self._derived.advance(before, events[-1][0], records):
            return 0  # another replica wrote these
        if records:
            for sink in self._also:
                sink.append(records)
        return len(records)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as exc:  # Redis away: tried again, the cursor keeps the place
                log.warning("audit: following the job events failed: %s", exc)
                self._stop.wait(2.0)
