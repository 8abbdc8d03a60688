"""StateStore on Redis: cluster summaries, reservations, jobs, idempotency keys and event streams.

Owns every Redis key the broker writes. All keys start with the prefix (default "gpufed"), written P:

    P:summary:<cluster>      hash  json = ClusterSummary (JSON), version = int bumped on every write
    P:free:<cluster>         hash  "<product>\\x1f<resource>" -> observed free units, written with the summary
                                   (whole GPUs under "nvidia.com/gpu", MIG slices under nvidia.com/mig-<p>)
    P:clusters               set   clusters that have a summary
    P:lag:<cluster>          hash  event-to-Redis histogram of the pollers' summary writes: "le:<bound>" ->
                                   cumulative count, "sum", "count" (read by /metrics)
    P:nodes:<cluster>        hash  json = tuple[NodeDetail] (JSON), at = epoch seconds written; the per-node
                                   table of the fleet view (`?nodes=true`), written by the pollers at a
                                   slow cadence (NODES_INTERVAL_SECONDS in ray_actors), never read to place
    P:resv:<cluster>         hash  job_id -> Reservation (JSON); the reserve Lua script reads and prunes it
    P:resv-where             hash  job_id -> cluster of its live reservation
    P:job:<id>               hash  json = JobRecord (JSON), state = JobState (for the compare-and-set)
    P:jobs                   set   every job id
    P:jobs:state:<STATE>     set   job ids by state (the index list_jobs reads)
    P:idem:<key>             str   idempotency key -> job id (SET NX semantics, inside the create script)
    P:events:<job_id>        stream  one entry per JobEvent, field "e" = JobEvent (JSON)
    P:events                 stream  the fleet-wide stream of all JobEvents (capped, approximate MAXLEN)

Atomicity: put_summary, reserve, create_job and save_job are Lua scripts, so concurrent brokers (threads,
processes, replicas) never over-commit a cluster, never create two jobs for one idempotency key and never
lose a state transition. Dataclasses are (de)serialised with pydantic TypeAdapters; they round-trip exactly.
Redis failures surface as broker.errors.StoreError; lost races as broker.errors.Conflict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import redis
from pydantic import TypeAdapter

from broker.errors import Conflict, StoreError
from broker.model import (
    ClusterSummary,
    JobEvent,
    JobRecord,
    JobState,
    MigCapacity,
    ProductCapacity,
    Reservation,
)
from broker.node_detail import NodeDetail

WHOLE_GPU = "nvidia.com/gpu"
_SEP = "\x1f"
_FLEET_STREAM_MAXLEN = 100_000

_SUMMARY = TypeAdapter(ClusterSummary)
_RESERVATION = TypeAdapter(Reservation)
_JOB = TypeAdapter(JobRecord)
_EVENT = TypeAdapter(JobEvent)
_NODES = TypeAdapter(tuple[NodeDetail, ...])

# KEYS: summary, free, clusters. ARGV: cluster, summary json, then field/value pairs of the free map.
_PUT_SUMMARY = """
local v = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'json', ARGV[2])
redis.call('DEL', KEYS[2])
if #ARGV > 2 then
  redis.call('HSET', KEYS[2], unpack(ARGV, 3))
end
redis.call('SADD', KEYS[3], ARGV[1])
return v
"""

# KEYS: free:<cluster>, resv:<cluster>, resv-where. ARGV: job_id, cluster, free-field, units, now, json,
# then the prefix for resv:<other cluster> (to drop an older reservation of the same job elsewhere).
# Returns 1 when reserved, 0 when the cluster can't cover it.
_RESERVE = """
local job, cluster, field = ARGV[1], ARGV[2], ARGV[3]
local units, now = tonumber(ARGV[4]), tonumber(ARGV[5])
local old = redis.call('HGET', KEYS[3], job)
if old and old ~= cluster then
  redis.call('HDEL', ARGV[7] .. old, job)
end
redis.call('HDEL', KEYS[2], job)
local free = tonumber(redis.call('HGET', KEYS[1], field) or '0')
local held = 0
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  local r = cjson.decode(all[i + 1])
  if tonumber(r['expires_at']) <= now then
    redis.call('HDEL', KEYS[2], all[i])
    redis.call('HDEL', KEYS[3], all[i])
  elseif (r['product'] .. '\\31' .. r['resource_name']) == field then
    held = held + tonumber(r['units'])
  end
end
if free - held < units then
  redis.call('HDEL', KEYS[3], job)
  return 0
