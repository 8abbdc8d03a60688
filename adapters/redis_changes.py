"""The job change stream on Redis: how the leader's in-memory job cache follows every other writer.

Owns the reads of P:changes, the capped stream every job write appends to inside its own script
(adapters.redis_scripts: create, save, restore; fields j = job id, w = the writer's store id), and the
batched record read that follows it:

    read_changes(after, block_ms)   entries after a stream id: (entry id, job id, writer); with block_ms,
                                    waits that long for one (XREAD BLOCK: one command a wait, however
                                    many jobs the store holds)
    last_change_id()                where a reader that has just read every record resumes from
    get_jobs(ids)                   many records in one pipelined round trip

Stream ids are Redis server milliseconds, so a reader's cursor stays valid across a Redis restart (the
new stream's ids are later). RedisStateStore mixes this in; the service sees it through the StateStore port.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from pydantic import TypeAdapter

from broker.core.errors import StoreError
from broker.core.model import JobRecord

# A reader more than this many job writes behind would miss some; the leader reads at least every second.
CHANGES_MAXLEN = 100_000

_JOB = TypeAdapter(JobRecord)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class JobChanges:
    """Mixed into RedisStateStore (which sets `_r` and `_p`)."""

    _r: redis.Redis
    _p: str

    def _changes_key(self) -> str:
        return f"{self._p}:changes"

    def read_changes(
        self, after: str, block_ms: int | None = None, count: int = 10_000
    ) -> list[tuple[str, str, str]]:
        """(entry id, job id, writer) of the job writes after stream id `after`, oldest first."""
        key = self._changes_key()
        try:
            rows: list[Any]
            if block_ms is None:
                start = f"({after}" if after != "0-0" else "-"
                rows = list(self._r.xrange(key, min=start, max="+", count=count) or [])
            else:
                got: Any = self._r.xread({key: after}, count=count, block=block_ms)
                rows = got[0][1] if got else []
        except redis.RedisError as e:
            raise StoreError(f"redis: changes: {e}") from e
        return [(_text(eid), _text(f[b"j"]), _text(f.get(b"w", b""))) for eid, f in rows]

    def last_change_id(self) -> str:
        """The id of the newest change ("0-0" when none)."""
        try:
            rows: Any = self._r.xrevrange(self._changes_key(), count=1)
        except redis.RedisError as e:
            raise StoreError(f"redis: changes: {e}") from e
        return _text(rows[0][0]) if rows else "0-0"

    def get_jobs(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        """The records of these jobs that exist, in one round trip."""
        if not job_ids:
            return {}
        try:
            pipe = self._r.pipeline(transaction=False)
            for job_id in job_ids:
                pipe.hget(f"{self._p}:job:{job_id}", "json")
            rows = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: get_jobs ({len(job_ids)}): {e}") from e
        return {j: _JOB.validate_json(raw) for j, raw in zip(job_ids, rows, strict=True) if raw is not None}
