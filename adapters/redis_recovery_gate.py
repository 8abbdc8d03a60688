"""After a Redis loss, an Idempotency-Key the rebuild cannot vouch for yet is not turned into a new job.

A rebuild (broker.ha.recovery) writes the run marker once it has listed the clusters that answer; a
cluster that did not answer (down, partitioned) may still hold the Job of a key that a client now
re-sends. Until every cluster has been listed, or declared lost, this module keeps the names of the
clusters not yet listed in Redis (`P:recovery:pending`, a string: the comma-separated names); the create
script (adapters.redis_store) then answers a key it does not know with 'unvouched' instead of a new job,
and the API says 503 with Retry-After and the reason. A submit without a key is not held back: it cannot
be a retry. A key the store knows returns its job as always.

    PENDING_LUA          the lines the create script runs after the key lookup (KEYS[12], ARGV[4], ARGV[8])
    pending_key(prefix)  the key
    RecoveryGate         set(clusters) by the leader's recovery; pending() for /v1/status and tests
    unvouched(...)       the Recovering error the API answers 503 with
"""

from __future__ import annotations

from collections.abc import Iterable

import redis

from broker.core.errors import Recovering, StoreError

# Runs inside _CREATE_JOB after an existing key has returned its job: a new keyed job is refused while
# clusters are pending, when the store requires the marker (the API's store; ARGV[8] == '1').
PENDING_LUA = """
if ARGV[4] == '1' and ARGV[8] == '1' then
  local pending = redis.call('GET', KEYS[12])
  if pending then return {'unvouched', pending} end
end
"""


def pending_key(prefix: str) -> str:
    return f"{prefix}:recovery:pending"


def unvouched(pending: str) -> Recovering:
    return Recovering(
        "the state store was lost and rebuilt, but these member clusters have not been listed yet: "
        f"{pending}; a job with this Idempotency-Key may be running there, so it is not created again "
        "until they answer or are declared lost: retry in a few seconds"
    )


class RecoveryGate:
    """The pending clusters of the last rebuild, in Redis (see the module docstring)."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self._client = client
        self._key = pending_key(prefix)

    def set(self, clusters: Iterable[str]) -> None:
        names = sorted(set(clusters))
        try:
            if names:
                self._client.set(self._key, ", ".join(names))
            else:
                self._client.delete(self._key)
        except redis.RedisError as exc:
            raise StoreError(f"redis: recovery pending clusters: {exc}") from exc

    def pending(self) -> list[str]:
        raw = self._client.get(self._key)
        text = raw.decode() if isinstance(raw, bytes) else str(raw or "")
        return text.split(", ") if text else []
