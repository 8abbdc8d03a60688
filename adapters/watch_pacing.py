"""Pacing of the connections informers open to member clusters, so that many members do not all connect,
fail and reconnect at once (docs/benchmarks.md, "1,000 member clusters").

Owns:
    ConnectGate       at most `limit` connection set-ups in flight at once across every informer that
                      shares the gate: a list request, or the opening of a watch (TCP, TLS handshake, the
                      answer's headers); a watch that is open and streaming holds no slot. Counts the most
                      ever in flight and how many waited (tests, benchmarks)
    reconnect_delay   the jittered, capped exponential backoff before the next attempt after `failures`
                      failures in a row
    watch_timeout     the server timeoutSeconds of one watch request, spread over [base, base * (1 +
                      jitter)] so that watches started together do not all end, and re-watch, together

The two functions are pure (the random draw is an argument); the gate is an asyncio semaphore with counters.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

# Connection set-ups in flight at once across all members of one gateway. A TLS handshake costs a few
# milliseconds of CPU; 16 at once keep a 1,000-member start going without starving the process.
DEFAULT_CONNECTS = 16


def reconnect_delay(failures: int, base_s: float, max_s: float, draw: float) -> float:
    """Seconds to wait before trying again after `failures` (>= 1) failures in a row: base * 2^failures,
    capped at max_s, times a factor in [0.5, 1) from `draw` in [0, 1): members that failed together
    come back spread over half the interval."""
    delay = min(max_s, base_s * 2.0 ** min(max(failures, 1), 16))
    return delay * (0.5 + 0.5 * min(max(draw, 0.0), 1.0))


def watch_timeout(base_s: int, jitter: float, draw: float) -> int:
    """The timeoutSeconds of one watch: base_s, plus up to jitter * base_s by `draw` in [0, 1) (client-go
    spreads its watches the same way). jitter 0 gives base_s."""
    return max(1, base_s + int(base_s * max(jitter, 0.0) * min(max(draw, 0.0), 1.0)))


class ConnectGate:
    """At most `limit` connection set-ups in flight at once, among informers on one event loop
    (adapters.watch_loop: every informer of a process runs on it)."""

    def __init__(self, limit: int = DEFAULT_CONNECTS) -> None:
        if limit < 1:
            raise ValueError("a connect gate needs at least one slot")
        self.limit = limit
        self._slots = asyncio.Semaphore(limit)  # bound to the loop that first waits on it
        self.in_flight = 0
        self.most_in_flight = 0  # the high-water mark since the gate was made
        self.waited = 0  # set-ups that found every slot taken
        self.passed = 0  # set-ups that went through

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """`async with gate.slot():` the body runs holding a slot (a cancelled wait takes none)."""
        if self._slots.locked():
            self.waited += 1
        async with self._slots:
            self.in_flight += 1
            self.passed += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                yield
            finally:
                self.in_flight -= 1
