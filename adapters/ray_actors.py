"""Ray actors that keep every member cluster's summary fresh in Redis.

    PollerSpec    one cluster to watch: name, kubeconfig, context, declared traits (picklable)
    PollerShard   plain Python: owns many clusters; one ClusterWatcher (list+watch informers) per cluster;
                  after each batch of events (coalesced: at most one batch per cluster per summary
                  interval, however many events) the cluster's watcher thread writes its ClusterSummary
                  from the watcher's incremental CapacityIndex (no snapshot, no O(nodes) summarize per
                  write), so clusters publish in parallel and one slow write delays only its cluster;
                  a publisher thread retries failed writes and re-writes each summary at least every
                  heartbeat interval so freshness is visible; it also writes each cluster's per-node
                  table (broker.node_detail, for the fleet view's node detail) every 5 s.
    PollerFleet   starts Ray (ray.init(); RAY_ADDRESS joins an existing cluster), spreads clusters over
                  `shards` named actors by a stable hash, and stops them; add_cluster(spec) and
                  remove_cluster(name) change the watched clusters live (ClusterProfile members).

Actor classes stay plain Python; `ray.remote` is applied in PollerFleet (max_restarts=-1: a crashed
shard restarts and rebuilds everything from the clusters and Redis). One process per shard, not per
cluster: each cluster costs threads, not a Python process.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from adapters.kube import ClusterWatcher
from adapters.redis_store import RedisStateStore
from broker import telemetry
from broker.model import ClusterSummary, ClusterTraits
from broker.node_detail import nodes_table

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 2.0
# The per-node table of the fleet view (O(nodes) to build and write) is rewritten at most this often.
NODES_INTERVAL_SECONDS = 5.0


@dataclass(frozen=True)
class PollerSpec:
    name: str
    kubeconfig: str
    context: str | None
    traits: ClusterTraits


def shard_of(cluster: str, shards: int) -> int:
    """A stable shard for a cluster name (the same across processes and restarts)."""
    digest = hashlib.blake2b(cluster.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


class PollerShard:
    def __init__(
        self, specs: list[PollerSpec], redis_url: str, prefix: str, summary_interval_seconds: float = 0.2
    ) -> None:
        self._specs = {s.name: s for s in specs}
        self._store = RedisStateStore(redis_url, prefix=prefix)
        self._interval = summary_interval_seconds
        self._watchers: dict[str, ClusterWatcher] = {}
        self._dirty: set[str] = set()
        self._last_write: dict[str, float] = {}
        self._last_nodes: dict[str, float] = {}
        self._lock = threading.Lock()
        self._publish_locks = {name: threading.Lock() for name in self._specs}
        self._stop = threading.Event()
        self._publisher: threading.Thread | None = None
        self.writes = 0

    def _mark(self, cluster: str) -> None:
        with self._lock:
            self._dirty.add(cluster)

    def make_watcher(self, spec: PollerSpec) -> ClusterWatcher:
        """The watcher of one cluster: it batches events for a summary interval, then publishes."""
        return ClusterWatcher(
            spec.name,
            spec.kubeconfig,
            spec.context,
            on_change=functools.partial(self.changed, spec.name),
            flush_interval_s=self._interval,
            spot=spec.traits.spot,
        )

    def changed(self, name: str) -> None:
        """A batch of events of one cluster was applied (called on its watcher's thread): publish it now;
        on failure leave it to the publisher thread's next pass."""
        if self._stop.is_set() or name not in self._watchers:
            return
        first_event_at = self._watchers[name].batch_first_event_at if name in self._watchers else None
        try:
            self.publish_cluster(name)
            if first_event_at is not None:
                lag = max(0.0, time.time() - first_event_at)
                self._store.observe_event_lag(name, lag, telemetry.EVENT_LAG_BUCKETS)
        except Exception:
            log.exception("publishing the summary of %s failed; retrying next pass", name)
            self._mark(name)

    def start(self) -> list[str]:
        for name, spec in self._specs.items():
            watcher = self.make_watcher(spec)
            watcher.start()
            self._watchers[name] = watcher
        self._publisher = threading.Thread(target=self._publish_loop, name="gpufed-publisher", daemon=True)
        self._publisher.start()
        return sorted(self._watchers)

    def publish_once(self) -> int:
        """Write the summary of every dirty (or heartbeat-due) cluster. Returns how many were written."""
        now = time.time()
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            last = dict(self._last_write)
        written = 0
        for name in list(self._watchers):  # a copy: add_cluster/remove_cluster may run meanwhile
            if name not in dirty and now - last.get(name, 0.0) < HEARTBEAT_SECONDS:
                continue
            try:
                self.publish_cluster(name)
            except Exception:
                log.exception("publishing the summary of %s failed; retrying next pass", name)
                self._mark(name)
                continue
            written += 1
        for name in self._watchers:
            if now - self._last_nodes.get(name, 0.0) >= NODES_INTERVAL_SECONDS:
                try:
                    self.publish_nodes(name)
                except Exception:
                    log.exception("publishing the node table of %s failed; retrying next pass", name)
        return written

    def publish_nodes(self, name: str) -> int:
        """Write one cluster's per-node table (the fleet view's `nodes=true`). Returns its rows."""
        now = time.time()
        table = nodes_table(self._watchers[name].snapshot().nodes, self._specs[name].traits.spot)
        self._store.put_nodes(name, table, now)
        self._last_nodes[name] = now
        return len(table)

    def publish_cluster(self, name: str) -> ClusterSummary:
        """Write one cluster's summary (from its watcher's index) to Redis; the summary as written.

        One lock per cluster around read-and-write: the watcher thread and the heartbeat publisher may
        both publish a cluster, and without it an older summary could land after a newer one."""
        with self._publish_locks[name]:
            watcher, spec = self._watchers.get(name), self._specs.get(name)
            if watcher is None or spec is None:
                raise KeyError(f"cluster {name} is not watched (removed)")
            summary = watcher.summary(spec.traits)
            written = self._store.put_summary(summary)
        with self._lock:
            self._last_write[name] = time.time()
            self.writes += 1
        return written

    def _publish_loop(self) -> None:
        while not self._stop.is_set():
            self.publish_once()
            self._stop.wait(self._interval)

    def health(self) -> dict[str, str]:
        return {name: str(w.health) for name, w in list(self._watchers.items())}

    # ------------------------------------------------------------------ live membership (ClusterProfile)

    def add_cluster(self, spec: PollerSpec) -> bool:
        """Start watching one more cluster; False when it is watched already (idempotent)."""
        if spec.name in self._watchers:
            return False
        self._specs[spec.name] = spec
        self._publish_locks.setdefault(spec.name, threading.Lock())
        watcher = self.make_watcher(spec)
        watcher.start()
        self._watchers[spec.name] = watcher
        self._mark(spec.name)
        return True

    def remove_cluster(self, name: str) -> bool:
        """Stop watching a cluster; its summary is no longer written. False when it was not watched."""
        watcher = self._watchers.pop(name, None)
        if watcher is None:
            return False
        with self._publish_locks[name]:  # an in-flight write of it finishes first
            self._specs.pop(name, None)
        with self._lock:
            self._dirty.discard(name)
            self._last_write.pop(name, None)
        watcher.stop()
        return True

    def stop(self) -> None:
        self._stop.set()
        if self._publisher is not None:
            self._publisher.join(timeout=5)
        for w in self._watchers.values():
            w.stop()
        self._store.close()


class PollerFleet:
    """The poller shards of one broker, as named Ray actors."""

    def __init__(
        self,
        specs: list[PollerSpec],
        redis_url: str,
        prefix: str,
        shards: int = 1,
        summary_interval_seconds: float = 0.2,
    ) -> None:
        self._specs = specs
        self._redis_url = redis_url
        self._prefix = prefix
        self._shards = max(1, min(shards, len(specs) or 1))
        self._interval = summary_interval_seconds
        self._actors: list[Any] = []
        self._by_shard: dict[int, Any] = {}
        self._remote: Any = None
        self._started_ray = False

    def start(self) -> None:
        import ray

        if not ray.is_initialized():
            ray.init(
                address=os.environ.get("RAY_ADDRESS"),
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
            )
            self._started_ray = True
        remote_shard = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(PollerShard)
        self._remote = remote_shard
        groups: list[list[PollerSpec]] = [[] for _ in range(self._shards)]
        for spec in self._specs:
            groups[shard_of(spec.name, self._shards)].append(spec)
        for i, group in enumerate(groups):
            if not group:
                continue
            actor = remote_shard.options(name=f"gpufed-poller-{self._prefix}-{i}").remote(
                group, self._redis_url, self._prefix, self._interval
            )
            self._actors.append(actor)
            self._by_shard[i] = actor
        ray.get([a.start.remote() for a in self._actors], timeout=120)

    def add_cluster(self, spec: PollerSpec) -> bool:
        """Watch one more cluster, on the shard its name hashes to (started if it had no cluster yet).
        Idempotent. A shard that restarts after a crash rebuilds only the clusters it started with:
        the caller (the ClusterProfile sync) re-adds the others when it next reconciles."""
        import ray

        i = shard_of(spec.name, self._shards)
        actor = self._by_shard.get(i)
        if actor is None:
            actor = self._remote.options(name=f"gpufed-poller-{self._prefix}-{i}").remote(
                [], self._redis_url, self._prefix, self._interval
            )
            ray.get(actor.start.remote(), timeout=120)
            self._by_shard[i] = actor
            self._actors.append(actor)
        return bool(ray.get(actor.add_cluster.remote(spec), timeout=120))

    def remove_cluster(self, name: str) -> bool:
        """Stop watching a cluster (its shard keeps running). False when no shard watched it."""
        import ray

        actor = self._by_shard.get(shard_of(name, self._shards))
        if actor is None:
            return False
        return bool(ray.get(actor.remove_cluster.remote(name), timeout=60))

    def health(self) -> dict[str, str]:
        import ray

        out: dict[str, str] = {}
        for part in ray.get([a.health.remote() for a in self._actors], timeout=30):
            out.update(part)
        return out

    def stop(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        for a in self._actors:
            try:
                ray.get(a.stop.remote(), timeout=15)
            except Exception:
                log.warning("a poller shard did not stop cleanly; killing it")
            ray.kill(a, no_restart=True)
        self._actors = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False
