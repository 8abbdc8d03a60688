"""Redis clients from a URL: plain `redis://` / `rediss://` / `unix://`, or Redis Sentinel.

Owns building every redis-py client the broker and its pollers use (the state store, the leader lease,
and through the store's client the burst ledger and the audit trail). With a `redis+sentinel://` URL
(form: broker.config.redis_settings) the client is `Sentinel(...).master_for(master)`: each new
connection asks the sentinels where the primary is, and a connection that breaks (the primary died)
is replaced by one to whichever replica the sentinels promoted, so callers see a few failed calls
(StoreError, 503 at the API) and then the new primary, with no restart.

Connections: a plain URL's client keeps up to POOL_CONNECTIONS and a caller beyond that waits (up to
POOL_WAIT_SECONDS) for one to come back; redis-py 8 made 100 the default cap and refused the 101st caller
("Too many connections"), which a burst across 1,000 members' dispatch workers reached. A Sentinel
client keeps up to POOL_CONNECTIONS too (redis-py has no waiting Sentinel pool).

Passwords never reach an error message or a log line from here: failures name the URL redacted.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.sentinel import Sentinel

from broker.config.redis_settings import is_sentinel_url, parse_sentinel_url, redact

__all__ = ["POOL_CONNECTIONS", "POOL_WAIT_SECONDS", "client_for", "redact"]

POOL_CONNECTIONS = 512
POOL_WAIT_SECONDS = 20.0


def client_for(url: str, **kwargs: Any) -> redis.Redis:
    """A redis-py client for `url`; `kwargs` (decode_responses, socket_timeout, ...) as redis.Redis takes
    them. A bad URL raises ValueError naming the URL with its password replaced."""
    if not is_sentinel_url(url):
        try:
            pool = redis.BlockingConnectionPool.from_url(
                url, max_connections=POOL_CONNECTIONS, timeout=POOL_WAIT_SECONDS, **kwargs
            )
        except ValueError:  # redis-py's messages may quote the URL, password and all
            raise ValueError(f"redisUrl: not a Redis URL redis-py accepts: {redact(url)}") from None
        return redis.Redis(connection_pool=pool)
    target = parse_sentinel_url(url)
    # The sentinels are asked with the same timeouts, and their own password (if any).
    sentinel_kwargs: dict[str, Any] = {k: v for k, v in kwargs.items() if k.startswith("socket_")}
    if target.sentinel_password:
        sentinel_kwargs["password"] = target.sentinel_password
    # Typed as Any: redis-py < 8 ships Sentinel untyped, 8 typed; one spelling for both.
    make_sentinel: Any = Sentinel
    sentinel = make_sentinel(
        list(target.sentinels),
        sentinel_kwargs=sentinel_kwargs,
        username=target.username,
        password=target.password,
        **kwargs,
    )
    client: redis.Redis = sentinel.master_for(
        target.master_name, db=target.db, max_connections=POOL_CONNECTIONS
    )
    return client