end
redis.call('HSET', KEYS[2], job, ARGV[6])
redis.call('HSET', KEYS[3], job, cluster)
return 1
"""

# KEYS: job, jobs, state-set prefix (as key 3 only for cluster-slot hygiene), idem (or ''). ARGV: id, json,
# state, idem key present ('1'/'0'). Returns {'created', json} or {'existing', json} or {'exists', ''}.
_CREATE_JOB = """
if ARGV[4] == '1' then
  local existing = redis.call('GET', KEYS[4])
  if existing then
    local prior = redis.call('HGET', ARGV[5] .. existing, 'json')
    if prior then return {'existing', prior} end
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists', ''} end
redis.call('HSET', KEYS[1], 'json', ARGV[2], 'state', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3] .. ARGV[3], ARGV[1])
if ARGV[4] == '1' then redis.call('SET', KEYS[4], ARGV[1]) end
return {'created', ARGV[2]}
"""

# KEYS: job, jobs, state-set prefix. ARGV: id, json, new state, expected state ('' = unconditional).
# Returns {'ok', ''} or {'conflict', current state or ''}.
_SAVE_JOB = """
local cur = redis.call('HGET', KEYS[1], 'state')
if ARGV[4] ~= '' and cur ~= ARGV[4] then
  return {'conflict', cur or ''}
end
if cur and cur ~= ARGV[3] then
  redis.call('SREM', KEYS[3] .. cur, ARGV[1])
