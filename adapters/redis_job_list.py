"""broker.core.ports.JobLister on Redis: paged job lists over an index in submission order.

Owns two index keys (P is the store prefix; the job records are adapters/redis_store.py's):

    P:jobs:order              zset  every job: member broker.core.job_list.position_of(created_at, id), score 0
    P:jobs:order:tenant:<t>   zset  the same, for one tenant's jobs

All scores are 0, so a zset is ordered by its members' bytes: (submitted time in microseconds, id). The
members are written once, when the job is stored (redis_store's create and restore scripts add them
with `ORDER_INDEX_LUA`), and never moved or removed: a job changing state, cluster or attempt does not
touch the index, which is why a walk from position to position sees each job once.

A page is one Lua script (one round trip): ZRANGEBYLEX from just after the position, at most the
query's scan budget (+1 to know whether more follow), each entry's state checked on its record's hash
field and, for a cluster or name filter, its JSON decoded; at most `limit` records come back with the
position to continue after. The cost of a page follows `limit`, not the number of jobs held.

A reader that keeps items (broker.core.job_list.KeptItems: the API keeps each job's encoded item)
pages without a cluster or name filter in two calls: `_IDS` walks the same way but answers ids only,
after the ids of the jobs written since the reader's cursor in P:changes (every job write appends to
it in its own script, adapters/redis_scripts.py), which the reader drops; `_DOCS` then reads the
documents of the page's jobs it does not keep. A cursor the stream cannot answer (older than its
first entry, more than _MOST_CHANGES behind, the stream gone) drops everything kept. A page of jobs
unchanged since the last one moves ids, not records.

Records stored before the index existed (or written by save_job alone, as some tests do) are added to
it the first time a page finds the index shorter than P:jobs (`backfill`, once, O(jobs)).
"""

from __future__ import annotations

from typing import Any

import redis
from pydantic import TypeAdapter

from broker.core.errors import StoreError
from broker.core.job_list import JobDocPage, JobPage, JobQuery, KeptItems, position_of
from broker.core.model import JobRecord

__all__ = ["ORDER_INDEX_LUA", "RedisJobList", "order_keys"]

_JOB = TypeAdapter(JobRecord)

# What the create and restore scripts run once a job is stored: KEYS order and tenant order, the
# member (position) passed as an argument. Used by adapters/redis_store.py.
ORDER_INDEX_LUA = """
local function index_job(order, tenant_order, member)
  redis.call('ZADD', order, 0, member)
  redis.call('ZADD', tenant_order, 0, member)
end
"""

# Both page scripts start the same way: the index entries after the cursor (at most the scan budget +
# 1) and the wanted states as a set.
_INDEX_RANGE = """
local start = '-'
if ARGV[1] ~= '' then start = '(' .. ARGV[1] end
local limit = tonumber(ARGV[2])
local budget = tonumber(ARGV[3])
local entries
if budget then
  entries = redis.call('ZRANGEBYLEX', KEYS[1], start, '+', 'LIMIT', 0, budget + 1)
else
  entries = redis.call('ZRANGEBYLEX', KEYS[1], start, '+')
end
local want = nil
if ARGV[5] ~= '' then
  want = {}
  for s in string.gmatch(ARGV[5], '[^,]+') do want[s] = true end
end
"""

# KEYS: the index walked (global or the tenant's), jobs set, global order index. ARGV: after ('' = from
# the start), limit ('' = no limit), scan budget ('' = no bound), job-key prefix, wanted states (','
# separated, '' = any), cluster ('' = any), name ('' = any), compare the index with the jobs ('1'/'0').
# Returns {'backfill'} when the global index is shorter than the jobs set (two O(1) counts), else
# {next position or '', id, json, id, json, ...}.
_PAGE = (
    """
if ARGV[8] == '1' and redis.call('ZCARD', KEYS[3]) < redis.call('SCARD', KEYS[2]) then
  return {'backfill'}
end
"""
    + _INDEX_RANGE
    + """local out = {''}
local taken = 0
local last = nil
local seen = #entries
if budget and seen > budget then seen = budget end
local stopped = false
for i = 1, seen do
  local member = entries[i]
  last = member
  local id = string.sub(member, 22)
  local key = ARGV[4] .. id
  local keep = true
  if want then
    local st = redis.call('HGET', key, 'state')
    keep = st and want[st] or false
  end
  local raw = false
  if keep then
    raw = redis.call('HGET', key, 'json')
    keep = raw and true or false
  end
  if keep and (ARGV[6] ~= '' or ARGV[7] ~= '') then
    local rec = cjson.decode(raw)
    if ARGV[6] ~= '' and rec['cluster'] ~= ARGV[6] then keep = false end
    if keep and ARGV[7] ~= '' and rec['request']['name'] ~= ARGV[7] then keep = false end
  end
  if keep then
    out[#out + 1] = id
    out[#out + 1] = raw
    taken = taken + 1
    if limit and taken >= limit then
      stopped = i < #entries
      break
    end
  end
end
if stopped or (budget and #entries > budget) then out[1] = last end
return out
"""
)

