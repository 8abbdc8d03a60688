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
    P:idem:<key>             str   idempotency key -> job id (SET NX semantics, inside the create script)
    P:events:<job_id>        stream  one entry per JobEvent, field "e" = JobEvent (JSON)
    P:events                 stream  the fleet-wide stream of all JobEvents (capped, approximate MAXLEN)
    P:fenced                 hash  cluster -> why it is fenced (lost; offered again once its stale attempts are swept)
    P:cluster-events:<c>     stream  ClusterEvents of one cluster (health changes, fences), capped
    P:leader                 str   "<holder>|<token>" of the leader lease, with a TTL (adapters.redis_lease)
    P:leader-token           str   the fencing token: INCR'd by every new lease holder
    P:run-id                 str   marker written once the store holds the federation's records; its
                                   absence means Redis came back empty (broker.recovery rebuilds)
    P:recovery               str   JSON report of the last rebuild after a Redis loss

Atomicity: put_summary, reserve, release, create_job and save_job are Lua scripts. reserve is a
compare-and-set: it succeeds only while the cluster's summary version and reservation ledger are the ones
the placer decided on (broker.reservations.deduct over exactly that state), so no interleaving of any
number of placers (threads, processes, replicas) over-commits a node or NUMA domain; and a reservation is
owned by the placer and attempt that made it: another placer's reserve of the same job is refused while
it lives, and release only removes the caller's own. create_job never creates two jobs for one
idempotency key and writes the job and its "submitted" event in one round trip; save_job never loses a
state transition. Dataclasses are (de)serialised with pydantic TypeAdapters; they round-trip exactly.
Redis failures surface as broker.errors.StoreError; lost races as broker.errors.Conflict.