end
redis.call('HSET', KEYS[1], 'json', ARGV[2], 'state', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3] .. ARGV[3], ARGV[1])
return {'ok', ''}
"""


def _text(value: object) -> str:
    """A Redis reply (bytes here; str if a caller's client decodes) as text."""
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


def _free_field(product: str, resource: str) -> str:
    return f"{product}{_SEP}{resource}"


def observed_free_units(summary: ClusterSummary) -> dict[str, int]:
    """The free map a summary implies: free whole GPUs per product and free slices per MIG profile."""
    out: dict[str, int] = {}
    for p in summary.products:
        out[_free_field(p.product, WHOLE_GPU)] = p.free
    for m in summary.mig:
        key = _free_field(m.product, m.resource_name)
        out[key] = out.get(key, 0) + m.free
    return out


def _take_from_top(hist: tuple[int, ...], units: int) -> tuple[int, ...]:
    """Remove `units` from a nodes-by-free histogram, largest buckets first (the pessimistic assumption)."""
    counts = list(hist)
    k = len(counts) - 1
    while units > 0 and k > 0:
        if counts[k] == 0:
            k -= 1
            continue
        take = min(k, units)
        counts[k] -= 1
        counts[k - take] += 1
        units -= take
    while len(counts) > 1 and counts[-1] == 0:
        counts.pop()
    return tuple(counts)


def subtract_reservations(summary: ClusterSummary, reservations: Iterable[Reservation]) -> ClusterSummary:
    """The summary as the placer must see it: observed capacity minus what live reservations hold."""
    held: dict[tuple[str, str], int] = {}
    for r in reservations:
        if r.cluster == summary.cluster:
            held[(r.product, r.resource_name)] = held.get((r.product, r.resource_name), 0) + r.units
    if not held:
        return summary
    products: list[ProductCapacity] = []
    for p in summary.products:
        units = min(held.get((p.product, WHOLE_GPU), 0), p.free)
        if units <= 0:
            products.append(p)
            continue
        products.append(
            dataclasses.replace(
                p,
                allocated=p.allocated + units,
                free=p.free - units,
                nodes_by_free=_take_from_top(p.nodes_by_free, units),
                numa_blocks=_take_from_top(p.numa_blocks, units),
            )
        )
    migs: list[MigCapacity] = []
    for m in summary.mig:
        units = held.get((m.product, m.resource_name), 0)
        if units <= 0:
            migs.append(m)
            continue
        free = max(0, m.free - units)
        # Pessimistic: the reservation may land on the node with the most free slices; any free slice
        # still sits on some node, so the largest is at least 1 while anything is free.
        largest = max(min(free, m.largest_free_on_node - units), 1 if free else 0)
        migs.append(dataclasses.replace(m, free=free, largest_free_on_node=largest))
    return dataclasses.replace(summary, products=tuple(products), mig=tuple(migs))


class RedisStateStore:
    """broker.ports.StateStore on Redis (see the module docstring for the key schema)."""

    def __init__(self, redis_url: str, prefix: str = "gpufed") -> None:
        if not prefix or ":" in prefix:
            raise ValueError(f"prefix: must be non-empty and contain no ':' (got {prefix!r})")
        self._r: redis.Redis = redis.Redis.from_url(redis_url, decode_responses=False)
        self._p = prefix
        self._put_summary = self._r.register_script(_PUT_SUMMARY)
        self._reserve = self._r.register_script(_RESERVE)
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

    def ping(self) -> bool:
        try:
            return bool(self._r.ping())
        except redis.RedisError as e:
            raise StoreError(f"redis: {e}") from e

    # ------------------------------------------------------------------ capacity

    def put_summary(self, summary: ClusterSummary) -> ClusterSummary:
        free = observed_free_units(summary)
        args: list[Any] = [summary.cluster, _SUMMARY.dump_json(summary)]
        for field, units in free.items():
            args += [field, units]
        try:
            version = self._put_summary(
                keys=[
                    self._k("summary", summary.cluster),
                    self._k("free", summary.cluster),
                    self._k("clusters"),
                ],
                args=args,
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
            pipe.delete(self._k("summary", cluster), self._k("free", cluster))
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
        return [subtract_reservations(s, resv) for s in self.observed_summaries()]

    def _server_now(self) -> float:
        try:
            sec, usec = self._r.time()
        except redis.RedisError as e:
            raise StoreError(f"redis: time: {e}") from e
        return float(sec) + float(usec) / 1e6

    # ------------------------------------------------------------------ reservations

    def reserve(self, reservation: Reservation, now: float) -> bool:
        if reservation.units <= 0:
            raise ValueError(f"reservation.units: must be positive (got {reservation.units})")
        c = reservation.cluster
        try:
            ok = self._reserve(
                keys=[self._k("free", c), self._k("resv", c), self._k("resv-where")],
                args=[
                    reservation.job_id,
                    c,
                    _free_field(reservation.product, reservation.resource_name),
                    reservation.units,
                    repr(float(now)),
                    _RESERVATION.dump_json(reservation),
                    self._k("resv", ""),
                ],
            )
        except redis.RedisError as e:
            raise StoreError(f"redis: reserve {reservation.job_id} on {c}: {e}") from e
        return int(ok) == 1

    def _drop_reservation(self, job_id: str) -> bool:
        try:
            cluster = self._r.hget(self._k("resv-where"), job_id)
            if cluster is None:
                return False
            pipe = self._r.pipeline()
            pipe.hdel(self._k("resv", _text(cluster)), job_id)
            pipe.hdel(self._k("resv-where"), job_id)
            removed, _ = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: release {job_id}: {e}") from e
        return bool(removed)

    def release(self, job_id: str) -> None:
        """Forget the job's reservation (placement failed or was undone). Unknown job ids are fine."""
        self._drop_reservation(job_id)

    def confirm(self, job_id: str) -> bool:
        """The cluster now shows the job's pods, so observed capacity already counts them: stop holding.

        Returns whether a live reservation was held (False: it had expired or was released already)."""
        return self._drop_reservation(job_id)

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

    def create_job(self, record: JobRecord) -> JobRecord:
        idem = record.idempotency_key
        try:
            status, raw = self._create_job(
                keys=[
                    self._k("job", record.id),
                    self._k("jobs"),
                    self._k("jobs", "state", ""),
                    self._k("idem", idem) if idem else self._k("idem", ""),
                ],
                args=[
                    record.id,
                    _JOB.dump_json(record),
                    record.state.value,
                    "1" if idem else "0",
                    self._k("job", ""),
                ],
            )
        except redis.RedisError as e:
            raise StoreError(f"redis: create_job {record.id}: {e}") from e
        if status == b"exists":
            raise Conflict(f"job {record.id} already exists")
        return _JOB.validate_json(raw)

    def get_job(self, job_id: str) -> JobRecord | None:
        try:
            raw = self._r.hget(self._k("job", job_id), "json")
        except redis.RedisError as e:
            raise StoreError(f"redis: get_job {job_id}: {e}") from e
        return None if raw is None else _JOB.validate_json(raw)

    def save_job(self, record: JobRecord, expected_state: JobState | None = None) -> JobRecord:
        try:
            status, current = self._save_job(
                keys=[self._k("job", record.id), self._k("jobs"), self._k("jobs", "state", "")],
                args=[
                    record.id,
                    _JOB.dump_json(record),
                    record.state.value,
                    expected_state.value if expected_state is not None else "",
                ],
            )
        except redis.RedisError as e:
            raise StoreError(f"redis: save_job {record.id}: {e}") from e
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
