"""The Lua scripts of adapters.redis_store: every job, reservation and fence write that must be atomic.

Owns the scripts' text and their KEYS / ARGV contracts (each script's comment); the store registers them.
Every job write (create, save, restore) also appends the job id and the writer's id to the capped change
stream P:changes (adapters.redis_changes): the leader's job cache follows every other writer by it.
"""

from __future__ import annotations

from adapters.redis_job_list import ORDER_INDEX_LUA
from adapters.redis_recovery_gate import PENDING_LUA

# The fencing check every control-loop write starts with: `tok` is the writer's lease token ('' = an
# unfenced writer, e.g. the API), `key` P:leader-token. True when the write must be refused.
STALE_TOKEN = """
local function stale_token(key, tok)
  if tok == '' then return false end
  return redis.call('GET', key) ~= tok
end
"""

# KEYS: summary, clusters. ARGV: cluster, summary json, published_at, health, heartbeat. Returns the new
# version. The summary's published_at, health and heartbeat are also kept as fields of their own: a
# poller's liveness is read from them without the summaries (PUBLICATIONS), and a heartbeat moves them
# without a new version (BEAT_SUMMARY). 'written' counts every write, heartbeats included. A writer that
# does not send them leaves none (an older broker's shard): readers then go by the JSON.
PUT_SUMMARY = """
local v = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HINCRBY', KEYS[1], 'written', 1)
if ARGV[5] then
  redis.call('HSET', KEYS[1], 'json', ARGV[2], 'published', ARGV[3], 'health', ARGV[4], 'heartbeat', ARGV[5])
else
  redis.call('HSET', KEYS[1], 'json', ARGV[2])
  redis.call('HDEL', KEYS[1], 'published', 'health', 'heartbeat')
end
redis.call('SADD', KEYS[2], ARGV[1])
return v
"""

# A heartbeat: the summary written at version ARGV[1] still holds, observed again at heartbeat ARGV[2]
# and written at ARGV[3]. KEYS: summary. Moves those fields and 'written', not the version, so the
# placers' caches read nothing again and no reservation's compare-and-set fails for it. Returns 1, or 0
# when the summary is not at that version (another write came, or Redis lost it): write it in full.
BEAT_SUMMARY = """
if redis.call('HGET', KEYS[1], 'version') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'heartbeat', ARGV[2], 'published', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'written', 1)
return 1
"""

# ARGV: the summary-key prefix, then cluster names. Returns, for each, its summary's version, ledger,
# writes, heartbeat and write time ('' for what is missing): what the placers' caches compare every pass
# (RedisStateStore.cluster_marks), in one reply instead of a command per cluster. Called for a bounded
# number of clusters at a time: a script blocks Redis.
SUMMARY_MARKS = """
local out = {}
for i = 2, #ARGV do
  local f = redis.call('HMGET', ARGV[1] .. ARGV[i], 'version', 'ledger', 'written', 'heartbeat', 'published')
  for j = 1, 5 do out[#out + 1] = f[j] or '' end
end
return out
"""

# ARGV: the summary-key prefix, then cluster names. Returns, for each, its summary's version, when its
# poller last wrote it and the health written ('' for what is missing): a few bytes per cluster however
# large the summaries are. Called for a bounded number of clusters at a time: a script blocks Redis.
PUBLICATIONS = """
local out = {}
for i = 2, #ARGV do
  local f = redis.call('HMGET', ARGV[1] .. ARGV[i], 'version', 'published', 'health')
  out[#out + 1] = f[1] or ''
  out[#out + 1] = f[2] or ''
  out[#out + 1] = f[3] or ''
end
return out
"""

# One job's reservation on a cluster already checked to be at the placer's (version, ledger): refused
# (-1) when a live reservation of a newer attempt, or of the same attempt by another placer, holds the
# job; else any older reservation of the job is dropped (its cluster's ledger moves) and this one held
# (1). KEYS-like arguments: resv:<cluster>, resv-where, the resv- and summary-key prefixes.
RESERVE_ONE = """
local function reserve_one(resv, resv_where, resv_prefix, summary_prefix, job, cluster, attempt, owner, now, json)
  local where = redis.call('HGET', resv_where, job)
  if where then
    local old = redis.call('HGET', resv_prefix .. where, job)
    if old then
      local o = cjson.decode(old)
      local live = tonumber(o['expires_at']) > now
      local oa = tonumber(o['attempt'])
      if live and (oa > attempt or (oa == attempt and o['owner'] ~= owner)) then return -1 end
      redis.call('HDEL', resv_prefix .. where, job)
      if where ~= cluster then redis.call('HINCRBY', summary_prefix .. where, 'ledger', 1) end
    end
  end
  redis.call('HSET', resv, job, json)
  redis.call('HSET', resv_where, job, cluster)
  return 1
end
"""