Fencing: a store made with `fencing_token` (the leader's control loop) sends its lease token with every
save_job, reserve, fence and unfence; the script refuses (broker.errors.Fenced, nothing written) unless
the token is still the current one in P:leader-token, so a paused ex-leader cannot write. A store made
with `require_marker` (a production broker) refuses create_job while P:run-id is absent (Redis came
back empty and the records are not rebuilt yet: broker.errors.Recovering), so a retried idempotency key
can never create a second job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import redis
from pydantic import TypeAdapter

from adapters import redis_recovery_gate
from broker import reservations
from broker.errors import Conflict, Fenced, Recovering, StoreError
from broker.model import (
    ClusterEvent,
    ClusterSummary,
    JobEvent,
    JobRecord,
    JobState,
    Reservation,
)
from broker.node_detail import NodeDetail
from broker.ports import ClusterState, ReserveResult

WHOLE_GPU = "nvidia.com/gpu"
_SEP = "\x1f"
_FLEET_STREAM_MAXLEN = 100_000
SOCKET_TIMEOUT_SECONDS = 15.0  # longer than any blocking read (read_events block_ms) the broker issues
CONNECT_TIMEOUT_SECONDS = 2.0

_SUMMARY = TypeAdapter(ClusterSummary)
_RESERVATION = TypeAdapter(Reservation)
_JOB = TypeAdapter(JobRecord)
_EVENT = TypeAdapter(JobEvent)
_CLUSTER_EVENT = TypeAdapter(ClusterEvent)
_CLUSTER_STREAM_MAXLEN = 1000
_NODES = TypeAdapter(tuple[NodeDetail, ...])

# The fencing check every control-loop write starts with: `tok` is the writer's lease token ('' = an
# unfenced writer, e.g. the API), `key` P:leader-token. True when the write must be refused.
_STALE_TOKEN = """
local function stale_token(key, tok)
  if tok == '' then return false end
  return redis.call('GET', key) ~= tok
end
"""

# KEYS: summary, clusters. ARGV: cluster, summary json. Returns the new version.
_PUT_SUMMARY = """
local v = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'json', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[1])
return v
"""

# KEYS: summary:<cluster>, resv:<cluster>, resv-where, leader-token. ARGV: job_id, cluster, attempt,
# owner, now, expected version, expected ledger, json, resv-key prefix, summary-key prefix, token.
# Returns {status, version, ledger}: status 1 reserved, 0 the cluster changed since the placer read it
# (version/ledger are the current ones), -1 the job's reservation is held by another placer or a newer
# attempt, -2 the cluster has no summary, -3 the writer's lease token is stale.
_RESERVE = (
    _STALE_TOKEN
    + """
if stale_token(KEYS[4], ARGV[11]) then return {-3, '0', '0'} end
local job, cluster = ARGV[1], ARGV[2]
local attempt, now = tonumber(ARGV[3]), tonumber(ARGV[5])
local cur = redis.call('HMGET', KEYS[1], 'version', 'ledger')
if not cur[1] then return {-2, '0', '0'} end
local version, ledger = cur[1], cur[2] or '0'
if version ~= ARGV[6] or ledger ~= ARGV[7] then return {0, version, ledger} end
local where = redis.call('HGET', KEYS[3], job)
if where then
  local old = redis.call('HGET', ARGV[9] .. where, job)
  if old then
    local o = cjson.decode(old)
    local live = tonumber(o['expires_at']) > now
    local oa = tonumber(o['attempt'])
    if live and (oa > attempt or (oa == attempt and o['owner'] ~= ARGV[4])) then
      return {-1, version, ledger}
    end
    redis.call('HDEL', ARGV[9] .. where, job)
    if where ~= cluster then redis.call('HINCRBY', ARGV[10] .. where, 'ledger', 1) end
  end
end
redis.call('HSET', KEYS[2], job, ARGV[8])
redis.call('HSET', KEYS[3], job, cluster)
ledger = redis.call('HINCRBY', KEYS[1], 'ledger', 1)
return {1, version, tostring(ledger)}
"""
)

# KEYS: resv-where. ARGV: job_id, attempt ('' = any), owner ('' = any), resv-key prefix, summary prefix.
# Removes the job's reservation if it matches; returns 1 when one was removed.
_RELEASE = """
local job = ARGV[1]
local where = redis.call('HGET', KEYS[1], job)
if not where then return 0 end
local raw = redis.call('HGET', ARGV[4] .. where, job)
if raw then
  local o = cjson.decode(raw)
  if ARGV[2] ~= '' and tonumber(o['attempt']) ~= tonumber(ARGV[2]) then return 0 end
  if ARGV[3] ~= '' and o['owner'] ~= ARGV[3] then return 0 end
  redis.call('HDEL', ARGV[4] .. where, job)
  redis.call('HINCRBY', ARGV[5] .. where, 'ledger', 1)
end
redis.call('HDEL', KEYS[1], job)
if raw then return 1 end
return 0
"""

# KEYS: resv:<cluster>, resv-where, summary:<cluster>. ARGV: now. Drops expired reservations; returns
# how many.
_PRUNE = """
local n = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local r = cjson.decode(all[i + 1])
  if tonumber(r['expires_at']) <= tonumber(ARGV[1]) then
    redis.call('HDEL', KEYS[1], all[i])
    redis.call('HDEL', KEYS[2], all[i])
    n = n + 1
  end
end
if n > 0 then redis.call('HINCRBY', KEYS[3], 'ledger', 1) end
return n
"""

# The event of a job write, appended in the same script: to the job's stream (KEYS[a]) and to the
# capped fleet-wide stream (KEYS[a+1]) when ARGV[e] is not ''.
_APPEND_EVENT = """
local function append_event(stream, fleet, payload, maxlen)
  if payload ~= '' then
    redis.call('XADD', stream, '*', 'e', payload)
    redis.call('XADD', fleet, 'MAXLEN', '~', maxlen, '*', 'e', payload)
  end
end
"""

# KEYS: job, jobs, state-set prefix (as key 3 only for cluster-slot hygiene), idem (or ''), events:<id>,
# events, run-id marker, recovery pending. ARGV: id, json, state, idem key present ('1'/'0'), job-key
# prefix, event json, stream maxlen, marker required ('1'/'0').
# Returns {'created', json} or {'existing', json} or {'exists', ''} or {'recovering', ''} or
# {'unvouched', pending clusters} (adapters.redis_recovery_gate).
_CREATE_JOB = (
    _APPEND_EVENT
    + """
if ARGV[8] == '1' and redis.call('EXISTS', KEYS[7]) == 0 then return {'recovering', ''} end
if ARGV[4] == '1' then
  local existing = redis.call('GET', KEYS[4])
  if existing then
    local prior = redis.call('HGET', ARGV[5] .. existing, 'json')
    if prior then return {'existing', prior} end
  end
end
"""
    + redis_recovery_gate.PENDING_LUA
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists', ''} end
redis.call('HSET', KEYS[1], 'json', ARGV[2], 'state', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3] .. ARGV[3], ARGV[1])
if ARGV[4] == '1' then redis.call('SET', KEYS[4], ARGV[1]) end
append_event(KEYS[5], KEYS[6], ARGV[6], ARGV[7])
return {'created', ARGV[2]}
"""
)

# KEYS: job, jobs, state-set prefix, events:<id>, events, leader-token. ARGV: id, json, new state,
# expected state ('' = unconditional), event json ('' = none), stream maxlen, token ('' = unfenced).
# Returns {'ok', ''} or {'conflict', current state or ''} or {'fenced', current token or ''}.
_SAVE_JOB = (
    _APPEND_EVENT
    + _STALE_TOKEN
    + """
if stale_token(KEYS[6], ARGV[7]) then return {'fenced', redis.call('GET', KEYS[6]) or ''} end
local cur = redis.call('HGET', KEYS[1], 'state')
if ARGV[4] ~= '' and cur ~= ARGV[4] then
  return {'conflict', cur or ''}
end
if ARGV[8] ~= '' then
  local att = redis.call('HGET', KEYS[1], 'attempt')
  if att and att ~= ARGV[8] then return {'conflict', (cur or '') .. ' at attempt ' .. att} end
end
if cur and cur ~= ARGV[3] then
  redis.call('SREM', KEYS[3] .. cur, ARGV[1])
end
redis.call('HSET', KEYS[1], 'json', ARGV[2], 'state', ARGV[3], 'attempt', ARGV[9])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3] .. ARGV[3], ARGV[1])
append_event(KEYS[4], KEYS[5], ARGV[5], ARGV[6])
return {'ok', ''}
"""
)

# KEYS: fenced, leader-token. ARGV: cluster, reason ('' = unfence), token. Returns 1 when changed,
# 0 when not, -1 when the token is stale.
_FENCE = (
    _STALE_TOKEN
    + """
