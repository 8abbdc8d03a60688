"""The leader's job records in memory: every non-terminal job, rebuilt from the store on takeover.

Owns the leader's view of the jobs it drives (QUEUED, PLACED, ADMITTED, RUNNING), so that a pass reads
no job from the store unless it changed:
    rebuild()    the change stream's newest id first, then every non-terminal record (a write between
                 the two is seen again by catch_up, never missed): at takeover, at the first pass, after
                 a rebuild of the store (broker.ha.recovery)
    catch_up()   the store's change stream since the cursor (one command when nothing changed): the
                 records written since (the API's submits and cancels, another replica, this leader's own
                 writes, which cost one pipelined read each but make the newest write always win) are
                 read again in one pipelined round trip. Callers that wait while a read runs share the
                 next one (a thousand members' sweeps and the loop read once, not once each)
    of_kinds()   the active records of a workload kind (indexed apart: status sync reads them every pass)
    checkpointing()  the active records of jobs that checkpoint (indexed apart: their reported
                 checkpoints are read every 30 s, and finding them must not walk every running job)
    version      a count that moves whenever any record is put, dropped, rebuilt or forgotten (the sweep
                 skips a cluster when neither it nor the cluster's Jobs moved since its last clean sweep)
    put(record)  a write this leader made (broker.controller.state_writer); a terminal record leaves the
                 active set and is kept, bounded, for the sweep (its Job may still be in the cluster)
Thread-safe: the loop, the dispatch threads and the informer callbacks use it at once. Service layer:
the StateStore port only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from broker.core.model import JobRecord, JobState
from broker.core.ports import StateStore

ACTIVE = (JobState.PENDING, JobState.QUEUED, JobState.PLACED, JobState.ADMITTED, JobState.RUNNING)
PLACED_STATES = (JobState.PLACED, JobState.ADMITTED, JobState.RUNNING)
# Terminal records kept for the sweep's verdicts (a finished job's Job may linger in its cluster); one
# not kept is judged on the store's record. About 4 KiB each: 50,000 held 200 MiB (issue 48 finding 3).
_DONE_KEPT = 5_000


class JobRecords:
    def __init__(self, store: StateStore) -> None:
        self._store = store
        self._lock = threading.RLock()
        self._reading = threading.Lock()  # one rebuild or catch-up at a time (an older read never wins)
        self._active: dict[str, JobRecord] = {}
        self._by_state: dict[JobState, dict[str, JobRecord]] = {s: {} for s in ACTIVE}
        self._done: OrderedDict[str, JobRecord] = OrderedDict()
        # the active records of a workload kind (JobSet, ...): no informer follows those, so status sync
        # reads each every pass; kept apart so that finding them costs nothing when there are none
        self._kinds: dict[str, JobRecord] = {}
        # the active records of jobs that checkpoint (request.checkpoint_grace_seconds set): the loop
        # reads their reported checkpoints every 30 s (broker.controller.migrating)
        self._checkpointing: dict[str, JobRecord] = {}
        self.built = False
        self.version = 0  # moves on every change of what the records say; never goes back
        self.cursor = "0-0"
        self.rebuilds = 0
        self.reread = 0  # records read again because they were written (or a write conflicted)
        self.reads = 0  # store reads begun by rebuild or catch_up (a catch-up answered by another's: none)
        self.waiting = 0  # catch_up calls waiting for a read in progress to end
        self._last_ids: set[str] = set()

    def invalidate(self) -> None:
        """Forget everything: the next ensure() rebuilds (leadership lost, the store rebuilt)."""
        with self._lock:
            self.built = False
            self.version += 1
            self._active.clear()
            self._kinds.clear()
            self._checkpointing.clear()
            self._done.clear()
            for index in self._by_state.values():
                index.clear()

    def ensure(self) -> set[str]:
        """Build when not built, else catch up. Returns the ids changed by others (all, after a build)."""
        if not self.built:
            self.rebuild()
            with self._lock:
                return set(self._active)
        return self.catch_up()

    def rebuild(self) -> None:
        with self._reading:
            self.reads += 1
            self._rebuild()

    def _rebuild(self) -> None:
        cursor = self._store.last_change_id()
        records = self._store.list_jobs(list(ACTIVE))
        with self._lock:
            self._active = {}
            self._kinds = {}
            self._checkpointing = {}
            for index in self._by_state.values():
                index.clear()
            for record in records:
                self._put(record)
            self._done.clear()
            self.cursor = cursor
            self._last_ids = set(self._active)
            self.built = True
            self.version += 1
            self.rebuilds += 1

    def catch_up(self) -> set[str]:
        """Every change written before this call is in the records when it returns. A call that finds a
        read in progress waits for it, and then for the next read, which began after this call did, so
        covers it: the first waiter makes that read and the others take its answer."""
        with self._lock:
            asked_after = self.reads
            self.waiting += 1
        try:
            with self._reading:
                if self.reads > asked_after:  # a read began after this call and has ended (we hold the lock)
                    return set(self._last_ids)
                self.reads += 1
                self._last_ids = self._catch_up()
                return set(self._last_ids)
        finally:
            with self._lock:
                self.waiting -= 1

    def _catch_up(self) -> set[str]:
        changes = self._store.read_changes(self.cursor)
        if not changes:
            return set()
        ids = sorted({job for _, job, _writer in changes})
        fresh = self._store.get_jobs(ids)
        with self._lock:
            for job_id in ids:
                record = fresh.get(job_id)
                if record is None:
                    self._drop(job_id)
                else:
                    self._put(record)
            self.cursor = changes[-1][0]
            self.reread += len(ids)
        return set(ids)

    def reread_one(self, job_id: str) -> JobRecord | None:
        """Read one record again (a compare-and-set found it moved on)."""
        record = self._store.get_job(job_id)
        with self._lock:
            self.reread += 1
            if record is None:
                self._drop(job_id)
            elif self.built:
                self._put(record)
        return record

    def put(self, record: JobRecord) -> None:
        """A record as this leader wrote it (ignored until built: the API's service never builds)."""
        with self._lock:
            if self.built:
                self._put(record)

    def _drop(self, job_id: str) -> None:
        self.version += 1
        old = self._active.pop(job_id, None)
        if old is not None:
            self._by_state[old.state].pop(job_id, None)
            self._kinds.pop(job_id, None)
            self._checkpointing.pop(job_id, None)

    def _put(self, record: JobRecord) -> None:
        self._drop(record.id)
        if record.state.terminal:
            self._done[record.id] = record
            self._done.move_to_end(record.id)
            while len(self._done) > _DONE_KEPT:
                self._done.popitem(last=False)
        else:
            self._active[record.id] = record
            self._by_state[record.state][record.id] = record
            if record.request.workload is not None:
                self._kinds[record.id] = record
            if record.request.checkpoint_grace_seconds is not None:
                self._checkpointing[record.id] = record
            self._done.pop(record.id, None)

    def get(self, job_id: str) -> JobRecord | None:
        with self._lock:
            return self._active.get(job_id) or self._done.get(job_id)

    def in_states(self, states: Iterable[JobState], ordered: bool = True) -> list[JobRecord]:
        """The active records in these states, oldest first (as the store's list_jobs) when ordered."""
        with self._lock:
            found = [r for s in set(states) if s in self._by_state for r in self._by_state[s].values()]
        return sorted(found, key=lambda r: (r.created_at, r.id)) if ordered else found

    def of_kinds(self, states: Iterable[JobState]) -> list[JobRecord]:
        """The active records of a workload kind (request.workload set) in these states, in no order: as
        many as there are such jobs, whatever the number of batch/v1 Jobs held."""
        wanted = set(states)
        with self._lock:
            return [r for r in self._kinds.values() if r.state in wanted]

    def checkpointing(self, states: Iterable[JobState]) -> list[JobRecord]:
        """The active records of jobs that checkpoint in these states, in no order: as many as there are
        such jobs, whatever the number of other jobs held."""
        wanted = set(states)
        with self._lock:
            return [r for r in self._checkpointing.values() if r.state in wanted]

    def count(self, state: JobState) -> int:
        with self._lock:
            return len(self._by_state.get(state, ()))

    def ids_in(self, state: JobState) -> set[str]:
        with self._lock:
            return set(self._by_state.get(state, ()))

    def __len__(self) -> int:
        with self._lock:
            return len(self._active)