# KEYS: summary:<cluster>, resv:<cluster>, resv-where, leader-token. ARGV: job_id, cluster, attempt,
# owner, now, expected version, expected ledger, json, resv-key prefix, summary-key prefix, token.
# Returns {status, version, ledger}: status 1 reserved, 0 the cluster changed since the placer read it
# (version/ledger are the current ones), -1 the job's reservation is held by another placer or a newer
# attempt, -2 the cluster has no summary, -3 the writer's lease token is stale.
RESERVE = (
    STALE_TOKEN
    + RESERVE_ONE
    + """
if stale_token(KEYS[4], ARGV[11]) then return {-3, '0', '0'} end
local cur = redis.call('HMGET', KEYS[1], 'version', 'ledger')
if not cur[1] then return {-2, '0', '0'} end
local version, ledger = cur[1], cur[2] or '0'
if version ~= ARGV[6] or ledger ~= ARGV[7] then return {0, version, ledger} end
local code = reserve_one(KEYS[2], KEYS[3], ARGV[9], ARGV[10], ARGV[1], ARGV[2], tonumber(ARGV[3]),
  ARGV[4], tonumber(ARGV[5]), ARGV[8])
if code ~= 1 then return {code, version, ledger} end
ledger = redis.call('HINCRBY', KEYS[1], 'ledger', 1)
return {1, version, tostring(ledger)}
"""
)

# KEYS: summary:<cluster>, resv:<cluster>, resv-where, leader-token. ARGV: cluster, owner, now, expected
# version, expected ledger, resv-key prefix, summary-key prefix, token, then (job_id, attempt, json) per
# reservation. Several reservations of one placer on one cluster, compared once against the state they
# were all decided on (the placer assumed each into it) and held in order. Returns {status, version,
# ledger, code per reservation}: status as RESERVE's (0, -2, -3: nothing held), each code 1 held or -1
# held by another placer or a newer attempt; the ledger moves once per reservation held.
RESERVE_MANY = (
    STALE_TOKEN
    + RESERVE_ONE
    + """
if stale_token(KEYS[4], ARGV[8]) then return {-3, '0', '0'} end
local cur = redis.call('HMGET', KEYS[1], 'version', 'ledger')
if not cur[1] then return {-2, '0', '0'} end
local version, ledger = cur[1], cur[2] or '0'
if version ~= ARGV[4] or ledger ~= ARGV[5] then return {0, version, ledger} end
local out = {1, version, ledger}
local now, held = tonumber(ARGV[3]), 0
for i = 9, #ARGV, 3 do
  local code = reserve_one(KEYS[2], KEYS[3], ARGV[6], ARGV[7], ARGV[i], ARGV[1], tonumber(ARGV[i + 1]),
    ARGV[2], now, ARGV[i + 2])
  out[#out + 1] = code
  if code == 1 then held = held + 1 end
end
if held > 0 then out[3] = tostring(redis.call('HINCRBY', KEYS[1], 'ledger', held)) end
return out
"""
)

# KEYS: resv-where. ARGV: job_id, attempt ('' = any), owner ('' = any), resv-key prefix, summary prefix.
# Removes the job's reservation if it matches; returns 1 when one was removed.
RELEASE = """
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
PRUNE = """
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

# Every job write notes the job id and its writer in the change stream (KEYS[c], ARGV writer, maxlen).
NOTE_CHANGE = """
local function note_change(changes, job, writer, maxlen)
  redis.call('XADD', changes, 'MAXLEN', '~', maxlen, '*', 'j', job, 'w', writer)
end
"""

# The event of a job write, appended in the same script: to the job's stream (KEYS[a]) and to the
# capped fleet-wide stream (KEYS[a+1]) when ARGV[e] is not ''.
APPEND_EVENT = """
local function append_event(stream, fleet, payload, maxlen)
  if payload ~= '' then
    redis.call('XADD', stream, '*', 'e', payload)
    redis.call('XADD', fleet, 'MAXLEN', '~', maxlen, '*', 'e', payload)
  end
end
"""

# A job that reached an end is indexed by when (Redis's clock) in P:finished, for the retention purge
# (adapters.redis_retention). KEYS[n] given by the caller.
NOTE_FINISHED = """
local function note_finished(key, id, state)
  if key ~= '' and (state == 'SUCCEEDED' or state == 'FAILED' or state == 'CANCELLED' or state == 'LOST') then
    local t = redis.call('TIME')
    redis.call('ZADD', key, 'NX', t[1], id)
  end
end
"""

