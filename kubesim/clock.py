"""The simulated clock: simulated seconds advance `speed` times faster than real ones.

One clock serves a whole simulation (every cluster in the process), so durations, provisioning delays
and timestamps agree across clusters. Tests may also step it by hand (speed=0 freezes it).
"""

from __future__ import annotations

import time


class SimClock:
    def __init__(self, speed: float = 1.0, start: float | None = None) -> None:
        self._speed = speed
        self._origin_real = time.monotonic()
        self._origin_sim = time.time() if start is None else start
        self._offset = 0.0

    @property
    def speed(self) -> float:
        return self._speed

    def now(self) -> float:
        """Simulated epoch seconds."""
        return self._origin_sim + (time.monotonic() - self._origin_real) * self._speed + self._offset

    def set_speed(self, speed: float) -> None:
        current = self.now()
        self._origin_real, self._origin_sim, self._offset, self._speed = time.monotonic(), current, 0.0, speed

    def advance(self, seconds: float) -> None:
        """Jump simulated time forward (tests, admin endpoint)."""
        self._offset += seconds

    def real_seconds(self, sim_seconds: float) -> float:
        """How long sim_seconds take in real time at the current speed (inf when frozen)."""
        return float("inf") if self._speed <= 0 else sim_seconds / self._speed
