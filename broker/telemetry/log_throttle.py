"""One log line per cause per interval while a dependency is down, with a count, never a flood.

A fault the code expects (Redis not answering, a member cluster refusing connections) is retried many
times a second by many threads; logging each attempt wrote thousands of tracebacks a minute. A
Throttle says the first occurrence of a cause at once (a warning, without a traceback: the message
says what failed), then at most one line per `interval_s` for it, carrying how many occurrences it
stood for; `recovered(cause)` says once that the cause is gone.

    Throttle(logger, interval_s=60)   .warning(cause, msg, *args)  .recovered(cause, msg, *args)
                                      .suppressed(cause): occurrences not logged since the last line
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

INTERVAL_SECONDS = 60.0


class Throttle:
    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float = INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._interval = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}  # cause -> when a line was last written
        self._count: dict[str, int] = {}  # cause -> occurrences since then
        self.occurrences: dict[str, int] = {}  # cause -> every occurrence (for tests and metrics)

    def warning(self, cause: str, msg: str, *args: object) -> bool:
        """Note one occurrence of `cause`; log it when it is the first, or the interval has passed.
        Returns whether a line was written."""
        now = self._clock()
        with self._lock:
            self.occurrences[cause] = self.occurrences.get(cause, 0) + 1
            last = self._last.get(cause)
            if last is not None and now - last < self._interval:
                self._count[cause] = self._count.get(cause, 0) + 1
                return False
            more = self._count.pop(cause, 0)
            self._last[cause] = now
        suffix = (
            f" ({more} more like this in the last {now - last:.0f} s)" if last is not None and more else ""
        )
        self._log.warning(msg + suffix, *args)
        return True

    def recovered(self, cause: str, msg: str, *args: object) -> None:
        """`cause` is gone: say so once (with the count not yet told), if it was ever logged."""
        with self._lock:
            if self._last.pop(cause, None) is None:
                return
            more = self._count.pop(cause, 0)
        self._log.info(msg + (f" ({more} more failures since the last warning)" if more else ""), *args)

    def suppressed(self, cause: str) -> int:
        with self._lock:
            return self._count.get(cause, 0)
