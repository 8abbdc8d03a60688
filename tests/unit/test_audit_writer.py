"""The audit writer: records reach every sink off the caller's thread, a sink that fails is tried again
and does not hold the others up, and flush() returns once everything queued is written."""

from __future__ import annotations

from collections.abc import Sequence

from broker import telemetry
from broker.api.audit_writer import AuditWriter
from broker.tenancy.audit import AuditRecord


def _record(i: int) -> AuditRecord:
    return AuditRecord(
        at=float(i),
        subject="ana",
        tenant="ml",
        role="user",
        verb="submit",
        object=f"job/j-{i}",
        outcome="success",
    )


class Kept:
    """A sink that keeps what it gets; it fails its first `failures` appends."""

    def __init__(self, failures: int = 0) -> None:
        self.records: list[AuditRecord] = []
        self.failures = failures

    def append(self, records: Sequence[AuditRecord]) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("disk full")
        self.records.extend(records)


def _lost(where: str) -> float:
    return telemetry.REGISTRY.get_sample_value("gpufed_audit_records_lost_total", {"where": where}) or 0.0


def test_every_sink_gets_every_record_and_a_failing_one_is_tried_again() -> None:
    lost_before = _lost("Kept")
    good, flaky, broken = Kept(), Kept(failures=1), Kept(failures=10**6)
    writer = AuditWriter([good, flaky, broken], hold_seconds=1.0)
    try:
        for i in range(50):
            writer.record(_record(i))
        assert writer.flush(timeout=10)
        writer.record(_record(50))  # the next round carries the flaky sink's held batch along
        assert writer.flush(timeout=10)
        assert [r.object for r in good.records] == [f"job/j-{i}" for i in range(51)]
        assert sorted(r.at for r in flaky.records) == [float(i) for i in range(51)]
        assert broken.records == []  # given up on, logged and counted; the others were not held up
        assert _lost("Kept") > lost_before
    finally:
        writer.close()


def test_a_full_queue_drops_and_counts_instead_of_blocking_a_request() -> None:
    writer = AuditWriter([Kept()], max_queue=1)
    try:
        for i in range(2000):
            writer.record(_record(i))
        assert writer.flush(timeout=10)
        assert writer.dropped > 0 and _lost("queue") >= writer.dropped
    finally:
        writer.close()
