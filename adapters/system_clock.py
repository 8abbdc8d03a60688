"""The Clock port on the host's wall clock (epoch seconds)."""

from __future__ import annotations

import time


class SystemClock:
    def now(self) -> float:
        return time.time()
