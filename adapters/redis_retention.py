"""Retention of finished jobs in Redis: a job's record, its event stream and its keys go some time after
it ended, so Redis holds what is running plus a bounded tail (issue 48 finding 3: 8.5 KB per job forever).

    P:finished        zset  job id -> when it ended (Redis's clock), written by the save and restore scripts
                            (adapters.redis_scripts NOTE_FINISHED) when a record reaches an end state
    P:gone:<id>       str   "<tenant> <epoch>" once purged, for `finishedJobRetentionSeconds` more, so that
                            GET answers 410 with when it was removed (broker.api.lost.answer_removed)

Retention (mixed into adapters.redis_store.RedisStateStore)
    purge_finished(retention_seconds, limit)   one batch: every job that ended more than
        `retention_seconds` ago loses its record, its event stream, its kept attempt logs, its place in the job indexes (P:jobs,
        the state sets, the order indexes), its name (if it still holds it) and its Idempotency-Key (if it
        still names it); a record found not ended (written again meanwhile) is only taken off the index.
        Atomic per batch (one script); returns how many went.
    removed_job(job_id) -> (tenant, epoch) | None

RetentionLoop(store, retention_seconds, interval)  a daemon thread that purges every `interval` seconds
    (at most a tenth of the retention, at least 1 s), batch after batch while full batches come back.

Idempotency-Keys expire on their own (`idempotencyKeyTtlSeconds`, SET EX in the create script); the fleet
event stream and the change stream are capped by length; the audit trail by age and count
(adapters.audit_store).
"""

from __future__ import annotations

import logging
import threading

import redis
from redis.commands.core import Script

from broker.core.errors import StoreError

__all__ = ["PURGE_FINISHED", "Retention", "RetentionLoop"]

log = logging.getLogger(__name__)

BATCH = 500

# KEYS: finished, jobs. ARGV: retention seconds, limit, prefix (with the trailing ':'), gone TTL seconds.
# Returns the number of jobs purged.
PURGE_FINISHED = """
local now = tonumber(redis.call('TIME')[1])
local cutoff = now - tonumber(ARGV[1])
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', cutoff, 'LIMIT', 0, tonumber(ARGV[2]))
local p = ARGV[3]
local ended = {SUCCEEDED = true, FAILED = true, CANCELLED = true, LOST = true}
local purged = 0
for _, id in ipairs(ids) do
  local jk = p .. 'job:' .. id
  local state = redis.call('HGET', jk, 'state')
  if state and not ended[state] then
    redis.call('ZREM', KEYS[1], id)
  else
    local raw = redis.call('HGET', jk, 'json')
    local tenant = ''
    if raw then
      local ok, doc = pcall(cjson.decode, raw)
      if ok and type(doc) == 'table' then
        local req = doc['request']
        if type(req) == 'table' then
          tenant = tostring(req['tenant'] or '')
          local name = req['name']
          if type(name) == 'string' then
            local nk = p .. 'name:' .. tenant .. ':' .. name
            if redis.call('GET', nk) == id then redis.call('DEL', nk) end
          end
          redis.call('ZREM', p .. 'jobs:order:tenant:' .. tenant, id)
        end
        local key = doc['idempotency_key']
        if type(key) == 'string' then
          local ik = p .. 'idem:' .. key
          if redis.call('GET', ik) == id then redis.call('DEL', ik) end
        end
      end
    end
    redis.call('DEL', jk, p .. 'events:' .. id, p .. 'attempt-logs:' .. id)
    redis.call('SREM', KEYS[2], id)
    if state then redis.call('SREM', p .. 'jobs:state:' .. state, id) end
    redis.call('ZREM', p .. 'jobs:order', id)
    redis.call('ZREM', KEYS[1], id)
    redis.call('SET', p .. 'gone:' .. id, tenant .. ' ' .. now, 'EX', math.max(1, math.floor(tonumber(ARGV[4]))))
    purged = purged + 1
  end
end
return purged
"""


class Retention:
    """Mixed into RedisStateStore, which sets these."""

    _r: redis.Redis

    def _k(self, *parts: str) -> str:
        raise NotImplementedError

    @property
    def _purge_script(self) -> Script:
        script: Script | None = getattr(self, "_purge_finished_script", None)
        if script is None:
            script = self._r.register_script(PURGE_FINISHED)
            self._purge_finished_script = script
        return script

    def purge_finished(self, retention_seconds: float, limit: int = BATCH) -> int:
        """One batch of finished jobs past `retention_seconds` removed; how many."""
        try:
            n = self._purge_script(
                keys=[self._k("finished"), self._k("jobs")],
                args=[retention_seconds, limit, self._k(""), max(1.0, retention_seconds)],
            )
        except redis.RedisError as e:
            raise StoreError(f"redis: purge_finished: {e}") from e
        return int(n)

    def removed_job(self, job_id: str) -> tuple[str, float] | None:
        """(tenant, when) of a finished job the retention removed, while that is remembered."""
        try:
            raw = self._r.get(self._k("gone", job_id))
        except redis.RedisError as e:
            raise StoreError(f"redis: removed_job {job_id}: {e}") from e
        if raw is None:
            return None
        tenant, _, at = (raw.decode() if isinstance(raw, bytes) else str(raw)).rpartition(" ")
        try:
            return tenant, float(at)
        except ValueError:
            return None


class RetentionLoop:
    """Purges finished jobs past the retention, on a daemon thread, until stop()."""

    def __init__(self, store: Retention, retention_seconds: float, interval: float | None = None) -> None:
        self._store = store
        self._retention = retention_seconds
        self._interval = interval if interval is not None else min(60.0, max(1.0, retention_seconds / 10))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpufed-retention", daemon=True)
        self.purged = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)

    def once(self) -> int:
        total = 0
        while not self._stop.is_set():
            n = self._store.purge_finished(self._retention)
            total += n
            if n < BATCH:
                break
        self.purged += total
        return total

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                n = self.once()
                if n:
                    log.info("retention: %d finished job(s) older than %.0f s removed", n, self._retention)
            except StoreError as exc:  # Redis away: the next round tries again
                log.debug("retention: %s", exc)
            except Exception:  # never end the broker
                log.exception("retention: purging finished jobs failed")
