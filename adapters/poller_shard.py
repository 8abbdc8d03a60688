"""A poller shard: the plain-Python half of the poller fleet.

(PollerSpec and HashRing, how clusters are dealt to shards, are adapters.shard_ring's.)
PollerShard     owns many clusters; one ClusterWatcher (list+watch informers, a health machine) per
                cluster, their informers and liveness probes all tasks on the process's one event loop
                (adapters.watch_loop; adapters.probe_scheduler also keeps the loop's lag, so a starved
                shard does not call its clusters slow), their set-ups SHARD_CONNECTS at a time; after
                each batch of events of a cluster, the shard's writer thread writes its ClusterSummary
                (health, health_reason, health_since, heartbeat = the last SUCCESSFUL call) from the
                watcher's incremental CapacityIndex, with every other cluster changed meanwhile, in one
                pipeline (group commit: the busier the shard, the more clusters share a round trip,
                where each wrote its own on its flush thread before); a publisher thread retries failed
                writes and re-writes each summary at least every HEARTBEAT_SECONDS (the heartbeat-only re-writes of a pass in one
                pipeline, adapters.summary_batch), and each cluster's per-node table
                (broker.capacity.node_detail, the fleet view's node detail) every NODES_INTERVAL_SECONDS;
                it adds the counts of the event-to-Redis histogram (broker.telemetry.event_lag) every
                EVENT_LAGS_INTERVAL_SECONDS.
                assign(specs, generation) adds, removes and re-points clusters without a restart. As a
                Ray actor (adapters.ray_actors applies ray.remote) it starts its work in its
                constructor, so an actor Ray restarts after a crash resumes by itself, rebuilding its
                state from the clusters.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import logging.handlers
import os
import queue
import sys
import threading
import time
import warnings
from typing import Any

import orjson

from adapters.flush_scheduler import FlushScheduler
from adapters.gpu_health_watch import GpuHealthWatch
from adapters.kube import ClusterWatcher
from adapters.kube_informer import WatchSettings
from adapters.probe_scheduler import LagMeter, ProbeScheduler
from adapters.redis_store import RedisStateStore
from adapters.shard_ring import HashRing, PollerSpec, spec_from_json
from adapters.summary_batch import beat_summaries, put_summaries
from adapters.watch_pacing import ConnectGate
from broker import telemetry
from broker.capacity.node_detail import NodeDetail, nodes_table
from broker.config import gpu_health
from broker.core.errors import StoreError
from broker.core.model import ClusterSummary
from broker.health.machine import HealthThresholds, Transition
from broker.telemetry.event_lag import EventLagTally
from broker.telemetry.log_throttle import Throttle

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 2.0
# The per-node table of the fleet view (O(nodes) to build and write) is rewritten at most this often.
NODES_INTERVAL_SECONDS = 5.0
# An unchanged node table is written again this often (its age in the fleet view, and the key back after a
# Redis loss); a changed one at the next NODES_INTERVAL_SECONDS. Every table every 5 s was 87 KiB/s of
# Redis writes for 1,000 idle nodes, most of the idle broker's Redis traffic. (Building it is ~16 ms per
# 1,000 nodes: compared, not skipped, so that no change is missed.)
NODES_REFRESH_SECONDS = 60.0
# The event-to-Redis histogram's counts are added to Redis this often (and at stop). Every pass (0.2 s)
# wrote ~14 HINCRBYs per cluster for one or two observations, as many as one write per observation had:
# about a tenth of the shard's CPU under churn at 125 members. /metrics is scraped every 15-30 s.
EVENT_LAGS_INTERVAL_SECONDS = 5.0
SUPERVISE_SECONDS = 1.0
SHARD_CONNECTS = 16
# A shard's watches ask for 60-90 s (client-go asks for 5-10 min): at 20 s, 1,000 members' 9,000 watches
# were 450 re-watch requests a second for nothing new. The probe (every 2 s) keeps a quiet member's
# heartbeat; a watch's end was never what proved a member alive.
SHARD_WATCH = WatchSettings(watch_timeout_s=60, watch_timeout_jitter=0.5)
# Threads that run the members' flushes (fold a batch of events into a summary, write it to Redis); a
# timer thread schedules them (adapters/flush_scheduler.py). Before, each member had a flusher thread.
SHARD_FLUSH_WORKERS = 8


def desired_key(prefix: str) -> str:
    return f"{prefix}:pollers:desired"


def desired_clusters(store: RedisStateStore, run_id: str) -> tuple[list[PollerSpec], int] | None:
    """The fleet's cluster list and its generation as this broker run's supervisor last saved it."""
    raw = store.client.get(desired_key(store.prefix))
    saved = orjson.loads(raw) if raw else None
    if not isinstance(saved, dict) or saved.get("run") != run_id:
        return None  # none yet, or a previous broker's
    return [spec_from_json(s) for s in saved["specs"]], int(saved["generation"])


def _reconstructed() -> bool:
    """In a Ray actor: whether this is a restart of it (after a crash), not its first start."""
    try:
        import ray

        with warnings.catch_warnings():  # Ray warns about an API it uses itself inside this property
            warnings.simplefilter("ignore")
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:
        return False


def _node_id() -> str | None:
    """In a Ray actor: the id of the Ray node it runs on (None outside Ray)."""
    try:
        import ray

        return str(ray.get_runtime_context().get_node_id()) if ray.is_initialized() else None
    except Exception:
        return None


def log_to_stderr() -> None:
    """In a Ray worker: the adapters' INFO and above to stderr, which Ray forwards to the driver. Through a
    queue and one writer thread: with a thousand informer threads, a slow stderr pipe (Ray's log monitor)
    must not hold every thread that logs a failure on the handler's lock (seen at 200 clusters: 187
    informer threads of one shard waiting there while their clusters went unreachable)."""
    logger = logging.getLogger("adapters")
    if any(getattr(h, "gpufed", False) for h in logger.handlers):
        return
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler = logging.handlers.QueueHandler(queue.SimpleQueue())
    logging.handlers.QueueListener(handler.queue, stream).start()
    handler.gpufed = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _without_heartbeat(summary: ClusterSummary) -> ClusterSummary:
    """What a heartbeat leaves unchanged: the summary without its heartbeat, write time and version."""
    return dataclasses.replace(summary, heartbeat=0.0, published_at=0.0, version=0)


class PollerShard:
    def __init__(
        self,
        specs: list[PollerSpec],
        redis_url: str,
        prefix: str,
        summary_interval_seconds: float = 0.2,
        *,
        generation: int = 0,
        health: HealthThresholds | None = None,
        autostart: bool = False,
        worker_logging: bool = False,
        ring: tuple[str, str, list[str]] | None = None,
    ) -> None:
        """`autostart` starts the work now, on a thread of its own (a Ray actor: a restarted actor resumes by
        itself);
        otherwise start() does. `ring` = (run id, this shard's name, every shard's name): a shard
        (re)starting reads the fleet's current cluster list from Redis (the supervisor keeps it there)
        and takes its own part of it, so an actor Ray restarts with its creation arguments does not
        resume a list that a config reload has replaced."""
        if worker_logging:
            log_to_stderr()
        self._store = RedisStateStore(redis_url, prefix=prefix)
        if ring is not None:
            current = desired_clusters(self._store, ring[0])
            if current is not None and current[1] > generation:
                specs, generation = HashRing(ring[2]).assign_specs(current[0])[ring[1]], current[1]
        self._specs = {s.name: s for s in specs}
        self._interval = summary_interval_seconds
        self._health = health or HealthThresholds()
        self._generation = generation
        self._watchers: dict[str, ClusterWatcher] = {}
        self._dirty: set[str] = set()
        self._last_write: dict[str, float] = {}
        # cluster -> its last summary written in full, without its heartbeat, and the version it got: a
        # heartbeat of a summary still equal to it moves only its heartbeat (summary_batch.beat_summaries)
        self._full_written: dict[str, tuple[ClusterSummary, int]] = {}
        self._last_nodes: dict[str, float] = {}
        self._nodes_written: dict[str, tuple[tuple[NodeDetail, ...], float]] = {}  # the last table, when
        self._lock = threading.Lock()
        self._assign_lock = threading.Lock()
        self._publish_locks: dict[str, threading.Lock] = {}
        self._stop = threading.Event()
        # set when a cluster is marked for the publisher: it sleeps until then or until a write falls due
        self._wake = threading.Event()
        self._publisher: threading.Thread | None = None
        # clusters whose events were applied since the writer thread's last write -> their first event time
        self._changed: dict[str, float | None] = {}
        self._changed_signal = threading.Event()
        self._writer: threading.Thread | None = None
        self._started_at = time.time()
        self.writes = 0
        # event-to-Redis latencies, counted here and added to Redis every EVENT_LAGS_INTERVAL_SECONDS
        self._event_lags = EventLagTally(telemetry.EVENT_LAG_BUCKETS)
        self._event_lags_written = 0.0
        # One lag meter and one prober for all the shard's clusters (not a prober thread per cluster).
        self.lag = LagMeter()
        self.prober = ProbeScheduler(lag=self.lag.lag)
        # The lists and watch set-ups of all the shard's clusters, SHARD_CONNECTS at a time: a cold start of
        # 125 members is 1,125 TLS handshakes, which all at once time each other out.
        self.gate = ConnectGate(SHARD_CONNECTS)
        self.flusher = FlushScheduler(SHARD_FLUSH_WORKERS)  # every member's flushes (no thread per member)
        self.store_errors = Throttle(log)  # Redis down: one warning per minute, not one per write
        if autostart:  # on a thread: 125 clusters' clients take seconds to build, and a Ray actor answers
            # no ping before its constructor returns (8 shards of a 1,000-cluster fleet on a busy host
            # missed the fleet's 120 s start deadline)
            threading.Thread(target=self.start, name="gpufed-shard-start", daemon=True).start()

    def _failed(self, exc: Exception, what: str, name: str) -> None:
        """A failed write: Redis down is expected (one warning a minute, counted), anything else is not."""
        if not isinstance(exc, StoreError):
            log.exception("publishing %s of %s failed; retrying next pass", what, name)
            return
        self.store_errors.warning("redis", "publishing to Redis failed (%s); retrying every pass", exc)

    def _mark(self, cluster: str) -> None:
        with self._lock:
            self._dirty.add(cluster)
        self._wake.set()

    def make_watcher(self, spec: PollerSpec) -> ClusterWatcher:
        """The watcher of one cluster: it batches events for a summary interval, then publishes."""
        return ClusterWatcher(
            spec.name,
            spec.kubeconfig,
            spec.context,
            on_change=functools.partial(self.changed, spec.name),
            flush_interval_s=self._interval,
            spot=spec.traits.spot,
            health=self._health,
            on_transition=self._transitioned,
            prober=self.prober,
            gate=self.gate,
            settings=SHARD_WATCH,
            flusher=self.flusher,
            gpu_health=GpuHealthWatch(spec.name, *gpu_health.from_json(spec.health)),
        )

    def _transitioned(self, t: Transition) -> None:
        """A cluster's health changed: publish at once (the watcher has logged it with its cause)."""
        self._mark(t.cluster)

    def changed(self, name: str) -> None:
        """A batch of events of one cluster was applied (called on its watcher's flush thread): hand it to
        the writer thread, which writes every cluster changed meanwhile in one round trip."""
        if self._stop.is_set():
            return
        with self._lock:
            watcher = self._watchers.get(name)
            if watcher is None:
                return
            first_event_at = watcher.batch_first_event_at
            held = self._changed.get(name)
            self._changed[name] = first_event_at if held is None else held
        self._changed_signal.set()

    def _write_loop(self) -> None:
        """The writer thread: the summaries of the clusters changed since its last write, one pipeline.
        While it writes, more changes gather for the next (group commit); what fails is left marked for
        the publisher's next pass."""
        while True:
            self._changed_signal.wait()
            if self._stop.is_set():
                return
            self._changed_signal.clear()
            with self._lock:
                batch, self._changed = self._changed, {}
            if batch:
                self.publish_changed(batch)

    def publish_changed(self, batch: dict[str, float | None]) -> list[str]:
        """Write these changed clusters' summaries ({cluster: its batch's first event time}) and count
        each one's event-to-Redis latency. Returns the clusters written."""
        written = self.write_summaries(sorted(batch))
        done = time.time()
        with self._lock:
            for name in written:
                first_event_at = batch.get(name)
                if first_event_at is not None:
                    self._event_lags.observe(name, max(0.0, done - first_event_at))
        return written

    def start(self) -> list[str]:
        """Start watching every assigned cluster and publishing (idempotent)."""
        with self._assign_lock:
            self.lag.start()
            if self._publisher is None:  # first: each cluster's "syncing" summary is written as soon as its
                # watcher exists, the shard's sign of life while 125 members are still being listed
                self._publisher = threading.Thread(
                    target=self._publish_loop, name="gpufed-publisher", daemon=True
                )
                self._publisher.start()
                self._writer = threading.Thread(target=self._write_loop, name="gpufed-writer", daemon=True)
                self._writer.start()
            for name, spec in self._specs.items():
                if name not in self._watchers:
                    self._add(spec)
            return sorted(self._watchers)

    def _add(self, spec: PollerSpec) -> None:
        self._publish_locks.setdefault(spec.name, threading.Lock())
        watcher = self.make_watcher(spec)
        watcher.start()
        with self._lock:
            self._watchers[spec.name] = watcher

    def _remove(self, name: str) -> None:
        with self._lock:
            watcher = self._watchers.pop(name, None)
            self._last_write.pop(name, None)
            self._full_written.pop(name, None)
            self._last_nodes.pop(name, None)
            self._nodes_written.pop(name, None)
            self._dirty.discard(name)
        if watcher is not None:
            watcher.stop(timeout=1.0)
        lock = self._publish_locks.get(name)
        if lock is not None:
            with lock:  # a write of this cluster already under way lands before we return, never after
                pass

    def assign(self, specs: list[PollerSpec], generation: int) -> list[str]:
        """Own exactly these clusters from now on: start the new ones, stop the ones gone, restart the
        ones whose kubeconfig or context changed (a traits-only change takes effect at the next write).
        Returns the clusters owned."""
        with self._assign_lock:
            wanted = {s.name: s for s in specs}
            for name in [n for n in self._watchers if n not in wanted]:
                self._remove(name)
            for name, spec in wanted.items():
                old = self._specs.get(name)
                if old is not None and (old.kubeconfig, old.context) != (spec.kubeconfig, spec.context):
                    self._remove(name)  # re-pointed: a new client, new informers
                with self._lock:
                    self._specs[name] = spec  # traits take effect at the next write
                if name not in self._watchers and self._publisher is not None:
                    self._add(spec)
            with self._lock:
                for name in [n for n in self._specs if n not in wanted]:
                    del self._specs[name]
                self._generation = generation
                self._dirty.update(wanted)
                self._wake.set()
                return sorted(self._watchers)

    def add_cluster(self, spec: PollerSpec) -> bool:
        """Start watching one more cluster; False when it is watched already (idempotent). The
        supervisor's set_clusters is the fleet-wide way; this is the one-shard one."""
        with self._assign_lock:
            if spec.name in self._watchers:
                return False
            with self._lock:
                self._specs[spec.name] = spec
            self._add(spec)
            self._mark(spec.name)
            return True

    def remove_cluster(self, name: str) -> bool:
        """Stop watching a cluster; its summary is no longer written. False when it was not watched."""
        with self._assign_lock:
            if name not in self._watchers:
                return False
            self._remove(name)
            with self._lock:
                self._specs.pop(name, None)
            return True

    def ping(self) -> dict[str, Any]:
        """Who this shard is now: its process, its assignment generation, its clusters."""
        with self._lock:
            clusters = sorted(self._watchers)
        return {
            "pid": os.getpid(),
            "generation": self._generation,
            "clusters": clusters,
            "started_at": self._started_at,
            "restarted": _reconstructed(),
            "node": _node_id(),
        }

    def publish_once(self) -> int:
        """Write the summary of every dirty (or heartbeat-due) cluster. Returns how many were written."""
        now = time.time()
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            last = dict(self._last_write)
            last_nodes = dict(self._last_nodes)
            names = list(self._watchers)
        written = len(
            self.write_summaries(
                [n for n in names if n not in dirty and now - last.get(n, 0.0) >= HEARTBEAT_SECONDS]
            )
        )
        for name in names:
            if name not in dirty:
                continue
            try:
                self.publish_cluster(name)
            except KeyError:
                continue  # taken away meanwhile
            except Exception as exc:
                self._failed(exc, "the summary", name)
                self._mark(name)
                continue
            written += 1
        for name in names:
            if now - last_nodes.get(name, 0.0) >= NODES_INTERVAL_SECONDS:
                try:
                    self.publish_nodes(name)
                except KeyError:
                    continue
                except Exception as exc:
                    self._failed(exc, "the node table", name)
        if now - self._event_lags_written >= EVENT_LAGS_INTERVAL_SECONDS:
            self._event_lags_written = now
            self.write_event_lags()
        return written

    def write_event_lags(self) -> None:
        """Add the event-to-Redis latencies observed since the last write to Redis (one round trip); on
        failure they are kept for the next."""
        with self._lock:
            counts = self._event_lags.drain()
        try:
            self._store.add_event_lags(counts, self._event_lags.bounds)
        except Exception as exc:
            with self._lock:
                self._event_lags.restore(counts)
            self._failed(exc, "the event-to-Redis histogram", f"{len(counts)} clusters")

    def write_summaries(self, names: list[str]) -> list[str]:
        """Write these clusters' summaries in one round trip: the changed ones (the writer thread's) and
        those due a heartbeat (the publisher's). A summary equal to the last one written in full but for
        its heartbeat moves only its heartbeat (no new version: the broker's caches read nothing again),
        the others are written in full. Each cluster's publish lock is held from its read to the write,
        as in publish_cluster (taken in name order by both threads). Returns the clusters written (none
        on failure: they are marked for the publisher's next pass)."""
        held: list[threading.Lock] = []
        full: list[ClusterSummary] = []
        beats: list[tuple[str, int, float, float]] = []
        try:
            for name in sorted(names):
                lock = self._publish_locks.get(name)
                with self._lock:
                    watcher, spec = self._watchers.get(name), self._specs.get(name)
                    last = self._full_written.get(name)
                if lock is None or watcher is None or spec is None:
                    continue  # taken away meanwhile
                lock.acquire()
                held.append(lock)
                summary = dataclasses.replace(watcher.summary(spec.traits), published_at=time.time())
                if last is not None and last[0] == _without_heartbeat(summary):
                    beats.append((name, last[1], summary.heartbeat, summary.published_at))
                else:
                    full.append(summary)
            written = put_summaries(self._store, full)
            beaten = beat_summaries(self._store, beats)
            missed = [b[0] for b, ok in zip(beats, beaten, strict=True) if not ok]
            with self._lock:  # before the publish locks go: what the next write compares with
                for s in written:
                    self._full_written[s.cluster] = (_without_heartbeat(s), s.version)
                for name in missed:  # written by someone else meanwhile, or lost by Redis: in full next pass
                    self._full_written.pop(name, None)
                    self._dirty.add(name)
        except Exception as exc:
            self._failed(exc, "the summaries", f"{len(full) + len(beats)} clusters")
            with self._lock:
                self._dirty.update([s.cluster for s in full] + [b[0] for b in beats])
            return []
        finally:
            for lock in held:
                lock.release()
        if full or beats:
            self.store_errors.recovered("redis", "publishing to Redis works again")
        done = time.time()
        landed = [s.cluster for s in written] + [b[0] for b in beats if b[0] not in missed]
        with self._lock:
            for name in landed:
                if name in self._watchers:
                    self._last_write[name] = done
            self.writes += len(landed)
        return landed

    def publish_nodes(self, name: str) -> int:
        """Write one cluster's per-node table (the fleet view's `nodes=true`) once its watcher has listed
        everything it needs, and again when the table differs from the one written or NODES_REFRESH_SECONDS
        have passed. Returns the rows written (0 when nothing was)."""
        now = time.time()
        with self._lock:
            watcher = self._watchers[name]
            spot = self._specs[name].traits.spot
        if not watcher.capacity_known:
            return 0  # not listed yet: no table rather than an empty one (written on the next pass)
        table = nodes_table(
            watcher.snapshot().nodes, spot, watcher.gpu_health.view() if watcher.gpu_health else None
        )
        written, written_at = self._nodes_written.get(name, ((), 0.0))
        if table == written and now - written_at < NODES_REFRESH_SECONDS:
            with self._lock:  # the same table as the one in Redis: not written again
                self._last_nodes[name] = now
            return 0
        self._store.put_nodes(name, table, now)
        with self._lock:
            self._last_nodes[name] = now
            self._nodes_written[name] = (table, now)
        return len(table)

    def publish_cluster(self, name: str) -> ClusterSummary:
        """Write one cluster's summary (from its watcher's index) to Redis; the summary as written.

        One lock per cluster around read-and-write: the watcher thread and the heartbeat publisher may
        both publish a cluster, and without it an older summary could land after a newer one."""
        with self._publish_locks[name]:
            with self._lock:
                watcher = self._watchers[name]
                traits = self._specs[name].traits
            summary = dataclasses.replace(watcher.summary(traits), published_at=time.time())
            written = self._store.put_summary(summary)
            with self._lock:
                self._full_written[name] = (_without_heartbeat(written), written.version)
        self.store_errors.recovered("redis", "publishing to Redis works again")
        with self._lock:
            self._last_write[name] = time.time()
            self.writes += 1
        return written

    def _next_due(self) -> float:
        """Seconds until the publisher has work: none with a cluster to retry (or never written), else
        until the first heartbeat, node table or event-lag histogram falls due."""
        with self._lock:
            if self._dirty:
                return 0.0
            names = list(self._watchers)
            due = [self._event_lags_written + EVENT_LAGS_INTERVAL_SECONDS]
            due += [self._last_write.get(n, 0.0) + HEARTBEAT_SECONDS for n in names]
            due += [self._last_nodes.get(n, 0.0) + NODES_INTERVAL_SECONDS for n in names]
        return max(0.0, min(due) - time.time())

    def _publish_loop(self) -> None:
        """A pass, then at least the summary interval (a failed write is retried no faster), then asleep
        until something falls due or a cluster is marked: an idle shard wakes for its heartbeats, not
        five times a second (issue 43)."""
        while not self._stop.is_set():
            self._wake.clear()
            self.publish_once()
            if self._stop.wait(self._interval):
                return
            self._wake.wait(self._next_due())

    def health(self) -> dict[str, str]:
        with self._lock:
            watchers = dict(self._watchers)
        return {name: str(w.health) for name, w in watchers.items()}

    def transitions(self) -> list[dict[str, Any]]:
        """The recent health transitions of this shard's clusters, oldest first."""
        with self._lock:
            watchers = list(self._watchers.values())
        out = [dataclasses.asdict(t) for w in watchers for t in list(w.transitions)]
        return sorted(out, key=lambda t: float(t["at"]))

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()  # the publisher sees the stop
        self._changed_signal.set()  # the writer sees the stop
        for thread in (self._publisher, self._writer):
            if thread is not None:
                thread.join(timeout=5)
        with self._lock:
            watchers = list(self._watchers.values())
        for w in watchers:
            w.stop()
        self.prober.stop()
        self.flusher.stop()
        self.write_event_lags()  # the last pass's
        self.lag.stop()
        self._store.close()
