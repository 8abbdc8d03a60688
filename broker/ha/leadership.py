"""Leader election among broker replicas: only the holder of the lease runs the control loop.

Owns the elector thread and what changes hands with the lease. Every replica serves the API. The
holder renews every leaseSeconds / 3; a follower tries to take the lease every leaseSeconds / 10, and
the lease key lives 0.9 x leaseSeconds, so a killed leader is replaced within leaseSeconds of its last
renew. The holder runs the control loop (on_elected starts it, on_deposed stops it after its current
pass). A holder that cannot reach the store for longer than the key's TTL minus one renew period steps
down by itself (its lease may have been taken); whatever it still tries to write carries its old
fencing token and is refused by the store.

When a replica becomes leader it first takes over what the previous leader left half done
(take_over): reservations of jobs that are not PLACED, ADMITTED or RUNNING at that attempt (a reserve
whose PLACED write never happened) are released, those of RUNNING jobs are released once their
cluster's summary counts the pods (as the predecessor would have), and the creates of PLACED jobs are submitted again (a create is idempotent: 409 is success),
so a leader killed between any two steps costs its successor nothing but one pass.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from prometheus_client import Gauge

from broker import telemetry
from broker.controller.service import BrokerService
from broker.core.errors import GpufedError, StoreError
from broker.core.model import JobState
from broker.core.ports import LeaderLease

log = logging.getLogger(__name__)

# The lease key lives this share of leaseSeconds (adapters.redis_lease.TTL_SHARE; a port cannot import
# an adapter, so the figure is repeated here and in the docs).
_TTL_SHARE = 0.9

is_leader = Gauge(
    "gpufed_leader",
    "1 while this replica holds the leader lease (runs the control loop)",
    registry=telemetry.REGISTRY,
    multiprocess_mode="livemax",  # the controller's value, not the API processes' 0
)
elections = Gauge(
    "gpufed_leader_token",
    "The fencing token of this replica's lease (0 while a follower)",
    registry=telemetry.REGISTRY,
    multiprocess_mode="livemax",
)


def take_over(service: BrokerService) -> tuple[int, int]:
    """Finish what a previous leader left half done. Returns (reservations released, creates resumed)."""
    store = service.store
    now = service.clock.now()
    released = 0
    service.records.rebuild()  # the new leader's job records: read once, then followed by change
    for resv in store.live_reservations(now):
        record = service.records.get(resv.job_id) or store.get_job(resv.job_id)
        if record is not None and record.attempt == resv.attempt:
            if record.state is JobState.RUNNING:
                service.adopt_settling(record)  # released once its cluster's summary counts the pods
                continue
            if record.state in (JobState.PLACED, JobState.ADMITTED):
                continue  # still wanted: the pods are not counted yet
        if store.release(resv.job_id, resv.attempt):
            released += 1
    resumed = service.resume_dispatch()
    return released, resumed


class Leadership:
    """The elector: a thread that keeps (or seeks) the lease and starts/stops the leader's duties."""

    def __init__(
        self,
        lease: LeaderLease,
        on_elected: Callable[[], None],
        on_deposed: Callable[[], None],
        renew_seconds: float | None = None,
    ) -> None:
        self._lease = lease
        self.holder = lease.holder
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self.renew_seconds = renew_seconds or max(0.05, lease.lease_seconds / 3)
        self.poll_seconds = min(self.renew_seconds, max(0.02, lease.lease_seconds * (1 - _TTL_SHARE)))
        self.token: int | None = None
        self.last_contact = float("-inf")  # monotonic time of the last answer from the store
        self.error: str | None = None
        self.elected_at: float | None = None  # epoch seconds
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def leader(self) -> bool:
        return self.token is not None

    def current_token(self) -> int | None:
        """The fencing token the leader's writes carry (None while a follower)."""
        return self.token

    def tick(self) -> None:
        """One renew (or acquire) attempt, and the role change it implies."""
        with self._lock:
            try:
                token = self._lease.acquire_or_renew()
            except StoreError as exc:
                self.error = str(exc)
                lost_for = time.monotonic() - self.last_contact
                ttl = self._lease.lease_seconds * _TTL_SHARE
                if self.token is not None and lost_for > ttl - self.renew_seconds:
                    log.warning("leader lease not renewed for %.1f s (%s): stepping down", lost_for, exc)
                    self._depose()
                return
            self.error = None
            self.last_contact = time.monotonic()
            if token is not None and self.token is None:
                self.token = token
                self.elected_at = time.time()
                is_leader.set(1)
                elections.set(token)
                log.info("%s is the leader now (fencing token %d)", self._lease.holder, token)
                try:
                    self._on_elected()
                except GpufedError:
                    log.exception("taking over the leader's duties failed; the control loop retries")
            elif token is None and self.token is not None:
                log.warning("%s lost the leader lease to another replica", self._lease.holder)
                self._depose()
            elif token is not None:
                self.token = token

    def _depose(self) -> None:
        self.token = None
        self.elected_at = None
        is_leader.set(0)
        elections.set(0)
        self._on_deposed()

    def readiness(self) -> bool:
        """For /readyz: raises with the reason while the lease cannot be kept or sought."""
        if time.monotonic() - self.last_contact > self._lease.lease_seconds:
            raise RuntimeError(f"leader lease unavailable: {self.error or 'no answer from the store yet'}")
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self.renew_seconds if self.leader else self.poll_seconds)

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="gpufed-leader-elector", daemon=True)
            self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop seeking the lease; as the leader, stop the duties (the pass in progress finishes) and,
        with release, give the lease up so a follower takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        with self._lock:
            if self.token is not None:
                self._depose()
                if release:
                    try:
                        self._lease.release()
                        log.info("leader lease released")
                    except StoreError as exc:
                        log.warning("could not release the leader lease (it expires by itself): %s", exc)
