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

Records stored before the index existed (or written by save_job alone, as some tests do) are added to
it the first time a page finds the index shorter than P:jobs (`backfill`, once, O(jobs)).
"""

from __future__ import annotations

from typing import Any

import redis
from pydantic import TypeAdapter

from broker.core.errors import StoreError
from broker.core.job_list import JobDocPage, JobPage, JobQuery, position_of
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

# KEYS: the index walked (global or the tenant's), jobs set, global order index. ARGV: after ('' = from
# the start), limit ('' = no limit), scan budget ('' = no bound), job-key prefix, wanted states (','
# separated, '' = any), cluster ('' = any), name ('' = any), compare the index with the jobs ('1'/'0').
# Returns {'backfill'} when the global index is shorter than the jobs set (two O(1) counts), else
# {next position or '', json, json, ...}.
_PAGE = """
if ARGV[8] == '1' and redis.call('ZCARD', KEYS[3]) < redis.call('SCARD', KEYS[2]) then
  return {'backfill'}
end
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
local out = {''}
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

    def page_jobs(self, query: JobQuery, after: str | None = None) -> JobPage:
        page = self.page_job_docs(query, after)
        return JobPage(tuple(_JOB.validate_json(raw) for raw in page.docs), page.next_after)

    def page_job_docs(self, query: JobQuery, after: str | None = None) -> JobDocPage:
        """The page's records as stored (their JSON documents), undecoded: the API encodes its answer
        from them without building JobRecords (broker.api.list_items)."""
        order, tenant_order = order_keys(self._p, query.tenant or "")
        index = order if query.tenant is None else tenant_order
        budget = query.scan_budget()
        args: list[Any] = [
            after or "",
            "" if query.limit is None else query.limit,
            "" if budget is None else budget,
            f"{self._p}:job:",
            ",".join(s.value for s in query.states),
            query.cluster or "",
            query.name or "",
        ]
        keys = [index, f"{self._p}:jobs", order]
        try:
            answer = self._page(keys=keys, args=[*args, "1"])
            if answer and answer[0] == b"backfill":
                self.backfill()  # once; a record that vanished meanwhile must not loop
                answer = self._page(keys=keys, args=[*args, "0"])
        except redis.RedisError as e:
            raise StoreError(f"redis: list jobs: {e}") from e
        return JobDocPage(tuple(answer[1:]), _text(answer[0]) or None)

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
