"""The leader lease as an API process sees it: read from the store, never held.

An API process (settings.apiProcesses, broker.app.api_process) serves the routes of the broker process
that started it but runs no elector. Its /v1/status names that broker process's holder as "replica" and
says "leader" while the lease in the store is that holder's; /readyz's "lease" check passes while the
store answers. Reads are cached for `cache_seconds` (a status page or a probe costs at most one GET a
second). Pure over a `holder_now` callable and a monotonic clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from broker.core.errors import StoreError


class LeaseView:
    def __init__(
        self,
        holder: str,
        holder_now: Callable[[], str | None],
        cache_seconds: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`holder`: the broker process's lease holder name (this replica); `holder_now`: the lease's
        value in the store, "<holder>|<token>" or None when free (adapters.redis_lease.holder_now)."""
        self.holder = holder
        self._holder_now = holder_now
        self._cache = cache_seconds
        self._now = monotonic
        self._read_at = float("-inf")
        self._value: str | None = None
        self._error: str | None = None
        self._lock = threading.Lock()

    def _read(self) -> None:
        with self._lock:
            if self._now() - self._read_at < self._cache:
                return
            try:
                self._value, self._error = self._holder_now(), None
            except StoreError as exc:
                self._value, self._error = None, str(exc)
            self._read_at = self._now()

    @property
    def leader(self) -> bool:
        return self.token is not None

    @property
    def token(self) -> int | None:
        """The lease's fencing token while this replica's broker process holds it, else None."""
        self._read()
        if self._value is None:
            return None
        name, _, token = self._value.rpartition("|")
        return int(token) if name == self.holder and token.isdigit() else None

    @property
    def error(self) -> str | None:
        self._read()
        return self._error

    def readiness(self) -> bool:
        """For /readyz: raises while the store cannot tell who holds the lease."""
        if self.error is not None:
            raise RuntimeError(f"leader lease unavailable: {self.error}")
        return True
