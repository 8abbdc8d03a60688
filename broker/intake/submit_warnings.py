"""Warnings the submit answer carries (scheduler.never_fit), over the fleet's summaries as read at most
`ttl_s` (a second) before, so a burst of submits costs one fleet read a second, not one per job.

The read is made off the event loop, and only the very first submit waits for it: later, a submit
that finds the summaries older than the TTL starts a read on a worker thread and is answered with the
summaries it has. Why: the read once was the published fleet snapshot (Redis round trips and the
placeable arithmetic over every reservation), and made on the event loop it stalled every request in
flight once a second (docs/benchmarks.md, 2026-12-06, "where the two cores go"). The API now reads the
observed summaries alone (broker.cache.observed_fleet), a read again only when a summary moved; a worker
thread still holds the GIL while it parses, so the read is kept small as well as off the loop. A
never-fit warning is about what no declared cluster could hold even empty, which a second's staleness
does not change. A read that fails keeps the summaries from before and is tried again after the TTL (the
first one's error is the submit's own, as before).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from broker.core.model import ClusterSummary, JobEvent, JobRecord
from broker.core.ports import Clock
from broker.scheduler.never_fit import never_fit_warning

log = logging.getLogger(__name__)

__all__ = ["SubmitWarnings"]


class SubmitWarnings:
    """await with_warnings(prepared) -> the prepared (record, event) with the record's warnings set."""

    def __init__(
        self, fleet: Callable[[], Sequence[ClusterSummary]], clock: Clock, ttl_s: float = 1.0
    ) -> None:
        self._fleet, self._clock, self._ttl = fleet, clock, ttl_s
        self._at = float("-inf")
        self._summaries: Sequence[ClusterSummary] | None = None
        self._reading: asyncio.Task[None] | None = None
        self.reads = 0  # fleet reads made (started on a worker thread)

    @property
    def refreshing(self) -> bool:
        """Whether a read started by a submit after the TTL is under way."""
        return self._reading is not None

    async def _current(self) -> Sequence[ClusterSummary]:
        if self._summaries is None:  # nothing read yet: this submit waits for the first read
            started = self._clock.now()
            summaries = await asyncio.to_thread(self._read)
            self._summaries, self._at = summaries, started
            return summaries
        if self._clock.now() - self._at > self._ttl and self._reading is None:
            self._reading = asyncio.get_running_loop().create_task(self._refresh())
        return self._summaries

    def _read(self) -> Sequence[ClusterSummary]:
        self.reads += 1
        return self._fleet()

    async def _refresh(self) -> None:
        started = self._clock.now()
        try:
            summaries = await asyncio.to_thread(self._read)
        except Exception as e:  # Redis away: the warnings keep the summaries from before
            log.warning("submit warnings: the fleet could not be read (%s); using the last read", e)
            self._at = started
        else:
            self._summaries, self._at = summaries, started
        finally:
            self._reading = None

    async def with_warnings(self, prepared: tuple[JobRecord, JobEvent]) -> tuple[JobRecord, JobEvent]:
        record, event = prepared
        warning = never_fit_warning(record.request, await self._current())
        if warning is None:
            return prepared
        return replace(record, warnings=(*record.warnings, warning)), event
