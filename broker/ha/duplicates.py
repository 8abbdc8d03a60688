"""Two live jobs of one Idempotency-Key after a Redis loss: keep the older, cancel the newer (issue 21,
case 2).

After Redis came back empty, a member cluster that could not be listed holds back re-sent keys the store
does not know (adapters.redis_recovery_gate) until it is listed or declared lost (fenced). A key re-sent
once its cluster was declared lost makes a new job elsewhere; when the cluster comes back, the rebuild
(broker.ha.recovery) restores the original job from its Job there, and the key then has two live
attempts. This module reconciles them as soon as the restored records are written: the older job (by
submit time, then id) is kept and the key names it again, the newer one is cancelled (its Job deleted
like any cancel's), and both jobs' events say so. A key whose other job has already ended is left as it
is: there is nothing left to stop.

    KeyLedger        the port: which job a key names now, and naming another
    DuplicateKeys    reconcile(restored records) -> [(kept id, cancelled id)]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from broker.core.errors import Conflict, NotFound
from broker.core.model import JobEvent, JobRecord
from broker.core.ports import Clock, StateStore

log = logging.getLogger(__name__)


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
            older, newer = sorted((mine, other), key=lambda r: (r.created_at, r.id))
            if self._settle(key, older, newer):
                done.append((older.id, newer.id))
        return done

    def _settle(self, key: str, older: JobRecord, newer: JobRecord) -> bool:
        shown = key.partition("/")[2] or key  # the key as its client sent it (stored per tenant)
        self._keys.point(key, older.id)
        why = (
            f"Idempotency-Key {shown!r} made both {older.id} and {newer.id} (the state store was lost while "
            f"{older.cluster or 'its cluster'} could not be listed)"
        )
        try:
            cancelled = self._cancel(
                newer.id, f"cancelled as a duplicate: {why}; the older job {older.id} is kept"
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
                f"kept: {why}; the newer job {newer.id} was cancelled",
                older.cluster,
            )
        )
        log.warning("%s: kept %s, cancelled %s (%s)", why, older.id, cancelled.id, cancelled.state)
        return True
