"""Acknowledged writes that survive the primary: `settings.redisDurability: replica`.

Owns the WAIT after an acknowledged write. Redis replicates asynchronously: a write the primary has
answered may not have reached any replica when the primary dies, and the replica the sentinels promote
then never had it. Under `replica`, the API's store follows each acknowledged write (a submit batch of
the group commit, a single submit, a state change such as a cancel) with `WAIT 1 <timeout>` on one
connection, after a marker write on that same connection: WAIT covers every write the primary had
applied before it (the marker's replication offset is past the batch's), so one WAIT per batch.

When no replica confirms in time, the callers get StoreError (503): their write may be stored or not,
and a retry with the same Idempotency-Key returns the one job either way. Cost: a round trip plus the
replica's lag per batch (docs/operations.md, "Redis with Sentinel"); `none` keeps Redis's default:
acknowledged at the primary, and a submit acknowledged in the last moment before the primary died can
be lost with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from adapters.redis_store import RedisStateStore
from broker.core.errors import Conflict, StoreError
from broker.core.model import JobEvent, JobRecord, JobState

__all__ = ["DurableRedisStore", "ReplicaAck", "state_store"]


class ReplicaAck:
    """`confirm()`: the writes made so far reached `replicas` replicas within `timeout_ms`, or StoreError."""

    def __init__(
        self, client: redis.Redis, marker_key: str, replicas: int = 1, timeout_ms: int = 1000
    ) -> None:
        self._r = client
        self._marker = marker_key
        self.replicas = replicas
        self.timeout_ms = timeout_ms
        self.waits = 0  # WAITs issued (acknowledged batches)

    def confirm(self) -> None:
        self.waits += 1
        try:
            pipe = self._r.pipeline(transaction=False)  # one connection: WAIT sees the marker's offset
            pipe.incr(self._marker)
            pipe.wait(self.replicas, self.timeout_ms)
            _, acked = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: the write's replication could not be confirmed: {e}") from e
        if int(acked) < self.replicas:
            raise StoreError(
                f"redis: {acked} of {self.replicas} replica(s) confirmed the write within "
                f"{self.timeout_ms} ms (redisDurability: replica); it may or may not be stored: retry "
                "with the same Idempotency-Key"
            )


class DurableRedisStore(RedisStateStore):
    """RedisStateStore whose acknowledged writes return only once a replica holds them."""

    def __init__(self, redis_url: str, *, replicas: int = 1, timeout_ms: int = 1000, **kwargs: Any) -> None:
        super().__init__(redis_url, **kwargs)
        self.ack = ReplicaAck(self.client, self._k("durability-mark"), replicas, timeout_ms)

    def create_job(self, record: JobRecord, event: JobEvent | None = None) -> JobRecord:
        stored = super().create_job(record, event)
        self.ack.confirm()
        return stored

    def create_jobs(
        self, jobs: Sequence[tuple[JobRecord, JobEvent | None]]
    ) -> list[JobRecord | StoreError | Conflict]:
        out = super().create_jobs(jobs)
        if not any(isinstance(o, JobRecord) for o in out):
            return out
        try:
            self.ack.confirm()  # one WAIT for the whole batch
        except StoreError as e:
            return [e if isinstance(o, JobRecord) else o for o in out]
        return out

    def save_job(
        self,
        record: JobRecord,
        expected_state: JobState | None = None,
        event: JobEvent | None = None,
        expected_attempt: int | None = None,
    ) -> JobRecord:
        stored = super().save_job(record, expected_state, event, expected_attempt)
        self.ack.confirm()
        return stored


def state_store(
    redis_url: str, durability: str = "none", timeout_ms: int = 1000, **kwargs: Any
) -> RedisStateStore:
    """The API's store for `settings.redisDurability` (`none`: a plain RedisStateStore)."""
    if durability == "replica":
        return DurableRedisStore(redis_url, replicas=1, timeout_ms=timeout_ms, **kwargs)
    return RedisStateStore(redis_url, **kwargs)
