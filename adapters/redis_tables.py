"""The side tables and streams of the Redis store: the run marker, job and cluster event streams, the
per-node tables and the pollers' event-lag histograms.

Owns these keys of adapters.redis_store's schema (its docstring lists them all): P:run-id, P:recovery,
P:events:<id>, P:events, P:cluster-events:<c>, P:nodes:<c>, P:lag:<c>, P:fenced. RedisStateStore mixes this in
(it sets `_r` and `_k`); nothing here is atomic with a job write but the events its scripts append.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import redis
from pydantic import TypeAdapter

from broker.capacity.node_detail import NodeDetail
from broker.core.errors import Fenced, StoreError
from broker.core.model import JobEvent
from broker.core.records import ClusterEvent
from broker.telemetry.event_lag import LagCounts

FLEET_STREAM_MAXLEN = 100_000
_FLEET_STREAM_MAXLEN = FLEET_STREAM_MAXLEN
_EVENT = TypeAdapter(JobEvent)
_CLUSTER_EVENT = TypeAdapter(ClusterEvent)
_CLUSTER_STREAM_MAXLEN = 1000
_NODES = TypeAdapter(tuple[NodeDetail, ...])


def _text(value: object) -> str:
    """A Redis reply (bytes here; str if a caller's client decodes) as text."""
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


class SideTables:
    """Mixed into RedisStateStore."""

    _r: redis.Redis
    _fence: Any  # the fence script (adapters.redis_scripts.FENCE), registered by the store

    def _k(self, *parts: str) -> str:
        raise NotImplementedError

    def _token_arg(self) -> str:
        raise NotImplementedError

    # ------------------------------------------------------------------ fences (a lost cluster's)

    def fence(self, cluster: str, reason: str) -> bool:
        """Mark a lost cluster: no placement there until its stale attempts are swept. Returns whether it
        was newly fenced."""
        if not reason:
            raise ValueError("reason: a fence needs a reason")
        return self._set_fence(cluster, reason)

    def unfence(self, cluster: str) -> bool:
        return self._set_fence(cluster, "")

    def _set_fence(self, cluster: str, reason: str) -> bool:
        try:
            code = int(
                self._fence(
                    keys=[self._k("fenced"), self._k("leader-token")],
                    args=[cluster, reason, self._token_arg()],
                )
            )
        except redis.RedisError as e:
            raise StoreError(f"redis: fence {cluster}: {e}") from e
        if code < 0:
            raise Fenced(f"fence {cluster}: this broker's leader lease is no longer current")
        return code == 1

    def fenced(self) -> dict[str, str]:
        try:
            raw = self._r.hgetall(self._k("fenced"))
        except redis.RedisError as e:
            raise StoreError(f"redis: fenced: {e}") from e
        return {_text(k): _text(v) for k, v in raw.items()}

    # ------------------------------------------------------------------ the run marker (Redis loss)

    def run_marker(self) -> str | None:
        """The store's run id, or None when Redis holds no federation state (new, or came back empty)."""
        try:
            raw = self._r.get(self._k("run-id"))
        except redis.RedisError as e:
            raise StoreError(f"redis: run_marker: {e}") from e
        return None if raw is None else _text(raw)

    def set_run_marker(self, run_id: str, report: str | None = None) -> str:
        """Write the run id unless one is set (returns the one in force), with the rebuild's report."""
        try:
            pipe = self._r.pipeline(transaction=True)
            if report is not None:
                pipe.set(self._k("recovery"), report)
            pipe.set(self._k("run-id"), run_id, nx=True)
            pipe.get(self._k("run-id"))
            current = pipe.execute()[-1]
        except redis.RedisError as e:
            raise StoreError(f"redis: set_run_marker: {e}") from e
        return _text(current)

    def recovery_report(self) -> str | None:
        """The JSON report of the last rebuild after a Redis loss, if any."""
        try:
            raw = self._r.get(self._k("recovery"))
        except redis.RedisError as e:
            raise StoreError(f"redis: recovery_report: {e}") from e
        return None if raw is None else _text(raw)

    # ------------------------------------------------------------------ events

    def append_event(self, event: JobEvent) -> None:
        payload = _EVENT.dump_json(event)
        try:
            pipe = self._r.pipeline()
            pipe.xadd(self._k("events", event.job_id), {"e": payload})
            pipe.xadd(self._k("events"), {"e": payload}, maxlen=_FLEET_STREAM_MAXLEN, approximate=True)
            pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: append_event {event.job_id}: {e}") from e

    def job_events(self, job_id: str) -> list[JobEvent]:
        return [e for _, e in self.read_events(job_id)]

    def read_events(
        self, job_id: str | None = None, after: str = "0-0", block_ms: int | None = None, count: int = 1000
    ) -> list[tuple[str, JobEvent]]:
        """Events after stream id `after` (exclusive), oldest first, with their stream ids.

        job_id None reads the fleet-wide stream. With block_ms, waits up to that long for new entries
        (what a live SSE feed needs); pass the last id seen as `after` to resume."""
        key = self._k("events", job_id) if job_id is not None else self._k("events")
        try:
            rows: list[Any]
            if block_ms is None:
                rows = list(
                    self._r.xrange(key, min=f"({after}" if after != "0-0" else "-", max="+", count=count)
                    or []
                )
            else:
                got: Any = self._r.xread({key: after}, count=count, block=block_ms)
                rows = got[0][1] if got else []
        except redis.RedisError as e:
            raise StoreError(f"redis: events {key}: {e}") from e
        return [(_text(eid), _EVENT.validate_json(fields[b"e"])) for eid, fields in rows]

    def last_event_id(self, job_id: str | None = None) -> str:
        """The stream id of the newest event (of the job, or fleet-wide), "0-0" when there is none: where
        a live feed that starts now resumes from, with nothing lost between its reads."""
        key = self._k("events", job_id) if job_id is not None else self._k("events")
        try:
            rows: Any = self._r.xrevrange(key, count=1)
        except redis.RedisError as e:
            raise StoreError(f"redis: events {key}: {e}") from e
        return _text(rows[0][0]) if rows else "0-0"

    def append_cluster_event(self, event: ClusterEvent) -> None:
        try:
            self._r.xadd(
                self._k("cluster-events", event.cluster),
                {"e": _CLUSTER_EVENT.dump_json(event)},
                maxlen=_CLUSTER_STREAM_MAXLEN,
                approximate=True,
            )
        except redis.RedisError as e:
            raise StoreError(f"redis: append_cluster_event {event.cluster}: {e}") from e

    def cluster_events(self, cluster: str, count: int = 20) -> list[ClusterEvent]:
        """The cluster's latest events, oldest first."""
        try:
            rows: list[Any] = list(self._r.xrevrange(self._k("cluster-events", cluster), count=count) or [])
        except redis.RedisError as e:
            raise StoreError(f"redis: cluster_events {cluster}: {e}") from e
        return [_CLUSTER_EVENT.validate_json(fields[b"e"]) for _, fields in reversed(rows)]

    # ------------------------------------------------------------------ per-node detail (fleet view)

    def put_nodes(self, cluster: str, nodes: tuple[NodeDetail, ...], at: float) -> None:
        try:
            self._r.hset(self._k("nodes", cluster), mapping={"json": _NODES.dump_json(nodes), "at": repr(at)})
        except redis.RedisError as e:
            raise StoreError(f"redis: put_nodes {cluster}: {e}") from e

    def get_nodes(self, cluster: str) -> tuple[tuple[NodeDetail, ...], float] | None:
        """The cluster's node table and when it was written, or None before the first write."""
        try:
            raw, at = self._r.hmget(self._k("nodes", cluster), ["json", "at"])
        except redis.RedisError as e:
            raise StoreError(f"redis: get_nodes {cluster}: {e}") from e
        if raw is None:
            return None
        return _NODES.validate_json(raw), float(at or 0.0)

    # ------------------------------------------------------------------ event-to-Redis freshness

    def add_event_lags(self, counts: Mapping[str, LagCounts], bounds: Sequence[float]) -> None:
        """Add a poller's event-to-Redis counts (broker.telemetry.event_lag) to each cluster's histogram,
        every cluster in one round trip. `bounds` are the bounds the counts were taken with."""
        if not counts:
            return
        try:
            pipe = self._r.pipeline(transaction=False)
            for cluster, c in counts.items():
                key = self._k("lag", cluster)
                for bound, n in zip(bounds, c.le, strict=True):
                    if n:
                        pipe.hincrby(key, f"le:{float(bound)!r}", n)
                pipe.hincrby(key, "le:+Inf", c.count)
                pipe.hincrbyfloat(key, "sum", c.seconds)
                pipe.hincrby(key, "count", c.count)
            pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: add_event_lags ({len(counts)} clusters): {e}") from e

    def event_lags(
        self, buckets: Sequence[float]
    ) -> dict[str, tuple[list[tuple[float, float]], float, float]]:
        """Per cluster with an observation: ([(upper bound, cumulative count)] for every bound in `buckets`
        and +inf last, sum, count) of the event-to-Redis histogram."""
        try:
            clusters = sorted(_text(c) for c in self._r.smembers(self._k("clusters")))
            pipe = self._r.pipeline(transaction=False)
            for c in clusters:
                pipe.hgetall(self._k("lag", c))
            rows = pipe.execute()
        except redis.RedisError as e:
            raise StoreError(f"redis: event_lags: {e}") from e
        out: dict[str, tuple[list[tuple[float, float]], float, float]] = {}
        for cluster, raw in zip(clusters, rows, strict=True):
            fields = {_text(k): float(_text(v)) for k, v in raw.items()}
            if "count" not in fields:
                continue
            counted = [(float(b), fields.get(f"le:{float(b)!r}", 0.0)) for b in buckets]
            counted.append((float("inf"), fields.get("le:+Inf", fields["count"])))
            out[cluster] = (counted, fields.get("sum", 0.0), fields["count"])
        return out
