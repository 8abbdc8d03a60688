"""Where audit records are kept: a bounded, time-indexed Redis stream, and a JSON-lines file.

RedisAuditLog   P:audit              stream, one entry per record, field "r" = the record (JSON); the
                                     entry id is the time it was written (ms), so since/until are ranges
                                     of ids. Bounded twice on every append: entries older than
                                     `retention_seconds` are trimmed (XADD MINID ~) and the stream is
                                     capped at `max_records` (XTRIM MAXLEN ~).
                P:audit:events-cursor  the fleet event stream id up to which the broker's own acts
                                     (preemption, failover, budget stop) have been recorded: moved by a
                                     compare-and-set together with the append (Lua), so one replica records
                                     each span of events (broker.api.audit_writer.EventAuditor)
                `page(query, limit, after)` reads newest first, at most `max_scan` entries per page (a
                rare filter over a long trail returns fewer items and a continue position, as Kubernetes
                lists may), filters in Python.
JsonLinesFile   one record per line, appended (the file opened per batch: logrotate's move-and-create
                works; so does copytruncate).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis

from broker.core.errors import StoreError
from broker.tenancy.audit import AuditQuery, AuditRecord

__all__ = ["JsonLinesFile", "RedisAuditLog"]

# KEYS: stream, cursor. ARGV: cursor before, cursor after, min id, maxlen, records (JSON) ...
_ADVANCE = """
local now = redis.call('GET', KEYS[2]) or '0-0'
if now ~= ARGV[1] then return 0 end
for i = 5, #ARGV do
    redis.call('XADD', KEYS[1], 'MINID', '~', ARGV[3], '*', 'r', ARGV[i])
end
if #ARGV >= 5 then redis.call('XTRIM', KEYS[1], 'MAXLEN', '~', ARGV[4]) end
redis.call('SET', KEYS[2], ARGV[2])
return 1
"""

# Slack around since/until when they are turned into entry ids: a record's time is when it happened,
# its id when it was written (a moment later).
_SLACK_MS = 60_000


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class RedisAuditLog:
    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        retention_seconds: float = 30 * 86400,
        max_records: int = 200_000,
        max_scan: int = 10_000,
    ) -> None:
        self._r = client
        self.key = f"{prefix}:audit"
        self._cursor = f"{prefix}:audit:events-cursor"
        self._retention_ms = int(retention_seconds * 1000)
        self._max_records, self._max_scan = max_records, max_scan
        self._advance = self._r.register_script(_ADVANCE)

    def __repr__(self) -> str:
        return f"redis stream {self.key}"

    def _min_id(self) -> str:
        return f"{max(0, int(time.time() * 1000) - self._retention_ms)}-0"

    def append(self, records: Sequence[AuditRecord]) -> None:
        if not records:
            return
        try:
            pipe = self._r.pipeline(transaction=False)
            min_id = self._min_id()
            for rec in records:
                pipe.xadd(self.key, {"r": rec.to_json()}, minid=min_id, approximate=True)
            pipe.xtrim(self.key, maxlen=self._max_records, approximate=True)
            pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: audit append: {e}") from e

    def cursor(self, start: Callable[[], str]) -> str:
        try:
            now = self._r.get(self._cursor)
            if now is not None:
                return _text(now)
            self._r.set(self._cursor, start(), nx=True)
            return _text(self._r.get(self._cursor) or "0-0")
        except redis.RedisError as e:
            raise StoreError(f"redis: audit cursor: {e}") from e

    def advance(self, before: str, after: str, records: Sequence[AuditRecord]) -> bool:
        args: list[str | int] = [before, after, self._min_id(), self._max_records]
        args += [r.to_json() for r in records]
        try:
            return bool(self._advance(keys=[self.key, self._cursor], args=args))
        except redis.RedisError as e:
            raise StoreError(f"redis: audit advance: {e}") from e

    def page(
        self, query: AuditQuery, limit: int, after: str | None
    ) -> tuple[list[tuple[str, AuditRecord]], str | None]:
        high = (
            f"({after}"
            if after
            else ("+" if query.until is None else str(int(query.until * 1000) + _SLACK_MS))
        )
        low = "-" if query.since is None else str(max(0, int(query.since * 1000) - _SLACK_MS))
        items: list[tuple[str, AuditRecord]] = []
        scanned = 0
        chunk = min(max(limit * 2, 100), 1000)
        try:
            while True:
                rows: Any = self._r.xrevrange(self.key, max=high, min=low, count=chunk)
                for raw_id, fields in rows:
                    entry_id = _text(raw_id)
                    scanned += 1
                    record = AuditRecord.from_dict(json.loads(fields[b"r"]))
                    if query.matches(record):
                        items.append((entry_id, record))
                    if len(items) >= limit or scanned >= self._max_scan:
                        return items, entry_id
                if len(rows) < chunk:
                    return items, None
                high = f"({_text(rows[-1][0])}"
        except redis.RedisError as e:
            raise StoreError(f"redis: audit read: {e}") from e


class JsonLinesFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"audit log file {self.path}"

    def append(self, records: Sequence[AuditRecord]) -> None:
        if not records:
            return
        text = "".join(r.to_json() + "\n" for r in records)
        with open(self.path, "a", encoding="utf-8", opener=_private) as f:
            f.write(text)


def _private(path: str, flags: int) -> int:
    """Create the file readable by the broker only: the trail says who did what."""
    return os.open(path, flags, 0o600)
