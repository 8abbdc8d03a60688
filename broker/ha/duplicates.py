"""Two live jobs of one Idempotency-Key after a Redis loss: keep the one running where it can stay,
else the older, and cancel the other (issue 21 case 2, issue 48 finding 7).

After Redis came back empty, a member cluster that could not be listed holds back re-sent keys the store
does not know (adapters.redis_recovery_gate) until it is listed or declared lost (fenced). A key re-sent
once its cluster was declared lost makes a new job elsewhere; when the cluster comes back, the rebuild
(broker.ha.recovery) restores the original job from its Job there, and the key then has two live
attempts. This module reconciles them as soon as the restored records are written: one is kept and the
key names it, the other is cancelled (its Job deleted like any cancel's), and both jobs' events say so.
Which one (keep_which, pure): a job that can stay where it is (placed on a cluster that is not fenced:
a restored original whose cluster still reads lost must move, a restart) before one that cannot, then a
RUNNING one before one not yet running, then the older (by submit time, then id). Keeping the older
regardless cancelled the newer job already running elsewhere and then failed the original over: the work
started twice. A key whose other job has already ended is left as it is: there is nothing left to stop.

    KeyLedger        the port: which job a key names now, and naming another
    keep_which(a, b, fenced) -> (kept, cancelled)
    DuplicateKeys    reconcile(restored records) -> [(kept id, cancelled id)]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from broker.core.errors import Conflict, NotFound, StoreError
from broker.core.model import JobEvent, JobRecord, JobState
from broker.core.ports import Clock, StateStore

log = logging.getLogger(__name__)

_PLACED = (JobState.PLACED, JobState.ADMITTED, JobState.RUNNING)


def keep_which(a: JobRecord, b: JobRecord, fenced: Collection[str]) -> tuple[JobRecord, JobRecord]:
    """(kept, cancelled) of two live jobs of one key: the one that can stay where it is placed, then the
    running one, then the older."""

    def rank(r: JobRecord) -> tuple[bool, bool, float, str]:
        stays = r.state in _PLACED and bool(r.cluster) and r.cluster not in fenced
        return (not stays, r.state is not JobState.RUNNING, r.created_at, r.id)

    kept, cancelled = sorted((a, b), key=rank)
    return kept, cancelled


class KeyLedger(Protocol):
    """The store's Idempotency-Key index (P:idem:<key>, adapters.redis_recovery_gate.IdempotencyKeys)."""

    def holders(self, keys: Sequence[str]) -> dict[str, str]:
        """The job id each key names now (keys naming none are left out)."""
        ...

    def point(self, key: str, job_id: str) -> None:
        """Make the key name this job."""
        ...


class DuplicateKeys:
    """Reconciles the restored records whose key already names another live job (module docstring)."""

    def __init__(
        self,
        store: StateStore,
        keys: KeyLedger,
        cancel: Callable[[str, str], JobRecord],
        clock: Clock,
    ) -> None:
        """`cancel(job_id, reason)`: the service's cancel (CANCELLED, then its Job deleted)."""
        self._store = store
        self._keys = keys
        self._cancel = cancel
        self._clock = clock

    def reconcile(self, restored: Sequence[JobRecord]) -> list[tuple[str, str]]:
        """`restored`: the records rebuilt from one cluster's Jobs (written now or by an earlier try)."""
        keyed = {r.idempotency_key: r for r in restored if r.idempotency_key and not r.state.terminal}
        if not keyed:
            return []
        holders = self._keys.holders(sorted(keyed))
        done: list[tuple[str, str]] = []
        for key, record in sorted(keyed.items()):
            other_id = holders.get(key)
            if other_id is None or other_id == record.id:
                continue
            other = self._store.get_job(other_id)
            mine = self._store.get_job(record.id)  # as it is now (restored just now, or earlier)
            if other is None or other.state.terminal or mine is None or mine.state.terminal:
                continue
            try:
                fenced = set(self._store.fenced())
            except StoreError:
                fenced = set()  # unknown: as if every cluster may hold its jobs (the older is kept)
            kept, dropped = keep_which(mine, other, fenced)
            if self._settle(key, kept, dropped, fenced):
                done.append((kept.id, dropped.id))
        return done

    def _settle(self, key: str, older: JobRecord, newer: JobRecord, fenced: Collection[str]) -> bool:
        """Keep `older` (the one kept, whichever was submitted first), cancel `newer` (the other)."""
        shown = key.partition("/")[2] or key  # the key as its client sent it (stored per tenant)
        self._keys.point(key, older.id)
        first, second = sorted((older, newer), key=lambda r: (r.created_at, r.id))
        lost_one = next((r for r in (first, second) if r.cluster in fenced), first)
        why = (
            f"Idempotency-Key {shown!r} made both {first.id} and {second.id} (the state store was lost while "
            f"{lost_one.cluster or 'its cluster'} could not be listed)"
        )
        which = "older" if older is first else "newer"
        if older.cluster and older.cluster not in fenced and older.state is JobState.RUNNING:
            which += f", running on {older.cluster} where it can stay,"
        try:
            cancelled = self._cancel(
                newer.id, f"cancelled as a duplicate: {why}; the {which} job {older.id} is kept"
            )
        except (Conflict, NotFound) as exc:  # it ended meanwhile: nothing left to stop
            log.info("duplicate %s of %s was not cancelled: %s", newer.id, older.id, exc)
            return False
        now = self._clock.now()
        self._store.append_event(
            JobEvent(
                older.id,
                now,
                older.state,
                older.attempt,
                f"kept: {why}; the other job {newer.id} was cancelled",
                older.cluster,
            )
        )
        log.warning("%s: kept %s, cancelled %s (%s)", why, older.id, cancelled.id, cancelled.state)
        return True
