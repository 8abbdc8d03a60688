"""StateStore on Redis: cluster summaries, reservations, jobs, idempotency keys and event streams.

Owns every Redis key the broker writes but the burst ledger's (P:burst:*, P:spend:*; adapters/redis_burst.py).
All keys start with the prefix (default "gpufed"), written P:

    P:summary:<cluster>      hash  json = ClusterSummary (JSON), version = int bumped on every write,
                                   ledger = int bumped on every change of the cluster's reservations
    P:clusters               set   clusters that have a summary
    P:lag:<cluster>          hash  event-to-Redis histogram of the pollers' summary writes: "le:<bound>" ->
                                   cumulative count, "sum", "count" (read by /metrics)
    P:nodes:<cluster>        hash  json = tuple[NodeDetail] (JSON), at = epoch seconds written; the per-node
                                   table of the fleet view (`?nodes=true`), written by the pollers at a
                                   slow cadence (NODES_INTERVAL_SECONDS in ray_actors), never read to place
    P:resv:<cluster>         hash  job_id -> Reservation (JSON)
    P:resv-where             hash  job_id -> cluster of its reservation
    P:job:<id>               hash  json = JobRecord (JSON), state = JobState (for the compare-and-set)
    P:jobs                   set   every job id
    P:jobs:state:<STATE>     set   job ids by state (the index list_jobs reads)
    P:jobs:order[:tenant:<t>] zset  jobs in submission order, for paged lists (adapters/redis_job_list.py)
    P:idem:<key>             str   idempotency key -> job id (SET NX semantics, inside the create script),
                                   expiring idempotencyKeyTtlSeconds after the submit
    P:finished               zset  job ids by when they ended (Redis's clock), for the retention purge;
    P:gone:<id>              str   "<tenant> <epoch>" of a finished job purged (adapters.redis_retention)
    P:name:<tenant>:<name>   str   the job id holding a name (one live job per tenant and name)
    P:events:<job_id>        stream  one entry per JobEvent, field "e" = JobEvent (JSON)
    P:events                 stream  the fleet-wide stream of all JobEvents (capped, approximate MAXLEN)
    P:attempt-logs:<id>      hash    ended attempts' log tails (adapters.redis_attempt_logs)
    P:changes                stream  one entry per job write: j = job id, w = the writing store's id
                                   (capped; adapters.redis_changes: how the leader's job cache follows)
    P:fenced                 hash  cluster -> why it is fenced (lost; offered again once its stale attempts are swept)
    P:cluster-events:<c>     stream  ClusterEvents of one cluster (health changes, fences), capped
    P:leader                 str   "<holder>|<token>" of the leader lease, with a TTL (adapters.redis_lease)
    P:leader-token           str   the fencing token: INCR'd by every new lease holder
    P:run-id                 str   marker written once the store holds the federation's records; its
                                   absence means Redis came back empty (broker.ha.recovery rebuilds)
    P:recovery               str   JSON report of the last rebuild after a Redis loss

The run marker, the event streams, the node tables and the lag histograms are read and written by
adapters.redis_tables (mixed in); the change stream by adapters.redis_changes; the scripts' text is in
adapters.redis_scripts.

Atomicity: put_summary, reserve, release, create_job and save_job are Lua scripts. reserve is a
compare-and-set: it succeeds only while the cluster's summary version and reservation ledger are the ones
the placer decided on (broker.cache.reservations.deduct over exactly that state), so no interleaving of any
number of placers (threads, processes, replicas) over-commits a node or NUMA domain; and a reservation is
owned by the placer and attempt that made it: another placer's reserve of the same job is refused while
it lives, and release only removes the caller's own. create_job never creates two jobs for one
idempotency key and writes the job and its "submitted" event in one round trip; save_job never loses a
state transition. Dataclasses are (de)serialised with pydantic TypeAdapters; they round-trip exactly.
Redis failures surface as broker.core.errors.StoreError; lost races as broker.core.errors.Conflict.

Fencing: a store made with `fencing_token` (the leader's control loop) sends its lease token with every
save_job, reserve, fence and unfence; the script refuses (broker.core.errors.Fenced, nothing written) unless
the token is still the current one in P:leader-token, so a paused ex-leader cannot write. A store made
with `require_marker` (a production broker) refuses create_job while P:run-id is absent (Redis came
back empty and the records are not rebuilt yet: broker.core.errors.Recovering), so a retried idempotency key
can never create a second job.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import redis
from pydantic import TypeAdapter

from adapters import redis_connect, redis_recovery_gate
from adapters import redis_scripts as scripts
from adapters.redis_attempt_logs import AttemptLogs
from adapters.redis_changes import CHANGES_MAXLEN, JobChanges
from adapters.redis_job_list import RedisJobList, order_keys
from adapters.redis_job_writes import FENCED_CODE, RESERVE_STATUS, JobWrites, commit_order, committed_at
from adapters.redis_retention import Retention
from adapters.redis_script_batch import ScriptBatch, call_in_chunks
from adapters.redis_tables import FLEET_STREAM_MAXLEN, SideTables
from broker.cache import reservations
from broker.core.errors import AlreadyExists, Conflict, Fenced, Recovering, StoreError
from broker.core.job_list import JobDocPage, JobPage, JobQuery, KeptItems, position_of
from broker.core.model import (
    ClusterSummary,
    JobEvent,
    JobRecord,
    JobState,
    Reservation,
)
from broker.core.ports import ClusterState, ReserveResult, SummaryMarks

WHOLE_GPU = "nvidia.com/gpu"
_FLEET_STREAM_MAXLEN = FLEET_STREAM_MAXLEN
SOCKET_TIMEOUT_SECONDS = 15.0  # longer than any blocking read (read_events block_ms) the broker issues
CONNECT_TIMEOUT_SECONDS = 2.0

_SUMMARY = TypeAdapter(ClusterSummary)
# Clusters per SUMMARY_MARKS call: a script blocks Redis while it runs (under a millisecond for 128 here).
MARKS_CHUNK = 128
_RESERVATION = TypeAdapter(Reservation)
_JOB = TypeAdapter(JobRecord)
_EVENT = TypeAdapter(JobEvent)


def summary_args(summary: ClusterSummary) -> list[str | bytes]:
    """The PUT_SUMMARY script's arguments for this summary (docs in adapters.redis_scripts)."""
    return [
        summary.cluster,
        _SUMMARY.dump_json(summary),
        repr(summary.published_at),
        summary.health.value,
        repr(summary.heartbeat),
    ]