if stale_token(KEYS[2], ARGV[3]) then return -1 end
if ARGV[2] == '' then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
"""
)

# KEYS: job, jobs, state-set prefix, idem (or ''), events:<id>, events. ARGV: id, json, state, idem key
# present, event json, stream maxlen. A record rebuilt from a member cluster: written only if the job is
# unknown; its idempotency key is set only if unset. Returns 1 when written.
_RESTORE_JOB = (
    _APPEND_EVENT
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'json', ARGV[2], 'state', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3] .. ARGV[3], ARGV[1])
if ARGV[4] == '1' then redis.call('SET', KEYS[4], ARGV[1], 'NX') end
append_event(KEYS[5], KEYS[6], ARGV[5], ARGV[6])
return 1
"""
)


def _text(value: object) -> str:
    """A Redis reply (bytes here; str if a caller's client decodes) as text."""
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


_RESERVE_STATUS = {
    1: ReserveResult.RESERVED,
    0: ReserveResult.STALE,
    -1: ReserveResult.HELD,
    -2: ReserveResult.NO_CLUSTER,
}
_FENCED_CODE = -3


class RedisStateStore:
    """broker.ports.StateStore on Redis (see the module docstring for the key schema)."""

    def __init__(
        self,
        redis_url: str,
        prefix: str = "gpufed",
        fencing_token: Callable[[], int | None] | None = None,
        require_marker: bool = False,
    ) -> None:
        """`fencing_token`: the leader lease's current token (None while not held), sent with every
        control-loop write; `require_marker`: refuse submits while the store is being rebuilt."""
        if not prefix or ":" in prefix:
            raise ValueError(f"prefix: must be non-empty and contain no ':' (got {prefix!r})")
        # Bounded: no call may hang a caller (the API's event loop, the control loop) on a dead Redis.
        self._r: redis.Redis = redis.Redis.from_url(
            redis_url,
            decode_responses=False,
            socket_timeout=SOCKET_TIMEOUT_SECONDS,
            socket_connect_timeout=CONNECT_TIMEOUT_SECONDS,
        )
        self._p = prefix
        self._token = fencing_token
        self._require_marker = require_marker
        self._fence = self._r.register_script(_FENCE)
        self._restore_job = self._r.register_script(_RESTORE_JOB)
        self._put_summary = self._r.register_script(_PUT_SUMMARY)
        self._reserve = self._r.register_script(_RESERVE)
        self._release = self._r.register_script(_RELEASE)
        self._prune = self._r.register_script(_PRUNE)
        self._create_job = self._r.register_script(_CREATE_JOB)
        self._save_job = self._r.register_script(_SAVE_JOB)

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
            version = self._put_summary(
                keys=[self._k("summary", summary.cluster), self._k("clusters")],
                args=[summary.cluster, _SUMMARY.dump_json(summary)],
            )
        except redis.RedisError as e:
            raise StoreError(f"redis: put_summary {summary.cluster}: {e}") from e
        return dataclasses.replace(summary, version=int(version))

    def get_summary(self, cluster: str) -> ClusterSummary | None:
        try:
            raw, version = self._r.hmget(self._k("summary", cluster), ["json", "version"])
        except redis.RedisError as e:
            raise StoreError(f"redis: get_summary {cluster}: {e}") from e
        if raw is None:
            return None
        return dataclasses.replace(_SUMMARY.validate_json(raw), version=int(version or 0))

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
                pipe.hmget(self._k("summary", c), ["json", "version"])
            rows = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: observed_summaries: {e}") from e
        out: list[ClusterSummary] = []
        for raw, version in rows:
            if raw is not None:
                out.append(dataclasses.replace(_SUMMARY.validate_json(raw), version=int(version or 0)))
        return out

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

    def cluster_versions(self, clusters: Sequence[str]) -> dict[str, tuple[int, int]]:
        """(summary version, reservation ledger) of each cluster that has a summary, in one round trip:
        what an incremental cache compares to know which clusters to read again."""
        try:
            pipe = self._r.pipeline(transaction=False)
            for c in clusters:
                pipe.hmget(self._k("summary", c), ["version", "ledger"])
            rows = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: cluster_versions: {e}") from e
        return {
            c: (int(version), int(ledger or 0))
            for c, (version, ledger) in zip(clusters, rows, strict=True)
            if version is not None
        }

    def cluster_states(self, clusters: Sequence[str]) -> dict[str, ClusterState]:
        """Summary, reservations and ledger of each cluster (that has a summary), in one round trip."""
        try:
            pipe = self._r.pipeline(transaction=True)  # one consistent view per cluster
            for c in clusters:
                pipe.hmget(self._k("summary", c), ["json", "version", "ledger"])
                pipe.hvals(self._k("resv", c))
            rows = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: cluster_states: {e}") from e
        out: dict[str, ClusterState] = {}
        for i, c in enumerate(clusters):
            (raw, version, ledger), held = rows[2 * i], rows[2 * i + 1]
            if raw is None:
                continue
            summary = dataclasses.replace(_SUMMARY.validate_json(raw), version=int(version or 0))
            resv = tuple(
                sorted((_RESERVATION.validate_json(r) for r in held), key=lambda r: (r.created_at, r.job_id))
            )
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
                    _RESERVATION.dump_json(reservation),
                    self._k("resv", ""),
                    self._k("summary", ""),
                    self._token_arg(),
                ],
            )
        except redis.RedisError as e:
            raise StoreError(f"redis: reserve {reservation.job_id} on {c}: {e}") from e
        if int(code) == _FENCED_CODE:
            raise Fenced(f"reserve {reservation.job_id}: this broker's leader lease is no longer current")
        return ReserveResult(_RESERVE_STATUS[int(code)], int(cur_version), int(cur_ledger))

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
            pipe = self._r.pipeline(transaction=False)
            for c in clusters:
                self._prune(
                    keys=[self._k("resv", c), self._k("resv-where"), self._k("summary", c)],
                    args=[repr(float(now))],
                    client=pipe,
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
            pipe = self._r.pipeline(transaction=False)
            for record, event in jobs:
                keys, args = self._create_job_call(record, event)
                self._create_job(keys, args, client=pipe)
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
        return _JOB.validate_json(raw)

    def get_job(self, job_id: str) -> JobRecord | None:
        try:
            raw = self._r.hget(self._k("job", job_id), "json")
        except redis.RedisError as e:
            raise StoreError(f"redis: get_job {job_id}: {e}") from e
        return None if raw is None else _JOB.validate_json(raw)

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
        try:
            status, current = self._save_job(
                keys=[
                    self._k("job", record.id),
                    self._k("jobs"),
                    self._k("jobs", "state", ""),
                    self._k("events", record.id),
                    self._k("events"),
                    self._k("leader-token"),
                ],
                args=[
                    record.id,
                    _JOB.dump_json(record),
                    record.state.value,
                    expected_state.value if expected_state is not None else "",
                    _EVENT.dump_json(event) if event is not None else "",
                    _FLEET_STREAM_MAXLEN,
                    self._token_arg(),
                    str(expected_attempt) if expected_attempt is not None else "",
                    str(record.attempt),
                ],
            )
        except redis.RedisError as e:
            raise StoreError(f"redis: save_job {record.id}: {e}") from e
        if status == b"fenced":
            raise Fenced(
                f"job {record.id}: not written, this broker's leader lease is no longer current "
                f"(current token {_text(current) or 'none'})"
            )
        if status == b"conflict":
            now_state = _text(current) or "absent"
            raise Conflict(
                f"job {record.id}: expected state {expected_state.value if expected_state else '-'}, "
                f"found {now_state}"
            )
        return record

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

    def restore_job(self, record: JobRecord, event: JobEvent | None = None) -> bool:
        """Write a record rebuilt from a member cluster (broker.recovery) unless the job is known; its
        idempotency key is set unless it names a job already. Returns whether it was written."""
        return self.restore_jobs([(record, event)])[0]

    def restore_jobs(self, items: Sequence[tuple[JobRecord, JobEvent | None]]) -> list[bool]:
        """restore_job for many records in one round trip (each one atomic)."""
        try:
            pipe = self._r.pipeline(transaction=False)
            for record, event in items:
                idem = record.idempotency_key
                self._restore_job(
                    keys=[
                        self._k("job", record.id),
                        self._k("jobs"),
                        self._k("jobs", "state", ""),
                        self._k("idem", idem) if idem else self._k("idem", ""),
                        self._k("events", record.id),
                        self._k("events"),
                    ],
                    args=[
                        record.id,
                        _JOB.dump_json(record),
                        record.state.value,
                        "1" if idem else "0",
                        _EVENT.dump_json(event) if event is not None else "",
                        _FLEET_STREAM_MAXLEN,
                    ],
                    client=pipe,
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

    # ------------------------------------------------------------------ the run marker (Redis loss)

    def run_marker(self) -> str | None:
        """The store's run id, or None when Redis holds no federation state (new, or came back empty)."""
        try:
            raw = self._r.get(self._k("run-id"))
        except redis.RedisError as e:
            raise StoreError(f"redis: run_marker: {e}") from e
        return None if raw is None else _text(raw)

    def set_run_marker(self, run_id: str, report: str | None = None) -> str:
        """Write the run id unless one is set (returns the one in force), with the rebuild's report."""
        try:
            pipe = self._r.pipeline(transaction=True)
            if report is not None:
                pipe.set(self._k("recovery"), report)
            pipe.set(self._k("run-id"), run_id, nx=True)
            pipe.get(self._k("run-id"))
            current = pipe.execute()[-1]
        except redis.RedisError as e:
            raise StoreError(f"redis: set_run_marker: {e}") from e
        return _text(current)

    def recovery_report(self) -> str | None:
        """The JSON report of the last rebuild after a Redis loss, if any."""
        try:
            raw = self._r.get(self._k("recovery"))
        except redis.RedisError as e:
            raise StoreError(f"redis: recovery_report: {e}") from e
        return None if raw is None else _text(raw)

    # ------------------------------------------------------------------ events

    def append_event(self, event: JobEvent) -> None:
        payload = _EVENT.dump_json(event)
        try:
            pipe = self._r.pipeline()
            pipe.xadd(self._k("events", event.job_id), {"e": payload})
            pipe.xadd(self._k("events"), {"e": payload}, maxlen=_FLEET_STREAM_MAXLEN, approximate=True)
            pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: append_event {event.job_id}: {e}") from e

    def job_events(self, job_id: str) -> list[JobEvent]:
        return [e for _, e in self.read_events(job_id)]

    def read_events(
        self, job_id: str | None = None, after: str = "0-0", block_ms: int | None = None, count: int = 1000
    ) -> list[tuple[str, JobEvent]]:
        """Events after stream id `after` (exclusive), oldest first, with their stream ids.

        job_id None reads the fleet-wide stream. With block_ms, waits up to that long for new entries
        (what a live SSE feed needs); pass the last id seen as `after` to resume."""
        key = self._k("events", job_id) if job_id is not None else self._k("events")
        try:
            rows: list[Any]
            if block_ms is None:
                rows = list(
                    self._r.xrange(key, min=f"({after}" if after != "0-0" else "-", max="+", count=count)
                    or []
                )
            else:
                got: Any = self._r.xread({key: after}, count=count, block=block_ms)
                rows = got[0][1] if got else []
        except redis.RedisError as e:
            raise StoreError(f"redis: events {key}: {e}") from e
        return [(_text(eid), _EVENT.validate_json(fields[b"e"])) for eid, fields in rows]

    def last_event_id(self, job_id: str | None = None) -> str:
        """The stream id of the newest event (of the job, or fleet-wide), "0-0" when there is none: where
        a live feed that starts now resumes from, with nothing lost between its reads."""
        key = self._k("events", job_id) if job_id is not None else self._k("events")
        try:
            rows: Any = self._r.xrevrange(key, count=1)
        except redis.RedisError as e:
            raise StoreError(f"redis: events {key}: {e}") from e
        return _text(rows[0][0]) if rows else "0-0"

    # ------------------------------------------------------------------ clusters: fences and health events

    def fence(self, cluster: str, reason: str) -> bool:
        """Mark a lost cluster: no placement there until its stale attempts are swept. Returns whether it
        was newly fenced."""
        if not reason:
            raise ValueError("reason: a fence needs a reason")
        return self._set_fence(cluster, reason)

    def unfence(self, cluster: str) -> bool:
        return self._set_fence(cluster, "")

    def _set_fence(self, cluster: str, reason: str) -> bool:
        try:
            code = int(
                self._fence(
                    keys=[self._k("fenced"), self._k("leader-token")],
                    args=[cluster, reason, self._token_arg()],
                )
            )
        except redis.RedisError as e:
            raise StoreError(f"redis: fence {cluster}: {e}") from e
        if code < 0:
            raise Fenced(f"fence {cluster}: this broker's leader lease is no longer current")
        return code == 1

    def fenced(self) -> dict[str, str]:
        try:
            raw = self._r.hgetall(self._k("fenced"))
        except redis.RedisError as e:
            raise StoreError(f"redis: fenced: {e}") from e
        return {_text(k): _text(v) for k, v in raw.items()}

    def append_cluster_event(self, event: ClusterEvent) -> None:
        try:
            self._r.xadd(
                self._k("cluster-events", event.cluster),
                {"e": _CLUSTER_EVENT.dump_json(event)},
                maxlen=_CLUSTER_STREAM_MAXLEN,
                approximate=True,
            )
        except redis.RedisError as e:
            raise StoreError(f"redis: append_cluster_event {event.cluster}: {e}") from e

    def cluster_events(self, cluster: str, count: int = 20) -> list[ClusterEvent]:
        """The cluster's latest events, oldest first."""
        try:
            rows: list[Any] = list(self._r.xrevrange(self._k("cluster-events", cluster), count=count) or [])
        except redis.RedisError as e:
            raise StoreError(f"redis: cluster_events {cluster}: {e}") from e
        return [_CLUSTER_EVENT.validate_json(fields[b"e"]) for _, fields in reversed(rows)]

    # ------------------------------------------------------------------ per-node detail (fleet view)

    def put_nodes(self, cluster: str, nodes: tuple[NodeDetail, ...], at: float) -> None:
        try:
            self._r.hset(self._k("nodes", cluster), mapping={"json": _NODES.dump_json(nodes), "at": repr(at)})
        except redis.RedisError as e:
            raise StoreError(f"redis: put_nodes {cluster}: {e}") from e

    def get_nodes(self, cluster: str) -> tuple[tuple[NodeDetail, ...], float] | None:
        """The cluster's node table and when it was written, or None before the first write."""
        try:
            raw, at = self._r.hmget(self._k("nodes", cluster), ["json", "at"])
        except redis.RedisError as e:
            raise StoreError(f"redis: get_nodes {cluster}: {e}") from e
        if raw is None:
            return None
        return _NODES.validate_json(raw), float(at or 0.0)

    # ------------------------------------------------------------------ event-to-Redis freshness

    def observe_event_lag(self, cluster: str, seconds: float, buckets: Sequence[float]) -> None:
        """Count one summary write that landed `seconds` after the first watch event it carries."""
        key = self._k("lag", cluster)
        try:
            pipe = self._r.pipeline(transaction=False)
            for bound in buckets:
                if seconds <= bound:
                    pipe.hincrby(key, f"le:{float(bound)!r}", 1)
            pipe.hincrby(key, "le:+Inf", 1)
            pipe.hincrbyfloat(key, "sum", seconds)
            pipe.hincrby(key, "count", 1)
            pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: observe_event_lag {cluster}: {e}") from e

    def event_lags(
        self, buckets: Sequence[float]
    ) -> dict[str, tuple[list[tuple[float, float]], float, float]]:
        """Per cluster with an observation: ([(upper bound, cumulative count)] for every bound in `buckets`
        and +inf last, sum, count) of the event-to-Redis histogram."""
        try:
            clusters = sorted(_text(c) for c in self._r.smembers(self._k("clusters")))
            pipe = self._r.pipeline(transaction=False)
            for c in clusters:
                pipe.hgetall(self._k("lag", c))
            rows = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: event_lags: {e}") from e
        out: dict[str, tuple[list[tuple[float, float]], float, float]] = {}
        for cluster, raw in zip(clusters, rows, strict=True):
            fields = {_text(k): float(_text(v)) for k, v in raw.items()}
            if "count" not in fields:
                continue
            counted = [(float(b), fields.get(f"le:{float(b)!r}", 0.0)) for b in buckets]
            counted.append((float("inf"), fields.get("le:+Inf", fields["count"])))
            out[cluster] = (counted, fields.get("sum", 0.0), fields["count"])
        return out
