"""The broker's control loop: the steps that what changed calls for, the sweep every 30 s, in a thread.

The steps, in pass order: observe_clusters (health changes, failover of lost clusters' jobs, fences),
sync_status (follow placed jobs whose Job changed, each cluster on its own worker), enforce_budgets (stop
the cloud jobs of tenants whose hard budget is spent), schedule_once (place the queue),
note_reported_checkpoints (running pods' periodic checkpoints, itself at most every 30 s), burst_back (move
cloud jobs back on-prem when worth it; reads nothing unless on-prem capacity changed) and, when due,
sweep_orphans. A pass comes when the service's work queue is woken (a Job's status changed in its
cluster: the informer's callback; a job written by another replica: the change feed), else every
interval (the idle tick: health and loss deadlines), or sooner when a failing cluster's loss deadline
falls before that (observe_clusters then fails its jobs over at once). Woken passes are at least
`min_gap_seconds` apart, so a burst of events is handled in batches.
Each step declares what wakes it (STEPS: a job, a cluster, capacity, a timer; broker.controller.
work_queue.Wake), and a pass runs only the steps that care about what woke it, plus those whose own
deadline is due (`due`): an idle tick runs the health step (the heartbeats) and nothing that reads the
jobs. observe_clusters notes CAPACITY when a summary moved and CLUSTER when a health changed, so
scheduling runs in the same pass; a step that failed runs again in the next pass whatever wakes it. A
new step is one row of STEPS. Owns the cadence and the isolation of the steps (Ray Serve's control loop
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
from dataclasses import dataclass

from broker.controller.service import BrokerService
from broker.controller.work_queue import ALL_WAKES, Wake
from broker.core.errors import Fenced, StoreError
from broker.telemetry.log_throttle import Throttle

log = logging.getLogger(__name__)

_J, _C, _N, _T = Wake.JOB, Wake.CLUSTER, Wake.CAPACITY, Wake.TIMER


@dataclass(frozen=True)
class Step:
    """One step of a pass: the service's method `name`, run when a wake in `wakes` started or was noted in
    the pass, or when the service's method `due` (if any) says the step's own deadline came."""

    name: str
    wakes: frozenset[Wake]
    due: str | None = None


# In pass order. Health runs on every tick (heartbeats, loss deadlines); what reads the jobs runs when a
# job, a cluster or the capacity changed, or when its own timer is due.
STEPS = (
    Step("observe_clusters", frozenset({_J, _C, _N, _T})),
    Step("sync_status", frozenset({_J, _C, _N}), due="status_due"),
    Step("enforce_budgets", frozenset({_J, _C, _N, _T})),  # a hard budget is spent as time passes
    Step("release_dependents", frozenset({_J}), due="dependents_due"),  # PENDING -> QUEUED (docs/batch.md)
    # jobs off GPUs a health source calls fatal (docs/health.md): a fault arrives with a summary, and a job
    # may land on a GPU that failed meanwhile; in memory only, so it runs on every tick as health does
    Step("move_off_faulty_gpus", frozenset({_J, _C, _N, _T})),
    Step("schedule_once", frozenset({_J, _C, _N}), due="queue_due"),
    # running jobs' periodic checkpoints (docs/migration.md): at most every 30 s, off the loop's thread
    Step("note_reported_checkpoints", frozenset({_T, _J})),
    Step("burst_back", frozenset({_C, _N, _T})),  # after placement: what is still free is free
)


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
        self.step_runs: dict[str, int] = {}  # how often each step ran (the wakes' routing, for tests)
        self._store_down = Throttle(log)  # Redis down: one warning per minute, not a traceback per pass
        self._store_failed = False  # in the pass under way
        self._retry: set[Wake] = set()  # the wakes of the steps that failed: the next pass runs them again

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

    def _wanted(self, step: Step, wakes: set[Wake]) -> bool:
        if wakes & step.wakes:
            return True
        due = getattr(self._service, step.due) if step.due is not None else None
        return bool(due is not None and due())

    def run_once(self, wakes: frozenset[Wake] = ALL_WAKES) -> None:
        """One pass: the steps that care about `wakes` (all of them by default: a pass run by hand)."""
        s = self._service
        woken = set(wakes) | s.work.take_noted() | self._retry
        self._retry = set()
        self._store_failed = False
        for first_name, first_fn in self._first_steps:
            if not self._step(first_name, first_fn):
                return self._ended()
        for step in STEPS:
            woken |= s.work.take_noted()  # what an earlier step of this pass found changed
            if self._wanted(step, woken):
                self.step_runs[step.name] = self.step_runs.get(step.name, 0) + 1
                failures = self.failures
                if not self._step(step.name, getattr(s, step.name)):
                    return self._ended()
                if self.failures > failures:  # it failed: the next pass runs it again, woken or not
                    self._retry |= woken & step.wakes
        if time.monotonic() >= self._next_sweep:
            self._next_sweep = time.monotonic() + self._sweep_interval
            self._step("sweep_orphans", s.sweep_orphans)
        self._ended()

    def _ended(self) -> None:
        if not self._store_failed:
            self._store_down.recovered("store", "control loop: the store answers again")
        self.passes += 1

    def _run(self) -> None:
        wakes = ALL_WAKES  # the first pass of a leader: everything
        while not self._stop.is_set():
            self.run_once(wakes)
            if self._stop.wait(self._min_gap):
                break
            wakes = self._service.work.next_wakes(self._pause())

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
