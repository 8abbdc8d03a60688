"""Poller liveness judged from the outside: what a shard has published, not what its process says.

A shard whose process is frozen (SIGSTOP, a stuck syscall, a deadlock) still exists for Ray and never
crashes, so Ray never restarts it and a ping merely times out; every cluster it owns goes stale and
placement stops. The supervisor therefore also reads, in Redis, when each summary was written (a
field beside the summary: adapters.summary_batch.publications, not the summaries themselves): a shard
none of whose clusters has been published for `silent_after` seconds (clusterLostSeconds / 2, at least
two heartbeats) is killed with `ray.kill` and Ray restarts it (its actors are max_restarts=-1), whatever its
process state. The blind-broker rule (broker.health.failover.pollers_silent) still keeps jobs from moving while
capacity is stale; this only brings the capacity back. A shard whose clusters are not all listed yet
(a summary missing, or "unknown") is starting, not frozen: its silence counts only after
STARTUP_LIMIT_SECONDS from its (re)start (a start-up probe), so a cold start of many members is not killed
over and over.

    silent_after(lost_seconds)     the silence after which a shard is replaced
    ShardLiveness                  the supervisor's bookkeeping: which shards are silent now, and the
                                   record of each replacement in Redis (`<prefix>:pollers:liveness`),
                                   which /readyz, the dashboard and the metrics read
    replacements(client, prefix)   that record: {shard: {"count", "at", "silent_for", "reason"}}
    capacity_check(store, lost)    the broker's /readyz check "capacity" (broker.telemetry.freshness)
    shard_source(store, owner, shards)  what the per-shard gauges on /metrics are read from

A Redis that does not answer makes every shard silent through no fault of its own: while the
summaries cannot be read nothing is judged, and each shard gets a fresh grace period once they can.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import redis

from adapters import summary_batch
from adapters.redis_store import RedisStateStore
from broker.core.model import Health
from broker.health import failover
from broker.telemetry import freshness

log = logging.getLogger(__name__)

# After a kill, Ray restarts the actor and the new one lists its clusters before it publishes: the
# shard is not judged again until it answers with a new process (restarted()) or this long has passed.
RESTART_GRACE_SECONDS = 60.0
# A shard that has just restarted lists its clusters before it publishes: on a loaded host that takes seconds, and killing it then would only start it over.
STARTUP_GRACE_SECONDS = 15.0
# A shard is starting, not frozen, while one of its clusters has no summary or one whose health is unknown
# (still being listed: the "syncing" summaries a shard writes first): Kubernetes' startupProbe beside its
# livenessProbe. Its silence counts once all are listed (or found unreachable), or this long after its
# (re)start. At 1,000 members, 8 shards listing 125 members each (1,125 informers) on a loaded host went
# quiet for more than the 5 s silence limit, were killed, restarted, and killed again, and never came up.
STARTUP_LIMIT_SECONDS = 120.0
LIVENESS_CHECK_SECONDS = 0.5


def silent_after(lost_seconds: float) -> float:
    """How long a shard may publish nothing before it is replaced (broker.health.failover's rule, which
    also decides when a degraded summary left unwritten is silence)."""
    return failover.poller_silent_after(lost_seconds)


def liveness_key(prefix: str) -> str:
    return f"{prefix}:pollers:liveness"


def replacements(client: Any, prefix: str) -> dict[str, dict[str, Any]]:
    """Every shard replaced for silence in this Redis, with when, after how long and how often."""
    raw: dict[Any, Any] = client.hgetall(liveness_key(prefix))
    out: dict[str, dict[str, Any]] = {}
    for shard, body in raw.items():
        name = shard.decode() if isinstance(shard, bytes) else str(shard)
        out[name] = dict(orjson.loads(body))
    return out


class ShardLiveness:
    """Which shards have published nothing for too long (see the module docstring)."""

    def __init__(
        self,
        store: RedisStateStore,
        shard_names: Sequence[str],
        silence_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`clock`: epoch seconds, the clock the shards stamp `published_at` with."""
        self._store = store
        self._silence = silence_s
        self._clock = clock
        now = clock()
        # when each shard's silence starts to count (the shards answered a ping before the supervisor
        # was made: they are running)
        self._since = {name: now for name in shard_names}
        # when each shard (re)started: the start-up limit counts from there (see silent())
        self._booted = {name: now for name in shard_names}
        self._groups: dict[str, frozenset[str]] = {}

    @property
    def silence_seconds(self) -> float:
        return self._silence

    def silent(self, groups: Mapping[str, Sequence[str]]) -> dict[str, float]:
        """{shard: seconds since its last publish} for each shard with clusters that has published
        none of them for the silence limit; {} when the summaries cannot be read."""
        now = self._clock()
        try:
            # when each summary was written and its health, not the summaries: at 1,000 members reading
            # and parsing every summary twice a second cost the supervisor a sixth of a core
            written = summary_batch.publications(
                self._store, [c for clusters in groups.values() for c in clusters]
            )
        except Exception:
            for shard in self._since:
                self._since[shard] = now  # Redis is the cause, not the shards: judge again once it answers
            return {}
        out: dict[str, float] = {}
        for shard, clusters in groups.items():
            if self._groups.get(shard) != frozenset(clusters):  # new clusters: a grace period for them
                self._groups[shard] = frozenset(clusters)
                self._since[shard] = max(self._since.get(shard, now), now)
            if not clusters:
                continue
            booted = self._booted.setdefault(shard, now)
            found = [written.get(c) for c in clusters]
            fresh = max(w[0] if w is not None else 0.0 for w in found)
            starting = any(w is None or w[1] == Health.UNKNOWN for w in found)  # not all listed yet
            if starting and now - booted <= STARTUP_LIMIT_SECONDS:
                continue  # busy listing its members, not frozen
            last = max(fresh, self._since.get(shard, now))
            if now - last > self._silence:
                out[shard] = now - last
        return out

    def watch(
        self,
        groups: Callable[[], Mapping[str, Sequence[str]]],
        kill: Callable[[str], None],
        stop: threading.Event,
        every_s: float = LIVENESS_CHECK_SECONDS,
    ) -> threading.Thread:
        """Run replace_silent every `every_s` seconds on a daemon thread until `stop` is set."""

        def loop() -> None:
            while not stop.wait(every_s):
                try:
                    replace_silent(self, groups(), kill)
                except Exception as exc:  # the next pass tries again
                    log.warning("poller liveness check failed: %s", exc)

        thread = threading.Thread(target=loop, name="gpufed-poller-liveness", daemon=True)
        thread.start()
        return thread

    def restarted(self, shard: str) -> None:
        """`shard` answers from a new process: starting again (the start-up limit counts from now)."""
        now = self._clock()
        self._since[shard] = now + STARTUP_GRACE_SECONDS
        self._booted[shard] = now

    def replaced(self, shard: str, silent_for: float, reason: str) -> None:
        """Record that `shard` was killed for silence; it is not judged again until it has restarted."""
        now = self._clock()
        self._since[shard] = now + RESTART_GRACE_SECONDS
        self._booted[shard] = now  # its successor starts now
        key = liveness_key(self._store.prefix)
        try:
            before = self._store.client.hget(key, shard)
            count = int(orjson.loads(before)["count"]) + 1 if before else 1
            body = {"count": count, "at": now, "silent_for": round(silent_for, 1), "reason": reason}
            self._store.client.hset(key, shard, orjson.dumps(body))
        except (redis.RedisError, ValueError, KeyError) as exc:
            log.warning("could not record the replacement of poller shard %s: %s", shard, exc)