# The same walk for a reader that keeps items (no cluster or name filter: those need the records): it
# answers the ids only, after the job changes since the reader's cursor. KEYS: the index walked, jobs
# set, global order index, change stream. ARGV: after, limit, scan budget, job-key prefix, wanted states,
# cursor ('' = none), most changes to send, compare ('1'/'0'). Returns {'backfill'} as _PAGE, else
# {next position or '', newest change id, '1' when the reader must drop everything it keeps (no cursor,
# or changes it cannot be sent: trimmed, too many) else '0', n, n changed job ids, the page's ids...}.
_IDS = (
    """
if ARGV[8] == '1' and redis.call('ZCARD', KEYS[3]) < redis.call('SCARD', KEYS[2]) then
  return {'backfill'}
end
local function newest()
  local last = redis.call('XREVRANGE', KEYS[4], '+', '-', 'COUNT', 1)
  if last[1] then return last[1][1] end
  return '0-0'
end
local function before(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  if not ams or not bms then return true end
  ams, bms = tonumber(ams), tonumber(bms)
  return ams < bms or (ams == bms and tonumber(aseq) < tonumber(bseq))
end
local cursor = ARGV[6]
local out = {'', cursor, '0', 0}
local changed = {}
if cursor == '' then
  out[2], out[3] = newest(), '1'
else
  local head = redis.call('XRANGE', KEYS[4], '-', '+', 'COUNT', 1)
  if (head[1] and before(cursor, head[1][1])) or (not head[1] and cursor ~= '0-0') then
    out[2], out[3] = newest(), '1'  -- entries after the cursor may have been trimmed; or the stream is gone
  else
    local most = tonumber(ARGV[7])
    local entries = redis.call('XRANGE', KEYS[4], '(' .. cursor, '+', 'COUNT', most + 1)
    if #entries > most then
      out[2], out[3] = newest(), '1'
    else
      for i = 1, #entries do
        local f = entries[i][2]
        for k = 1, #f, 2 do
          if f[k] == 'j' then changed[#changed + 1] = f[k + 1] end
        end
        out[2] = entries[i][1]
      end
    end
  end
end
out[4] = #changed
for i = 1, #changed do out[#out + 1] = changed[i] end
"""
    + _INDEX_RANGE
    + """local taken, last, stopped = 0, nil, false
local seen = #entries
if budget and seen > budget then seen = budget end
for i = 1, seen do
  local member = entries[i]
  last = member
  local id = string.sub(member, 22)
  local keep = true
  if want then
    local st = redis.call('HGET', ARGV[4] .. id, 'state')
    keep = st and want[st] or false
  end
  if keep then
    out[#out + 1] = id
    taken = taken + 1
    if limit and taken >= limit then
      stopped = i < #entries
      break
    end
  end
end
if stopped or (budget and #entries > budget) then out[1] = last end
return out
"""
)

# The documents of the jobs a reader does not keep. ARGV: job-key prefix, wanted states ('' = any), ids.
# Returns each one's json, or false when it is gone or has left the wanted states since the walk.
_DOCS = """
local want = nil
if ARGV[2] ~= '' then
  want = {}
  for s in string.gmatch(ARGV[2], '[^,]+') do want[s] = true end
end
local out = {}
for i = 3, #ARGV do
  local key = ARGV[1] .. ARGV[i]
  local raw = false
  if want then
    local v = redis.call('HMGET', key, 'state', 'json')
    if v[1] and want[v[1]] then raw = v[2] end
  else
    raw = redis.call('HGET', key, 'json')
  end
  out[#out + 1] = raw
end
return out
"""
_MOST_CHANGES = 10_000  # more since a reader's cursor: it drops what it keeps and reads the page afresh


