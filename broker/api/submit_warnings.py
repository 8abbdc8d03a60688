"""Warnings the submit answer carries (scheduler.never_fit): read over the fleet's summaries, kept for a
second so a burst of submits costs one summary read, not one per job."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from broker.core.model import ClusterSummary, JobEvent, JobRecord
from broker.core.ports import Clock
from broker.scheduler.never_fit import never_fit_warning

__all__ = ["SubmitWarnings"]


class SubmitWarnings:
    """with_warnings(prepared) -> the prepared (record, event) with the record's warnings set."""

    def __init__(
        self, fleet: Callable[[], Sequence[ClusterSummary]], clock: Clock, ttl_s: float = 1.0
    ) -> None:
        self._fleet, self._clock, self._ttl = fleet, clock, ttl_s
        self._at = float("-inf")
        self._summaries: Sequence[ClusterSummary] = ()

    def _current(self) -> Sequence[ClusterSummary]:
        now = self._clock.now()
        if now - self._at > self._ttl:
            self._summaries, self._at = self._fleet(), now
        return self._summaries

    def with_warnings(self, prepared: tuple[JobRecord, JobEvent]) -> tuple[JobRecord, JobEvent]:
        record, event = prepared
        warning = never_fit_warning(record.request, self._current())
        if warning is None:
            return prepared
        return replace(record, warnings=(*record.warnings, warning)), event
