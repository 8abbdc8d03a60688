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
    IdempotencyKeys      the key index as broker.ha.duplicates reads and repoints it (two live jobs of
                         one key after a cluster declared lost came back: the older is kept)

A cluster declared lost (fenced) is let off: the leader's recovery leaves it out of the pending list,
so a key re-sent while it is lost makes a new job, and broker.ha.duplicates cancels the newer of the
two when the cluster comes back and its Job is restored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

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


class IdempotencyKeys:
    """broker.ha.duplicates.KeyLedger on the store's key index (P:idem:<key>, adapters.redis_store)."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self._client = client
        self._prefix = prefix

    def _key(self, key: str) -> str:
        return f"{self._prefix}:idem:{key}"

    def holders(self, keys: Sequence[str]) -> dict[str, str]:
        if not keys:
            return {}
        try:
            values = self._client.mget([self._key(k) for k in keys])
        except redis.RedisError as exc:
            raise StoreError(f"redis: idempotency keys ({len(keys)}): {exc}") from exc
        return {
            k: v.decode() if isinstance(v, bytes) else str(v)
            for k, v in zip(keys, values, strict=True)
            if v is not None
        }

    def point(self, key: str, job_id: str) -> None:
        try:
            self._client.set(self._key(key), job_id)
        except redis.RedisError as exc:
            raise StoreError(f"redis: idempotency key {key}: {exc}") from exc
