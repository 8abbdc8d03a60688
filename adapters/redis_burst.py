"""BurstLedger on Redis: run times by shape, priced runs for spend, last wait-or-burst verdicts.

Owns these keys under the broker's prefix P (the store's; broker.burst.gate reads them through the
BurstLedger port):

    P:burst:rt:<shape key>   list  observed run times in seconds, newest first, at most SAMPLE_LIMIT
    P:burst:rt-keys          set   the shape keys that have a list
    P:spend:runs             hash  "<job id>:<attempt>" -> Run (JSON); HSETNX, so an attempt counts once
    P:burst:verdict          hash  job id -> "wait" | "burst", the last decision (hysteresis)
    P:spend:avoided          hash  "<job id>:<attempt>" -> Saving (JSON): cloud cost a burst-back avoided

Runs (and savings) older than RUN_RETENTION_SECONDS are dropped when a new one is added (a month's budget period
and the one before it stay readable).
"""

from __future__ import annotations

import redis
from pydantic import TypeAdapter

from broker.burst.spend import Run
from broker.burst.wait_prediction import SAMPLE_LIMIT
from broker.core.errors import StoreError
from broker.core.records import Saving

RUN_RETENTION_SECONDS = 70 * 86400.0
_RUN = TypeAdapter(Run)
_SAVING = TypeAdapter(Saving)


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


class RedisBurstLedger:
    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self._r = client
        self._p = prefix

    def _k(self, *parts: str) -> str:
        return ":".join((self._p, *parts))

    def run_times(self) -> dict[str, list[float]]:
        try:
            keys = sorted(_text(k) for k in self._r.smembers(self._k("burst", "rt-keys")))
            pipe = self._r.pipeline(transaction=False)
            for key in keys:
                pipe.lrange(self._k("burst", "rt", key), 0, SAMPLE_LIMIT - 1)
            lists = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"reading run times: {e}") from e
        return {k: [float(v) for v in vs] for k, vs in zip(keys, lists, strict=True) if vs}

    def add_run_time(self, key: str, seconds: float) -> None:
        try:
            pipe = self._r.pipeline(transaction=True)
            pipe.lpush(self._k("burst", "rt", key), repr(float(seconds)))
            pipe.ltrim(self._k("burst", "rt", key), 0, SAMPLE_LIMIT - 1)
            pipe.sadd(self._k("burst", "rt-keys"), key)
            pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"adding a run time: {e}") from e

    def add_run(self, run: Run) -> bool:
        key = self._k("spend", "runs")
        try:
            added = bool(self._r.hsetnx(key, f"{run.job_id}:{run.attempt}", _RUN.dump_json(run)))
            if added:
                old = [f for f, r in self._all().items() if r.ended_at < run.ended_at - RUN_RETENTION_SECONDS]
                if old:
                    self._r.hdel(key, *old)
            return added
        except redis.RedisError as e:
            raise StoreError(f"adding a run: {e}") from e

    def _all(self) -> dict[str, Run]:
        raw = self._r.hgetall(self._k("spend", "runs"))
        return {_text(f): _RUN.validate_json(v) for f, v in raw.items()}

    def runs(self, since: float) -> list[Run]:
        try:
            return sorted(
                (r for r in self._all().values() if r.ended_at >= since), key=lambda r: (r.ended_at, r.job_id)
            )
        except redis.RedisError as e:
            raise StoreError(f"reading runs: {e}") from e

    def verdict(self, job_id: str) -> str | None:
        try:
            v = self._r.hget(self._k("burst", "verdict"), job_id)
        except redis.RedisError as e:
            raise StoreError(f"reading a burst verdict: {e}") from e
        return None if v is None else _text(v)

    def set_verdict(self, job_id: str, verdict: str) -> None:
        try:
            self._r.hset(self._k("burst", "verdict"), job_id, verdict)
        except redis.RedisError as e:
            raise StoreError(f"writing a burst verdict: {e}") from e

    def forget(self, job_id: str) -> None:
        try:
            self._r.hdel(self._k("burst", "verdict"), job_id)
        except redis.RedisError as e:
            raise StoreError(f"forgetting a burst verdict: {e}") from e

    def add_saving(self, saving: Saving) -> bool:
        key = self._k("spend", "avoided")
        try:
            added = bool(self._r.hsetnx(key, f"{saving.job_id}:{saving.attempt}", _SAVING.dump_json(saving)))
            if added:
                old = [f for f, s in self._savings().items() if s.at < saving.at - RUN_RETENTION_SECONDS]
                if old:
                    self._r.hdel(key, *old)
            return added
        except redis.RedisError as e:
            raise StoreError(f"adding a saving: {e}") from e

    def _savings(self) -> dict[str, Saving]:
        raw = self._r.hgetall(self._k("spend", "avoided"))
        return {_text(f): _SAVING.validate_json(v) for f, v in raw.items()}

    def savings(self, since: float) -> list[Saving]:
        try:
            return sorted(
                (s for s in self._savings().values() if s.at >= since), key=lambda s: (s.at, s.job_id)
            )
        except redis.RedisError as e:
            raise StoreError(f"reading savings: {e}") from e


__all__ = ["RUN_RETENTION_SECONDS", "RedisBurstLedger"]