def force_kill_local(pid: int | None) -> bool:
    """SIGKILL a frozen shard's process when it runs on this host (its command line says it is a
    PollerShard): Ray's own kill of a stopped process waits out a grace period first. False when not."""
    if pid is None:
        return False
    try:
        if b"PollerShard" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return False
        os.kill(pid, signal.SIGKILL)
    except OSError:
        return False
    return True


def replace_silent(liveness: ShardLiveness, groups: Mapping[str, Sequence[str]], kill: Any) -> set[str]:
    """One liveness pass of the supervisor: kill (and so restart) every silent shard. `kill(shard)`
    does it (ray.kill without no_restart). Returns the shards killed."""
    killed: set[str] = set()
    for shard, silent_for in sorted(liveness.silent(groups).items()):
        reason = (
            f"published nothing for {silent_for:.1f} s (limit {liveness.silence_seconds:.1f} s): "
            "killed and restarted"
        )
        log.warning("poller shard %s %s", shard, reason)
        try:
            kill(shard)
        except Exception as exc:  # gone already: the supervisor's next pass makes it anew
            log.warning("killing poller shard %s failed: %s", shard, exc)
        liveness.replaced(shard, silent_for, reason)
        killed.add(shard)
    return killed


def capacity_check(store: RedisStateStore, lost_seconds: float) -> Callable[[], bool]:
    """A /readyz check: raises with broker.telemetry.freshness's reason while any summary is stale."""
    limit = silent_after(lost_seconds)

    def check() -> bool:
        reason = freshness.stale_reason(
            store.observed_summaries(), time.time(), limit, replacements(store.client, store.prefix)
        )
        if reason is not None:
            raise RuntimeError(reason)
        return True

    return check


def shard_source(
    store: RedisStateStore, owner: Callable[[str], str], shards: Sequence[str]
) -> Callable[[], freshness.ShardSample]:
    """What /metrics reads for the per-shard gauges (broker.telemetry.freshness.SHARDS.source)."""

    def sample() -> freshness.ShardSample:
        return freshness.ShardSample(
            time.time(),
            store.observed_summaries(),
            owner,
            list(shards),
            replacements(store.client, store.prefix),
        )

    return sample
