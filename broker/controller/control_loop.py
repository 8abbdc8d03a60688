"""The broker's control loop: its steps every pass, the sweep every 30 s, in a background thread.

Each pass runs, in order: observe_clusters (health changes, failover of lost clusters' jobs, fences),
sync_status (follow placed jobs whose Job changed, each cluster on its own worker), enforce_budgets (stop
the cloud jobs of tenants whose hard budget is spent), schedule_once (place the queue),
note_reported_checkpoints (running pods' periodic checkpoints, itself at most every 30 s), burst_back (move
cloud jobs back on-prem when worth it; reads nothing unless on-prem capacity changed) and, when due,
sweep_orphans. A pass comes when the service's work queue is woken (a Job's status changed in its
cluster: the informer's callback; a job written by another replica: the change feed), else every
interval (the idle tick: health and loss deadlines), or sooner when a failing cluster's loss deadline
falls before that (observe_clusters then fails its jobs over at once). Woken passes are at least
`min_gap_seconds` apart, so a burst of events is handled in batches. Owns the cadence and the isolation of the steps (Ray Serve's control loop
shape): a step that raises is logged and counted, and the other steps of the pass still run, so a
broken sync never stops scheduling. A store that does not answer (Redis down: StoreError) is an expected
fault: one warning a minute with a count, no traceback. The one exception that ends a pass is Fenced: this replica's lease
is stale (a newer leader, or this one stopping), so nothing more it writes can land; one warning line,
no traceback per job. Stopping is prompt: the loop waits on an Event, not on sleep.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from broker.controller.service import BrokerService
from broker.core.errors import Fenced, StoreError
from broker.telemetry.log_throttle import Throttle

log = logging.getLogger(__name__)


class ControlLoop:
    def __init__(
        self,
        service: BrokerService,
        interval_seconds: float = 0.5,
        sweep_interval_seconds: float = 30.0,
        first_steps: Sequence[tuple[str, Callable[[], object]]] = (),
        min_gap_seconds: float = 0.02,
    ) -> None:
        """`first_steps` run at the start of every pass, before the service's (e.g. the store check of
        broker.ha.recovery)."""
        self._service = service
        self._first_steps = tuple(first_steps)
        self._interval = interval_seconds
        self._min_gap = min_gap_seconds
        self._sweep_interval = sweep_interval_seconds
        self._next_sweep = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.failures = 0
        self.step_failures: dict[str, int] = {}
        self._store_down = Throttle(log)  # Redis down: one warning per minute, not a traceback per pass
        self._store_failed = False  # in the pass under way

    def _step(self, name: str, fn: Callable[[], object]) -> bool:
        """Run one step; False when the pass must end here (this replica's lease is stale)."""
        try:
            fn()
        except Fenced as e:
            # Not a fault: a newer leader holds the lease (or this one is stopping). Nothing this pass
            # would write can land, so the pass ends; the elector hands the duties over.
            log.warning("control loop pass ended at %s: this replica is no longer the leader (%s)", name, e)
            return False
        except StoreError as e:
            # Expected while Redis is down or restarting: the step is retried every pass, so one warning a
            # minute with a count (no traceback: the message says what failed), and one line once it answers.
            self.failures += 1
            self.step_failures[name] = self.step_failures.get(name, 0) + 1
            self._store_down.warning(
                "store", "control loop: the store does not answer (%s: %s); retrying", name, e
            )
            self._store_failed = True
            return True
        except Exception:
            self.failures += 1
            self.step_failures[name] = self.step_failures.get(name, 0) + 1
            log.exception(
                "control loop step %s failed; the other steps go on and the next pass retries", name
            )
            return True
        return True

    def run_once(self) -> None:
        s = self._service
        steps = [*self._first_steps, ("observe_clusters", s.observe_clusters), ("sync_status", s.sync_status)]
        steps.append(("enforce_budgets", s.enforce_budgets))
        steps.append(("release_dependents", s.release_dependents))  # PENDING -> QUEUED (docs/batch.md)
        steps.append(("move_off_faulty_gpus", s.move_off_faulty_gpus))  # docs/health.md
        steps.append(("schedule_once", s.schedule_once))
        # running jobs' periodic checkpoints (docs/migration.md): at most every 30 s, off the loop's thread
        steps.append(("note_reported_checkpoints", s.note_reported_checkpoints))
        steps.append(("burst_back", s.burst_back))  # after placement: what is still free is free
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + self._sweep_interval
            steps.append(("sweep_orphans", s.sweep_orphans))
        self._store_failed = False
        for name, fn in steps:
            if not self._step(name, fn):
                break
        if not self._store_failed:
            self._store_down.recovered("store", "control loop: the store answers again")
        self.passes += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            if self._stop.wait(self._min_gap):
                break
            self._service.work.wait(self._pause())

    def _pause(self) -> float:
        """Until the next pass: the interval, or less when a failing cluster becomes lost sooner (its jobs
        are moved at that moment, not up to an interval later)."""
        until_loss = self._service.seconds_until_a_loss()
        if until_loss is None:
            return self._interval
        return min(self._interval, until_loss + 0.01)

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()  # a replica elected again after losing the lease starts it again
            self._next_sweep = 0.0  # a new leader sweeps in its first pass (a cancel's left-over Job)
            self._thread = threading.Thread(target=self._run, name="gpufed-control-loop", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._service.work.wake()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