def order_keys(prefix: str, tenant: str) -> tuple[str, str]:
    """The global order index and the tenant's, for a job of `tenant` (the create script's KEYS)."""
    return f"{prefix}:jobs:order", f"{prefix}:jobs:order:tenant:{tenant}"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisJobList:
    """Pages of jobs in submission order (see the module docstring)."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self._r = client
        self._p = prefix
        self._page = client.register_script(_PAGE)
        self._ids = client.register_script(_IDS)
        self._docs = client.register_script(_DOCS)

    def page_jobs(self, query: JobQuery, after: str | None = None) -> JobPage:
        page = self.page_job_docs(query, after)
        return JobPage(
            tuple(_JOB.validate_json(raw) for raw in page.docs if raw is not None), page.next_after
        )

    def page_job_docs(
        self, query: JobQuery, after: str | None = None, kept: KeptItems | None = None
    ) -> JobDocPage:
        """The page's records as stored (their JSON documents), undecoded: the API encodes its answer
        from them without building JobRecords (broker.api.list_items). With `kept` (read one page at a
        time), the items of jobs written since its cursor are dropped from it and the documents of
        those it still keeps are not sent (None): an unchanged page reads ids, not records."""
        states = ",".join(s.value for s in query.states)
        if kept is None or query.cluster is not None or query.name is not None:
            answer = self._walk(self._page, query, after, [states, query.cluster or "", query.name or ""])
            return JobDocPage(
                tuple(_text(i) for i in answer[1::2]), tuple(answer[2::2]), _text(answer[0]) or None
            )
        answer = self._walk(self._ids, query, after, [states, kept.cursor, _MOST_CHANGES], changes=True)
        n = int(answer[3])
        if answer[2] == b"1":
            kept.clear()
        else:
            kept.forget(_text(i) for i in answer[4 : 4 + n])
        kept.cursor = _text(answer[1])
        ids = tuple(_text(i) for i in answer[4 + n :])
        missing = [i for i in ids if kept.get(i) is None]
        try:
            fetched = (
                dict(zip(missing, self._docs(args=[f"{self._p}:job:", states, *missing]), strict=True))
                if missing
                else {}
            )
        except redis.RedisError as e:
            raise StoreError(f"redis: list jobs: {e}") from e
        out_ids: list[str] = []
        docs: list[bytes | None] = []
        for i in ids:
            if i in fetched:
                if fetched[i] is None:
                    continue  # gone, or out of the wanted states since the walk
                docs.append(fetched[i])
            else:
                docs.append(None)  # kept, and current
            out_ids.append(i)
        return JobDocPage(tuple(out_ids), tuple(docs), _text(answer[0]) or None)

    def _walk(
        self, script: Any, query: JobQuery, after: str | None, extra: list[Any], changes: bool = False
    ) -> Any:
        order, tenant_order = order_keys(self._p, query.tenant or "")
        index = order if query.tenant is None else tenant_order
        budget = query.scan_budget()
        args: list[Any] = [
            after or "",
            "" if query.limit is None else query.limit,
            "" if budget is None else budget,
            f"{self._p}:job:",
            *extra,
        ]
        keys = [index, f"{self._p}:jobs", order, *([f"{self._p}:changes"] if changes else [])]
        try:
            answer = script(keys=keys, args=[*args, "1"])
            if answer and answer[0] == b"backfill":
                self.backfill()  # once; a record that vanished meanwhile must not loop
                answer = script(keys=keys, args=[*args, "0"])
        except redis.RedisError as e:
            raise StoreError(f"redis: list jobs: {e}") from e
        return answer

    def backfill(self) -> int:
        """Add every stored job missing from the order index (records written before the index
        existed). Returns how many were added."""
        try:
            ids = {_text(i) for i in self._r.smembers(f"{self._p}:jobs")}
            indexed = {_text(m)[21:] for m in self._r.zrange(f"{self._p}:jobs:order", 0, -1)}
            missing = sorted(ids - indexed)
            if not missing:
                return 0
            pipe = self._r.pipeline(transaction=False)
            for job_id in missing:
                pipe.hget(f"{self._p}:job:{job_id}", "json")
            rows = pipe.execute()
            pipe = self._r.pipeline(transaction=False)
            added = 0
            for raw in rows:
                if raw is None:
                    continue
                record = _JOB.validate_json(raw)
                member = position_of(record.created_at, record.id)
                for key in order_keys(self._p, record.request.tenant):
                    pipe.zadd(key, {member: 0})
                added += 1
            pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: index jobs: {e}") from e
        return added
