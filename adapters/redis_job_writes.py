"""The control loop's compare-and-set writes on Redis, one at a time and batched.

Owns save_job (one job's compare-and-set write with its event), and the batched forms the scheduling
pass and status sync use so that their cost is a round trip per pass, not per job:

    reserve_many(batches, now)   per cluster, every reservation decided on one (version, ledger), in one
                                 RESERVE_MANY script each; all clusters in one pipelined round trip
    save_jobs(writes)            save_job's SAVE_JOB script per write, pipelined in one round trip
    release_many(held)           RELEASE per job, pipelined in one round trip

Each script stays atomic on its own (a batch is not a transaction: a job write that conflicts fails alone,
the others land), and each carries the writer's fencing token, so a paused ex-leader writes nothing.
RedisStateStore mixes this in (it registers the scripts and sets the keys' prefix).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import redis
from pydantic import TypeAdapter
from redis.commands.core import Script

from adapters.redis_changes import CHANGES_MAXLEN
from adapters.redis_script_batch import ScriptBatch
from adapters.redis_tables import FLEET_STREAM_MAXLEN
from broker.core.errors import Conflict, Fenced, StoreError
from broker.core.model import JobEvent, JobRecord, JobState, Reservation
from broker.core.ports import JobWrite, ReserveBatch, ReserveResult

_JOB = TypeAdapter(JobRecord)
_EVENT = TypeAdapter(JobEvent)
_RESERVATION = TypeAdapter(Reservation)
# A reservation's `commit`: (the cluster's ledger it was compared against + 1) x BATCH_SLOTS + its place in
# its batch. The compare-and-set makes each commit's ledger greater than every earlier one's, so sorting
# by it replays a cluster's reservations in the order the placers decided them, which is the order
# broker.cache.reservations.deduct must take them in: best fit in another order (by creation time and
# job id, all equal within a batch) could fail to fit a pod that fitted when decided, and then count the
# cluster freer than it is (the four-placer race test over-committed about once in 15 loaded runs).
BATCH_SLOTS = 1_000  # more than one batch ever holds (broker.controller.scheduling.RESERVE_BATCH)


def committed_at(reservation: Reservation, ledger: int, index: int) -> Reservation:
    """The reservation as stored by a compare-and-set at `ledger`, `index`-th in its batch."""
    return replace(reservation, commit=(ledger + 1) * BATCH_SLOTS + index)


def commit_order(reservation: Reservation) -> tuple[int, float, str]:
    """Sort key: commit order; those stored without one (0, an older broker's) first, by creation."""
    return (reservation.commit, reservation.created_at, reservation.job_id)


RESERVE_STATUS = {
    1: ReserveResult.RESERVED,
    0: ReserveResult.STALE,
    -1: ReserveResult.HELD,
    -2: ReserveResult.NO_CLUSTER,
}
FENCED_CODE = -3


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class JobWrites:
    """Mixed into RedisStateStore, which sets these."""

    _r: redis.Redis
    writer_id: str
    _save_job: Script
    _reserve_many: Script
    _release: Script

    def _k(self, *parts: str) -> str:
        raise NotImplementedError

    def _token_arg(self) -> str:
        raise NotImplementedError

    # ------------------------------------------------------------------ job writes

    def _save_call(self, w: JobWrite) -> tuple[list[str], list[Any]]:
        record = w.record
        keys = [
            self._k("job", record.id),
            self._k("jobs"),
            self._k("jobs", "state", ""),
            self._k("events", record.id),
            self._k("events"),
            self._k("leader-token"),
            self._k("changes"),
            self._k("finished"),  # a job that ended is indexed for the retention purge
        ]
        args = [
            record.id,
            _JOB.dump_json(record),
            record.state.value,
            w.expected_state.value if w.expected_state is not None else "",
            _EVENT.dump_json(w.event) if w.event is not None else "",
            FLEET_STREAM_MAXLEN,
            self._token_arg(),
            str(w.expected_attempt) if w.expected_attempt is not None else "",
            str(record.attempt),
            self.writer_id,
            CHANGES_MAXLEN,
        ]
        return keys, args

    @staticmethod
    def _saved(w: JobWrite, status: bytes, current: object) -> JobRecord | Conflict:
        record = w.record
        if status == b"fenced":
            raise Fenced(
                f"job {record.id}: not written, this broker's leader lease is no longer current "
                f"(current token {_text(current) or 'none'})"
            )
        if status == b"conflict":
            expected = w.expected_state.value if w.expected_state else "-"
            return Conflict(f"job {record.id}: expected state {expected}, found {_text(current) or 'absent'}")
        return record

    def save_job(
        self,
        record: JobRecord,
        expected_state: JobState | None = None,
        event: JobEvent | None = None,
        expected_attempt: int | None = None,
    ) -> JobRecord:
        """Write the record (and the event of the transition, in the same round trip); with
        expected_state (and expected_attempt), only if the stored state (and attempt) are still those
        (else Conflict, nothing written)."""
        w = JobWrite(record, expected_state, event, expected_attempt)
        keys, args = self._save_call(w)
        try:
            status, current = self._save_job(keys=keys, args=args)
        except redis.RedisError as e:
            raise StoreError(f"redis: save_job {record.id}: {e}") from e
        out = self._saved(w, status, current)
        if isinstance(out, Conflict):
            raise out
        return out

    def save_jobs(self, writes: Sequence[JobWrite]) -> list[JobRecord | Conflict]:
        """save_job for every write in one pipelined round trip: per write, its record or its Conflict;
        Fenced when the lease is no longer current (nothing after the refusal was written)."""
        if not writes:
            return []
        try:
            pipe = ScriptBatch(self._r)
            for w in writes:
                keys, args = self._save_call(w)
                pipe.call(self._save_job, keys, args)
            rows = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: save_jobs ({len(writes)} jobs): {e}") from e
        return [self._saved(w, row[0], row[1]) for w, row in zip(writes, rows, strict=True)]

    # ------------------------------------------------------------------ reservations

    def reserve_many(self, batches: Sequence[ReserveBatch], now: float) -> list[list[ReserveResult]]:
        """Every batch compared and set on its cluster, all in one pipelined round trip (see
        StateStore.reserve_many)."""
        for b in batches:
            if len(b.reservations) > BATCH_SLOTS:
                raise ValueError(f"reserve_many: at most {BATCH_SLOTS} reservations per batch on {b.cluster}")
            for r in b.reservations:
                if r.units <= 0:
                    raise ValueError(f"reservation.units: must be positive (got {r.units} for {r.job_id})")
        if not batches:
            return []
        try:
            pipe = ScriptBatch(self._r)
            for b in batches:
                owners = {r.owner for r in b.reservations}
                if len(owners) != 1:
                    raise ValueError(
                        f"reserve_many: one owner per batch (got {sorted(owners)} on {b.cluster})"
                    )
                args: list[Any] = [
                    b.cluster,
                    owners.pop(),
                    repr(float(now)),
                    str(b.version),
                    str(b.ledger),
                    self._k("resv", ""),
                    self._k("summary", ""),
                    self._token_arg(),
                ]
                for i, r in enumerate(b.reservations):
                    args += [r.job_id, r.attempt, _RESERVATION.dump_json(committed_at(r, b.ledger, i))]
                keys = [
                    self._k("summary", b.cluster),
                    self._k("resv", b.cluster),
                    self._k("resv-where"),
                    self._k("leader-token"),
                ]
                pipe.call(self._reserve_many, keys, args)
            rows = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: reserve_many ({len(batches)} clusters): {e}") from e
        out: list[list[ReserveResult]] = []
        for b, row in zip(batches, rows, strict=True):
            code, version, ledger = int(row[0]), int(row[1]), int(row[2])
            if code == FENCED_CODE:
                raise Fenced(f"reserve on {b.cluster}: this broker's leader lease is no longer current")
            if code != 1:
                out.append([ReserveResult(RESERVE_STATUS[code], version, ledger)] * len(b.reservations))
                continue
            out.append([ReserveResult(RESERVE_STATUS[int(c)], version, ledger) for c in row[3:]])
        return out

    def release_many(self, held: Sequence[tuple[str, int | None]]) -> int:
        """Forget each (job id, attempt)'s reservation (any attempt with None), in one round trip."""
        if not held:
            return 0
        try:
            pipe = ScriptBatch(self._r)
            for job_id, attempt in held:
                pipe.call(
                    self._release,
                    [self._k("resv-where")],
                    [
                        job_id,
                        "" if attempt is None else str(attempt),
                        "",
                        self._k("resv", ""),
                        self._k("summary", ""),
                    ],
                )
            rows = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: release_many ({len(held)} jobs): {e}") from e
        return sum(1 for r in rows if int(r) == 1)