# What a summary is read from: its JSON, version, and the heartbeat fields a heartbeat moves on its own.
_SUMMARY_READ = ["json", "version", "heartbeat", "published"]


def _summary_of(raw: bytes | str, version: Any, heartbeat: Any, published: Any) -> ClusterSummary:
    """A stored summary as read: its JSON, at its version, with the latest heartbeat (BEAT_SUMMARY
    writes only those fields; a summary without them, from an older poller, goes by its JSON)."""
    summary = _SUMMARY.validate_json(raw)
    if heartbeat is None or published is None:
        return dataclasses.replace(summary, version=int(version or 0))
    return dataclasses.replace(
        summary, version=int(version or 0), heartbeat=float(heartbeat), published_at=float(published)
    )


def _text(value: object) -> str:
    """A Redis reply (bytes here; str if a caller's client decodes) as text."""
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


class RedisStateStore(JobWrites, JobChanges, SideTables, AttemptLogs, Retention):
    """broker.core.ports.StateStore on Redis (see the module docstring for the key schema)."""

    def __init__(
        self,
        redis_url: str,
        prefix: str = "gpufed",
        fencing_token: Callable[[], int | None] | None = None,
        require_marker: bool = False,
        unique_names: bool = False,
        idempotency_ttl_seconds: float = 0.0,
    ) -> None:
        """`fencing_token`: the leader lease's current token (None while not held), sent with every
        control-loop write; `require_marker`: refuse submits while the store is being rebuilt;
        `unique_names`: refuse a job whose name a live job of its tenant holds (AlreadyExists), as the
        API's store does (broker.app.main); `idempotency_ttl_seconds`: an Idempotency-Key expires this
        long after its submit (settings.idempotencyKeyTtlSeconds; 0: never)."""
        if not prefix or ":" in prefix:
            raise ValueError(f"prefix: must be non-empty and contain no ':' (got {prefix!r})")
        # Bounded: no call may hang a caller (the API's event loop, the control loop) on a dead Redis.
        self._r: redis.Redis = redis_connect.client_for(
            redis_url,
            decode_responses=False,
            socket_timeout=SOCKET_TIMEOUT_SECONDS,
            socket_connect_timeout=CONNECT_TIMEOUT_SECONDS,
        )
        self._p = prefix
        self.writer_id = "w" + uuid.uuid4().hex[:12]  # names this store's job writes in P:changes
        self._token = fencing_token
        self._require_marker = require_marker
        self._unique_names = unique_names
        self._idem_ttl = str(int(idempotency_ttl_seconds)) if idempotency_ttl_seconds > 0 else "0"
        self._fence = self._r.register_script(scripts.FENCE)
        self._restore_job = self._r.register_script(scripts.RESTORE_JOB)
        self._put_summary = self._r.register_script(scripts.PUT_SUMMARY)
        self._publications = self._r.register_script(scripts.PUBLICATIONS)
        self._beat_summary = self._r.register_script(scripts.BEAT_SUMMARY)
        self._summary_marks = self._r.register_script(scripts.SUMMARY_MARKS)
        self._reserve = self._r.register_script(scripts.RESERVE)
        self._release = self._r.register_script(scripts.RELEASE)
        self._prune = self._r.register_script(scripts.PRUNE)
        self._create_job = self._r.register_script(scripts.CREATE_JOB)
        self._save_job = self._r.register_script(scripts.SAVE_JOB)
        self._reserve_many = self._r.register_script(scripts.RESERVE_MANY)
        self._lister = RedisJobList(self._r, prefix)

    # ------------------------------------------------------------------ keys

    def _k(self, *parts: str) -> str:
        return ":".join((self._p, *parts))

    @property
    def prefix(self) -> str:
        return self._p

    @property
    def client(self) -> redis.Redis:
        """The underlying client (for health checks and tests)."""
        return self._r

    def close(self) -> None:
        self._r.close()

    def _token_arg(self) -> str:
        """The writer's fencing token as a script argument: '' for an unfenced store; a fenced store
        without a lease sends '0', which no current token matches (it must not write at all)."""
        if self._token is None:
            return ""
        token = self._token()
        return "0" if token is None else str(token)

    def ping(self) -> bool:
        try:
            return bool(self._r.ping())
        except redis.RedisError as e:
            raise StoreError(f"redis: {e}") from e

    # ------------------------------------------------------------------ capacity

    def put_summary(self, summary: ClusterSummary) -> ClusterSummary:
        try:
            version = self._put_summary(keys=self.summary_keys(summary), args=summary_args(summary))
        except redis.RedisError as e:
            raise StoreError(f"redis: put_summary {summary.cluster}: {e}") from e
        return dataclasses.replace(summary, version=int(version))

    def summary_keys(self, summary: ClusterSummary) -> list[str]:
        """The PUT_SUMMARY script's keys for this summary."""
        return [self._k("summary", summary.cluster), self._k("clusters")]

    def get_summary(self, cluster: str) -> ClusterSummary | None:
        try:
            raw, version, heartbeat, published = self._r.hmget(self._k("summary", cluster), _SUMMARY_READ)
        except redis.RedisError as e:
            raise StoreError(f"redis: get_summary {cluster}: {e}") from e
        if raw is None:
            return None
        return _summary_of(raw, version, heartbeat, published)

    def delete_summary(self, cluster: str) -> None:
        """Forget a cluster that left the fleet (its reservations expire on their own)."""
        try:
            pipe = self._r.pipeline()
            pipe.delete(self._k("summary", cluster))
            pipe.srem(self._k("clusters"), cluster)
            pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: delete_summary {cluster}: {e}") from e

    def observed_summaries(self) -> list[ClusterSummary]:
        try:
            clusters = sorted(_text(c) for c in self._r.smembers(self._k("clusters")))
            pipe = self._r.pipeline(transaction=False)
            for c in clusters:
                pipe.hmget(self._k("summary", c), _SUMMARY_READ)
            rows = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: observed_summaries: {e}") from e
        return [_summary_of(*row) for row in rows if row[0] is not None]

    def placeable_summaries(self, now: float | None = None) -> list[ClusterSummary]:
        """Observed summaries minus live reservations. `now` defaults to the Redis server's clock."""
        at = self._server_now() if now is None else now
        resv = self.live_reservations(at)
        return [reservations.deduct(s, resv, at) for s in self.observed_summaries()]

    def _server_now(self) -> float:
        try:
            sec, usec = self._r.time()
        except redis.RedisError as e:
            raise StoreError(f"redis: time: {e}") from e
        return float(sec) + float(usec) / 1e6

    # ------------------------------------------------------------------ the placer's cache

    def cluster_marks(self, clusters: Sequence[str]) -> dict[str, SummaryMarks]:
        """Each cluster's summary version, reservation ledger, writes so far and latest heartbeat, in one
        round trip and without the summaries (SUMMARY_MARKS, MARKS_CHUNK clusters per call): a cache
        reads again only the clusters whose (version, ledger) moved and takes the heartbeat of the others
        from here (BEAT_SUMMARY)."""
        names = list(clusters)
        try:
            flat = call_in_chunks(self._r, self._summary_marks, [self._k("summary", "")], names, MARKS_CHUNK)
        except redis.RedisError as e:
            raise StoreError(f"redis: cluster_marks: {e}") from e
        out: dict[str, SummaryMarks] = {}
        for c, i in zip(names, range(0, len(flat), 5), strict=True):
            version, ledger, written, heartbeat, published = flat[i : i + 5]
            if version:
                out[c] = SummaryMarks(
                    int(version),
                    int(ledger or 0),
                    int(written or version),
                    float(heartbeat) if heartbeat else None,
                    float(published) if published else None,
                )
        return out

    def cluster_states(self, clusters: Sequence[str]) -> dict[str, ClusterState]:
        """Summary, reservations and ledger of each cluster (that has a summary), in one round trip."""
        try:
            pipe = self._r.pipeline(transaction=True)  # one consistent view per cluster
            for c in clusters:
                pipe.hmget(self._k("summary", c), [*_SUMMARY_READ, "ledger"])
                pipe.hvals(self._k("resv", c))
            rows = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: cluster_states: {e}") from e
        out: dict[str, ClusterState] = {}
        for i, c in enumerate(clusters):
            (raw, version, heartbeat, published, ledger), held = rows[2 * i], rows[2 * i + 1]
            if raw is None:
                continue
            summary = _summary_of(raw, version, heartbeat, published)
            resv = tuple(sorted((_RESERVATION.validate_json(r) for r in held), key=commit_order))
            out[c] = ClusterState(summary, resv, int(ledger or 0))
        return out

    # ------------------------------------------------------------------ reservations

    def reserve(self, reservation: Reservation, now: float, version: int, ledger: int) -> ReserveResult:
        """Hold the reservation if the cluster is still at summary `version` and reservation `ledger`
        (the state the placer decided on) and no other placer holds this job (see ReserveResult)."""
        if reservation.units <= 0:
            raise ValueError(f"reservation.units: must be positive (got {reservation.units})")
        c = reservation.cluster
        try:
            code, cur_version, cur_ledger = self._reserve(
                keys=[
                    self._k("summary", c),
                    self._k("resv", c),
                    self._k("resv-where"),
                    self._k("leader-token"),
                ],
                args=[
                    reservation.job_id,
                    c,
                    reservation.attempt,
                    reservation.owner,
                    repr(float(now)),
                    str(version),
                    str(ledger),
                    _RESERVATION.dump_json(committed_at(reservation, ledger, 0)),
                    self._k("resv", ""),
                    self._k("summary", ""),
                    self._token_arg(),
                ],
            )
        except redis.RedisError as e:
            raise StoreError(f"redis: reserve {reservation.job_id} on {c}: {e}") from e
        if int(code) == FENCED_CODE:
            raise Fenced(f"reserve {reservation.job_id}: this broker's leader lease is no longer current")
        return ReserveResult(RESERVE_STATUS[int(code)], int(cur_version), int(cur_ledger))

    def release(self, job_id: str, attempt: int | None = None, owner: str | None = None) -> bool:
        """Forget the job's reservation: any, or only that attempt's, or only that owner's. Returns
        whether one was removed; unknown jobs are fine."""
        try:
            removed = self._release(
                keys=[self._k("resv-where")],
                args=[
                    job_id,
                    "" if attempt is None else str(attempt),
                    owner or "",
                    self._k("resv", ""),
                    self._k("summary", ""),
                ],
            )
        except redis.RedisError as e:
            raise StoreError(f"redis: release {job_id}: {e}") from e
        return int(removed) == 1

    def confirm(self, job_id: str, attempt: int | None = None) -> bool:
        """The cluster now shows the job's pods, so observed capacity already counts them: stop holding.

        Returns whether a reservation was held (False: released already)."""
        return self.release(job_id, attempt)

    def prune_expired(self, now: float) -> int:
        """Drop expired reservations in every cluster (they stopped counting at expiry; this frees the
        memory and bumps the ledgers so caches notice). Returns how many were dropped."""
        try:
            clusters = sorted(_text(c) for c in self._r.smembers(self._k("clusters")))
            pipe = ScriptBatch(self._r)
            for c in clusters:
                pipe.call(
                    self._prune,
                    [self._k("resv", c), self._k("resv-where"), self._k("summary", c)],
                    [repr(float(now))],
                )
            counts = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: prune_expired: {e}") from e
        return sum(int(n) for n in counts)

    def live_reservations(self, now: float) -> list[Reservation]:
        try:
            clusters = {_text(c) for c in self._r.hvals(self._k("resv-where"))}
            pipe = self._r.pipeline(transaction=False)
            ordered = sorted(clusters)
            for c in ordered:
                pipe.hvals(self._k("resv", c))
            rows = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: live_reservations: {e}") from e
        out = [_RESERVATION.validate_json(raw) for vals in rows for raw in vals]
        return sorted(
            (r for r in out if r.expires_at > now), key=lambda r: (r.cluster, r.created_at, r.job_id)
        )

    # ------------------------------------------------------------------ jobs

    def create_job(self, record: JobRecord, event: JobEvent | None = None) -> JobRecord:
        """Store a new job (and its first event) in one round trip; a seen idempotency key returns the
        job it named instead, writing nothing."""
        try:
            status, raw = self._create_job(*self._create_job_call(record, event))
        except redis.RedisError as e:
            raise StoreError(f"redis: create_job {record.id}: {e}") from e
        return self._created(record, status, raw)

    def create_jobs(
        self, jobs: Sequence[tuple[JobRecord, JobEvent | None]]
    ) -> list[JobRecord | StoreError | Conflict]:
        """create_job for many jobs in one pipelined round trip (the API's group commit of concurrent
        submits). One answer per job, in order: the stored record, or the error that job met."""
        if not jobs:
            return []
        try:
            pipe = ScriptBatch(self._r)
            for record, event in jobs:
                keys, args = self._create_job_call(record, event)
                pipe.call(self._create_job, keys, args)
            answers = pipe.execute(raise_on_error=False)
        except redis.RedisError as e:
            return [StoreError(f"redis: create_jobs ({len(jobs)} jobs): {e}") for _ in jobs]
        out: list[JobRecord | StoreError | Conflict] = []
        for (record, _), answer in zip(jobs, answers, strict=True):
            if isinstance(answer, Exception):
                out.append(StoreError(f"redis: create_job {record.id}: {answer}"))
                continue
            try:
                out.append(self._created(record, answer[0], answer[1]))
            except (StoreError, Conflict) as e:
                out.append(e)
        return out

    def _create_job_call(self, record: JobRecord, event: JobEvent | None) -> tuple[list[str], list[Any]]:
        idem = record.idempotency_key
        keys = [
            self._k("job", record.id),
            self._k("jobs"),
            self._k("jobs", "state", ""),
            self._k("idem", idem) if idem else self._k("idem", ""),
            self._k("events", record.id),
            self._k("events"),
            self._k("run-id"),
            self._k("changes"),
            # one live job per tenant and name (kubectl's AlreadyExists); a finished job's name is free
            self._k("name", record.request.tenant, record.request.name) if self._unique_names else "",
            *order_keys(self._p, record.request.tenant),
            redis_recovery_gate.pending_key(self.prefix),
        ]
        args: list[Any] = [
            record.id,
            _JOB.dump_json(record),
            record.state.value,
            "1" if idem else "0",
            self._k("job", ""),
            _EVENT.dump_json(event) if event is not None else "",
            _FLEET_STREAM_MAXLEN,
            "1" if self._require_marker else "0",
            self.writer_id,
            CHANGES_MAXLEN,
            position_of(record.created_at, record.id),
            self._idem_ttl,
        ]
        return keys, args

    def _created(self, record: JobRecord, status: bytes, raw: bytes) -> JobRecord:
        if status == b"recovering":
            raise Recovering(
                "the state store came back empty; job records are being rebuilt from the member "
                "clusters: retry in a few seconds"
            )
        if status == b"unvouched":
            raise redis_recovery_gate.unvouched(raw.decode())
        if status == b"exists":
            raise Conflict(f"job {record.id} already exists")
        if status == b"name-taken":
            holder, _, state = raw.decode().partition(" ")
            raise AlreadyExists(
                f"a job named {record.request.name!r} already exists in tenant {record.request.tenant} "
                f"({holder}, {state}): pick another name, or cancel it first (a finished job's name may be reused)"
            )
        return _JOB.validate_json(raw)

    def get_job(self, job_id: str) -> JobRecord | None:
        try:
            raw = self._r.hget(self._k("job", job_id), "json")
        except redis.RedisError as e:
            raise StoreError(f"redis: get_job {job_id}: {e}") from e
        return None if raw is None else _JOB.validate_json(raw)

    def list_jobs(self, states: Sequence[JobState] | None = None) -> list[JobRecord]:
        try:
            if states is None:
                ids = self._r.smembers(self._k("jobs"))
            else:
                ids = set()
                for s in states:
                    ids |= self._r.smembers(self._k("jobs", "state", s.value))
            ordered = sorted(_text(i) for i in ids)
            pipe = self._r.pipeline(transaction=False)
            for i in ordered:
                pipe.hget(self._k("job", i), "json")
            rows = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: list_jobs: {e}") from e
        jobs = [_JOB.validate_json(raw) for raw in rows if raw is not None]
        return sorted(jobs, key=lambda j: (j.created_at, j.id))

    def page_jobs(self, query: JobQuery, after: str | None = None) -> JobPage:
        """One page of a job list (broker.core.ports.JobLister; the index: adapters/redis_job_list.py)."""
        return self._lister.page_jobs(query, after)

    def page_job_docs(
        self, query: JobQuery, after: str | None = None, kept: KeptItems | None = None
    ) -> JobDocPage:
        """The same page as the records' JSON documents, undecoded (broker.api.list_items reads them)."""
        return self._lister.page_job_docs(query, after, kept)

    def restore_job(self, record: JobRecord, event: JobEvent | None = None) -> bool:
        """Write a record rebuilt from a member cluster (broker.ha.recovery) unless the job is known; its
        idempotency key is set unless it names a job already. Returns whether it was written."""
        return self.restore_jobs([(record, event)])[0]

    def restore_jobs(self, items: Sequence[tuple[JobRecord, JobEvent | None]]) -> list[bool]:
        """restore_job for many records in one round trip (each one atomic)."""
        try:
            pipe = ScriptBatch(self._r)
            for record, event in items:
                idem = record.idempotency_key
                pipe.call(
                    self._restore_job,
                    [
                        self._k("job", record.id),
                        self._k("jobs"),
                        self._k("jobs", "state", ""),
                        self._k("idem", idem) if idem else self._k("idem", ""),
                        self._k("events", record.id),
                        self._k("events"),
                        self._k("changes"),
                        *order_keys(self._p, record.request.tenant),
                        self._k("finished"),
                    ],
                    [
                        record.id,
                        _JOB.dump_json(record),
                        record.state.value,
                        "1" if idem else "0",
                        _EVENT.dump_json(event) if event is not None else "",
                        _FLEET_STREAM_MAXLEN,
                        self.writer_id,
                        CHANGES_MAXLEN,
                        position_of(record.created_at, record.id),
                        self._idem_ttl,
                    ],
                )
            written = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: restore_jobs ({len(items)}): {e}") from e
        return [int(w) == 1 for w in written]

    def job_ids(self, state: JobState) -> set[str]:
        """The ids of the jobs in one state (the index only, no records)."""
        try:
            return {_text(i) for i in self._r.smembers(self._k("jobs", "state", state.value))}
        except redis.RedisError as e:
            raise StoreError(f"redis: job_ids {state.value}: {e}") from e
