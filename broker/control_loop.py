"""The broker's control loop: sync_status and schedule_once every pass, sweep_orphans every 30 s, in a
background thread.

Owns the cadence and the fault isolation of the loop (an exception in one pass is logged and the next
pass runs), not any decision. Stopping is prompt: the loop waits on an Event, not on sleep.
"""

from __future__ import annotations

import logging
import threading
import time

from broker.service import BrokerService

log = logging.getLogger(__name__)


class ControlLoop:
    def __init__(
        self, service: BrokerService, interval_seconds: float = 0.5, sweep_interval_seconds: float = 30.0
    ) -> None:
        self._service = service
        self._interval = interval_seconds
        self._sweep_interval = sweep_interval_seconds
        self._next_sweep = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.failures = 0

    def run_once(self) -> None:
        try:
            self._service.sync_status()
            self._service.schedule_once()
            if time.monotonic() >= self._next_sweep:
                self._next_sweep = time.monotonic() + self._sweep_interval
                self._service.sweep_orphans()
        except Exception:
            self.failures += 1
            log.exception("control loop pass failed; the next pass retries")
        self.passes += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(self._interval)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gpufed-control-loop", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
