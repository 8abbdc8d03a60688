"""broker.core.ports.AttemptLogStore on Redis, mixed into RedisStateStore.

    P:attempt-logs:<job id>   hash  attempt -> the last bytes of that attempt's container log
                                    (broker.workload.attempt_log: at most MAX_BYTES each, the newest
                                    KEEP_ATTEMPTS attempts); expires RETENTION_SECONDS after its last
                                    write, so it goes some days after the job's last attempt ended

Bounded: a job's logs cost at most KEEP_ATTEMPTS x MAX_BYTES (512 KiB), and only while they are read
back in days, not kept for ever.
"""

from __future__ import annotations

import redis

from broker.core.errors import StoreError
from broker.workload.attempt_log import KEEP_ATTEMPTS, MAX_BYTES

RETENTION_SECONDS = 7 * 86400


class AttemptLogs:
    """Mixed into RedisStateStore (its client and key prefix)."""

    _r: redis.Redis

    def _k(self, *parts: str) -> str:
        raise NotImplementedError

    def put_attempt_log(self, job_id: str, attempt: int, data: bytes) -> None:
        key = self._k("attempt-logs", job_id)
        try:
            pipe = self._r.pipeline(transaction=True)
            pipe.hset(key, str(attempt), data[-MAX_BYTES:])
            pipe.hkeys(key)
            pipe.expire(key, RETENTION_SECONDS)
            keys = pipe.execute()[1]
            attempts = sorted(int(k) for k in keys)
            if len(attempts) > KEEP_ATTEMPTS:
                self._r.hdel(key, *(str(a) for a in attempts[: len(attempts) - KEEP_ATTEMPTS]))
        except redis.RedisError as e:
            raise StoreError(f"redis: put_attempt_log: {e}") from e

    def attempt_log(self, job_id: str, attempt: int) -> bytes | None:
        try:
            raw = self._r.hget(self._k("attempt-logs", job_id), str(attempt))
        except redis.RedisError as e:
            raise StoreError(f"redis: attempt_log: {e}") from e
        if raw is None:
            return None
        return raw.encode() if isinstance(raw, str) else bytes(raw)

    def attempt_log_numbers(self, job_id: str) -> list[int]:
        try:
            keys = self._r.hkeys(self._k("attempt-logs", job_id))
        except redis.RedisError as e:
            raise StoreError(f"redis: attempt_log_numbers: {e}") from e
        return sorted(int(k) for k in keys)