# KEYS: job, jobs, state-set prefix (as key 3 only for cluster-slot hygiene), idem (or ''), events:<id>,
# events, run-id marker, changes, name:<tenant>:<name> (or ''), order index, tenant order index, recovery
# pending (adapters.redis_recovery_gate). ARGV: id,
# json, state, idem key present ('1'/'0'), job-key prefix, event json, stream maxlen, marker required
# ('1'/'0'), writer, changes maxlen, order position, idempotency key TTL seconds ('0': none).
# Returns {'created', json} or {'existing', json} or {'exists', ''} or {'recovering', ''} or
# {'name-taken', '<id> <state>'} (a live job of the tenant holds the name; a finished one's is taken over)
# or {'unvouched', pending clusters} (a key a rebuild cannot vouch for yet).
CREATE_JOB = (
    APPEND_EVENT
    + NOTE_CHANGE
    + ORDER_INDEX_LUA
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
    + PENDING_LUA
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists', ''} end
local holder = KEYS[9] ~= '' and redis.call('GET', KEYS[9])
if holder then
  local held = redis.call('HGET', ARGV[5] .. holder, 'state')
  if held and held ~= 'SUCCEEDED' and held ~= 'FAILED' and held ~= 'CANCELLED' then
    return {'name-taken', holder .. ' ' .. held}
  end
end
if KEYS[9] ~= '' then redis.call('SET', KEYS[9], ARGV[1]) end
redis.call('HSET', KEYS[1], 'json', ARGV[2], 'state', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3] .. ARGV[3], ARGV[1])
if ARGV[4] == '1' then
  if tonumber(ARGV[12] or '0') > 0 then redis.call('SET', KEYS[4], ARGV[1], 'EX', ARGV[12])
  else redis.call('SET', KEYS[4], ARGV[1]) end
end
index_job(KEYS[10], KEYS[11], ARGV[11])
append_event(KEYS[5], KEYS[6], ARGV[6], ARGV[7])
note_change(KEYS[8], ARGV[1], ARGV[9], ARGV[10])
return {'created', ARGV[2]}
"""
)

# KEYS: job, jobs, state-set prefix, events:<id>, events, leader-token, changes, finished. ARGV: id, json, new state,
# expected state ('' = unconditional), event json ('' = none), stream maxlen, token ('' = unfenced),
# expected attempt ('' = any), attempt, writer, changes maxlen.
# Returns {'ok', ''} or {'conflict', current state or ''} or {'fenced', current token or ''}.
SAVE_JOB = (
    APPEND_EVENT
    + NOTE_CHANGE
    + NOTE_FINISHED
    + STALE_TOKEN
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
note_change(KEYS[7], ARGV[1], ARGV[10], ARGV[11])
note_finished(KEYS[8] or '', ARGV[1], ARGV[3])
return {'ok', ''}
"""
)

# KEYS: fenced, leader-token. ARGV: cluster, reason ('' = unfence), token. Returns 1 when changed,
# 0 when not, -1 when the token is stale.
FENCE = (
    STALE_TOKEN
    + """
if stale_token(KEYS[2], ARGV[3]) then return -1 end
if ARGV[2] == '' then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
"""
)

# KEYS: job, jobs, state-set prefix, idem (or ''), events:<id>, events, changes, order index, tenant order
# index, finished. ARGV: id, json, state, idem key present, event json, stream maxlen, writer, changes
# maxlen, order position, idempotency key TTL seconds ('0': none). A record rebuilt from a member cluster: written only if the job is
# unknown; its idempotency key is set only if unset. Returns 1 when written.
RESTORE_JOB = (
    APPEND_EVENT
    + NOTE_CHANGE
    + NOTE_FINISHED
    + ORDER_INDEX_LUA
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'json', ARGV[2], 'state', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('SADD', KEYS[3] .. ARGV[3], ARGV[1])
if ARGV[4] == '1' then
  if tonumber(ARGV[10] or '0') > 0 then redis.call('SET', KEYS[4], ARGV[1], 'NX', 'EX', ARGV[10])
  else redis.call('SET', KEYS[4], ARGV[1], 'NX') end
end
index_job(KEYS[8], KEYS[9], ARGV[9])
append_event(KEYS[5], KEYS[6], ARGV[5], ARGV[6])
note_change(KEYS[7], ARGV[1], ARGV[7], ARGV[8])
note_finished(KEYS[10] or '', ARGV[1], ARGV[3])
return 1
"""
)
