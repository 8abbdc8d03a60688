"""The leader lease on Redis (broker.core.ports.LeaderLease): one holder at a time, with fencing tokens.

Keys (prefix P, the store's): P:leader = "<holder>|<token>" with a TTL of 0.9 x leaseSeconds (followers
try every 0.1 x leaseSeconds, so a dead leader's successor holds the lease within leaseSeconds of the
dead one's last renew); P:leader-token =
the fencing token, INCR'd by every *new* holder. acquire_or_renew is one Lua script: a free lease is
taken with a new token; the holder's own lease is renewed (same token); someone else's is left alone.
release deletes the lease only if it is still ours, so the next replica takes over at once instead of
after the TTL. The token is what adapters.redis_store's control-loop writes carry: a write whose token
is not the current one is refused, so an ex-leader that was paused (GC, SIGSTOP, a partition) past its
TTL cannot write after a new leader took over.
"""

from __future__ import annotations

import redis

from adapters import redis_connect
from adapters.redis_store import CONNECT_TIMEOUT_SECONDS
from broker.core.errors import StoreError

# The lease key lives this share of leaseSeconds; followers try every (1 - TTL_SHARE) of it.
TTL_SHARE = 0.9

# KEYS: leader, leader-token. ARGV: holder, ttl ms. Returns the token (> 0) when the caller holds the
# lease now, or -token of the current holder.
_ACQUIRE = """
local cur = redis.call('GET', KEYS[1])
if not cur then
  local t = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], ARGV[1] .. '|' .. t, 'PX', ARGV[2])
  return t
end
local holder, t = string.match(cur, '^(.*)|(%d+)$')
if holder == ARGV[1] and redis.call('GET', KEYS[2]) == t then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(t)
end
return -tonumber(t or '0')
"""

# KEYS: leader. ARGV: holder. Deletes the lease if the holder still has it; returns 1 when it did.
_RELEASE = """
local cur = redis.call('GET', KEYS[1])
if cur and string.match(cur, '^(.*)|%d+$') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisLease:
    """A leader lease for `holder` under the store prefix; tokens are Redis-wide monotonic per prefix."""

    def __init__(self, redis_url: str, prefix: str, holder: str, lease_seconds: float = 10.0) -> None:
        if lease_seconds <= 0:
            raise ValueError(f"leaseSeconds: must be positive (got {lease_seconds})")
        if "|" in holder or not holder:
            raise ValueError(f"holder: must be non-empty without '|' (got {holder!r})")
        # Each call is bounded well inside the lease: a renew that hangs must not outlive it.
        timeout = max(0.2, min(lease_seconds / 3, 5.0))
        self._r: redis.Redis = redis_connect.client_for(
            redis_url,
            socket_timeout=timeout,
            socket_connect_timeout=min(timeout, CONNECT_TIMEOUT_SECONDS),
        )
        self._leader = f"{prefix}:leader"
        self._token_key = f"{prefix}:leader-token"
        self.holder = holder
        self.lease_seconds = lease_seconds
        self.ttl_seconds = lease_seconds * TTL_SHARE
        self._acquire = self._r.register_script(_ACQUIRE)
        self._release = self._r.register_script(_RELEASE)

    def acquire_or_renew(self) -> int | None:
        """Take or keep the lease: the fencing token while held, None when another replica holds it."""
        try:
            token = int(
                self._acquire(
                    keys=[self._leader, self._token_key],
                    args=[self.holder, max(1, int(self.ttl_seconds * 1000))],
                )
            )
        except redis.RedisError as e:
            raise StoreError(f"redis: leader lease: {e}") from e
        return token if token > 0 else None

    def holder_now(self) -> str | None:
        """Who holds the lease now ("<holder>|<token>"), or None when it is free."""
        try:
            raw = self._r.get(self._leader)
        except redis.RedisError as e:
            raise StoreError(f"redis: leader lease: {e}") from e
        if raw is None:
            return None
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    def current_token(self) -> int:
        """The newest fencing token handed out (0 before the first)."""
        try:
            raw = self._r.get(self._token_key)
        except redis.RedisError as e:
            raise StoreError(f"redis: leader token: {e}") from e
        return int(raw or 0)

    def release(self) -> bool:
        """Give the lease up if it is still ours (shutdown), so a follower takes over at once."""
        try:
            return int(self._release(keys=[self._leader], args=[self.holder])) == 1
        except redis.RedisError as e:
            raise StoreError(f"redis: leader lease release: {e}") from e

    def close(self) -> None:
        self._r.close()
