"""Capacity sync at fleet scale: kubesim clusters over HTTPS -> PollerShard -> summaries in Redis.

Measures, for C clusters x N nodes x P pods per node (kubesim's synthetic_fleet, GPU pods bound straight
to the nodes), with the broker's own publishing path (adapters.poller_shard.PollerShard: one ClusterWatcher
per cluster folding events into its CapacityIndex, one publisher writing each changed cluster's summary):
    cold sync        start of the watchers -> every cluster's HEALTHY summary (with all its nodes) in Redis
    steady state     pod watch events per second the broker applies while kubesim replaces pods (delete
                     one + create one on the same node, kubesim.churn.PodChurn) at --rate events/s
    event -> Redis   latency from the pod's write in kubesim (time stamped in the pod) to the write of a
                     summary in Redis that reflects it, p50/p99 (every created pod is a sample)
    broker memory    peak RSS of the broker process
    idle (--idle S)  after the cold sync, S seconds with nothing changing: the shard's CPU (its probes, watches,
                     heartbeats, node tables) and the kubesim processes', % of one core
kubesim runs in --sim-procs processes of its own, each serving a slice of the clusters and generating its
churn on its simulation loop, so the load generator is not the bottleneck and shares no GIL with the
broker (all processes share the machine's cores). With --decode: the raw-JSON list (orjson over
_preload_content=False bytes) against the typed client's deserialisation on one cluster's node list.

    .venv/bin/python benchmarks/capacity_sync.py --clusters 100 --nodes 1000 --pods-per-node 5
    .venv/bin/python benchmarks/capacity_sync.py --clusters 1 --nodes 1000 --decode
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------- kubesim side (child processes)


def run_kubesim(args: argparse.Namespace, part: int, out_dir: str, conn: Any) -> None:
    """Serve clusters part, part+K, ... of the fleet; on ("churn", seconds, rate) replace pods at that
    rate on the simulation loop and answer ("churned", events written); on ("stop",) exit."""
    import asyncio

    from kubesim.churn import PodChurn
    from kubesim.fleet import FleetSpec, synthetic_fleet
    from kubesim.sim import Simulation

    whole = synthetic_fleet(args.clusters, args.nodes, gpus_per_node=8)
    fleet = FleetSpec(clusters=whole.clusters[part :: args.sim_procs])
    with Simulation(
        fleet,
        Path(out_dir) / f"part-{part}",
        speed=0,
        controllers=False,
        bookmark_interval=args.bookmark_seconds,
    ) as sim:
        names = [c.name for c in fleet.clusters]
        churn = PodChurn({c: sim.store(c) for c in names})
        sim.call(lambda: churn.populate(args.pods_per_node))
        conn.send(("ready", {c: sim.kubeconfig_path(c).as_posix() for c in names}))
        while True:
            msg = conn.recv()
            if msg[0] == "stop":
                break
            _, seconds, rate = msg
            written = asyncio.run_coroutine_threadsafe(churn.run(rate, seconds), sim.loop).result()
            conn.send(("churned", written))
    conn.send(("stopped", 0))


class Kubesims:
    """The kubesim child processes and their pipes."""

    def __init__(self, args: argparse.Namespace, procs: int) -> None:
        out_dir = tempfile.mkdtemp(prefix="gpufed-bench-")
        ctx = mp.get_context("spawn")
        self.pipes = []
        self.procs = []
        for part in range(procs):
            parent, child = mp.Pipe()
            proc = ctx.Process(target=run_kubesim, args=(args, part, out_dir, child), daemon=True)
            proc.start()
            self.pipes.append(parent)
            self.procs.append(proc)
        self.kubeconfigs: dict[str, str] = {}
        for pipe in self.pipes:
            kind, configs = pipe.recv()
            assert kind == "ready", kind
            self.kubeconfigs.update(configs)

    def churn(self, seconds: float, rate: float) -> int:
        for pipe in self.pipes:
            pipe.send(("churn", seconds, rate / len(self.pipes)))
        return sum(int(pipe.recv()[1]) for pipe in self.pipes)

    def stop(self) -> None:
        for pipe in self.pipes:
            pipe.send(("stop",))
        for pipe, proc in zip(self.pipes, self.procs, strict=True):
            pipe.recv()
            proc.join(30)


# --------------------------------------------------------------------------- broker side (this process)


def _rss_mib() -> int:
    """This process's resident memory now (Linux /proc), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    return -1


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_sync(args: argparse.Namespace) -> dict[str, Any]:
    from adapters.kube import ClusterWatcher, WatchSettings
    from adapters.poller_shard import PollerShard
    from adapters.shard_ring import PollerSpec
    from broker.core.model import ClusterSummary, ClusterTraits, Health
    from broker.health.machine import HealthThresholds
    from kubesim.churn import WRITTEN_AT

    t_spawn = time.monotonic()
    sims = Kubesims(args, args.sim_procs)
    print(
        f"kubesim up ({args.sim_procs} processes): {args.clusters} x {args.nodes} nodes x "
        f"{args.pods_per_node} pods in {time.monotonic() - t_spawn:.1f}s",
        flush=True,
    )

    latencies: list[float] = []
    lat_lock = threading.Lock()
    # per cluster: the stamps of the pods in the summary being written
    in_summary: dict[str, list[float]] = {c: [] for c in sims.kubeconfigs}
    synced: set[str] = set()
    settings = WatchSettings(watch_timeout_s=300, list_timeout=(10.0, 300.0))

    class TimedWatcher(ClusterWatcher):
        """Notes the write time of every pod it sees created, in the index's own steps: a stamp is taken
        when its pod is applied, is folded with the index, and goes with the next summary built, so it
        ends when the first summary that carries the pod is in Redis. (Noting it after `apply` returned
        raced with a flush that had already folded the pod in.)"""

        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            self.applied_stamps: list[float] = []
            self.folded_stamps: list[float] = []

        def _put_pod(self, event_type: str, pod: dict[str, Any]) -> None:  # under the watcher's lock
            if event_type == "ADDED":
                stamp = ((pod.get("metadata") or {}).get("annotations") or {}).get(WRITTEN_AT)
                if stamp and stamp != "0.0":
                    self.applied_stamps.append(float(stamp))
            super()._put_pod(event_type, pod)

        def _refresh(self) -> None:  # under the watcher's lock
            super()._refresh()
            self.folded_stamps.extend(self.applied_stamps)
            self.applied_stamps = []

        def summary(self, traits: ClusterTraits) -> ClusterSummary:
            with self._lock:
                self._refresh()
                stamps, self.folded_stamps = self.folded_stamps, []
            with lat_lock:
                in_summary[self.cluster].extend(stamps)
            return super().summary(traits)

    class TimedShard(PollerShard):
        """The broker's publisher; a pod's latency ends when the write of a summary carrying it returns."""

        def make_watcher(self, spec: PollerSpec) -> ClusterWatcher:
            return TimedWatcher(
                spec.name,
                spec.kubeconfig,
                spec.context,
                on_change=lambda: self.changed(spec.name),
                flush_interval_s=args.summary_interval,
                settings=settings,
                spot=spec.traits.spot,
                health=thresholds,
                prober=self.prober,
                flusher=self.flusher,
            )

        def publish_cluster(self, name: str) -> ClusterSummary:
            written = super().publish_cluster(name)
            self.landed([name])
            return written

        def write_summaries(self, names: list[str]) -> list[str]:
            written = super().write_summaries(names)
            self.landed(written)
            return written

        def landed(self, names: list[str]) -> None:
            done = time.time()
            with lat_lock:
                for name in names:
                    stamps, in_summary[name] = in_summary[name], []
                    latencies.extend(done - s for s in stamps)
                    full = self._full_written.get(name)
                    if full and full[0].health == Health.HEALTHY and full[0].nodes_total == args.nodes:
                        synced.add(name)

    # settings.clusterLostSeconds and the probe interval derived from it, as `gpufed serve` builds them
    thresholds = HealthThresholds.for_lost(args.lost_seconds)
    print(
        f"health: clusterLostSeconds {args.lost_seconds:g}, a probe every {thresholds.probe_interval_seconds:g} s"
    )
    specs = [PollerSpec(n, path, None, ClusterTraits(name=n)) for n, path in sorted(sims.kubeconfigs.items())]
    shard = TimedShard(
        specs, args.redis_url, "bench" + uuid.uuid4().hex[:6], args.summary_interval, health=thresholds
    )

    t0 = time.monotonic()
    shard.start()
    while len(synced) < len(specs) and time.monotonic() - t0 < args.cold_timeout:
        time.sleep(0.05)
    cold = time.monotonic() - t0
    rss_synced = _rss_mib()
    print(
        f"cold sync: {len(synced)}/{len(specs)} clusters in {cold:.1f}s, RSS {rss_synced} MiB, "
        f"{threading.active_count()} threads",
        flush=True,
    )
    time.sleep(2.0)  # let the list-time backlog settle before the steady-state window
    idle: dict[str, Any] = {}
    if args.idle:  # nothing changing: what the shard (this process) and the members cost to stay fresh
        shard_cpu, members_cpu = _cpu_seconds(), sum(_proc_cpu_seconds(p.pid) for p in sims.procs)
        time.sleep(args.idle)
        idle = {
            "idle_shard_cpu_pct": round((_cpu_seconds() - shard_cpu) / args.idle * 100, 1),
            "idle_members_cpu_pct": round(
                (sum(_proc_cpu_seconds(p.pid) for p in sims.procs) - members_cpu) / args.idle * 100, 1
            ),
        }

    def applied() -> int:
        return sum(i.events for w in shard._watchers.values() for i in w.stats.informers.values())

    with lat_lock:
        latencies.clear()
    before = applied()
    churn_usage = resource.getrusage(resource.RUSAGE_SELF)
    t1 = time.monotonic()
    written = sims.churn(args.churn_seconds, args.rate)
    offered_s = time.monotonic() - t1
    drain_end = time.monotonic() + 30
    while applied() - before < written and time.monotonic() < drain_end:
        time.sleep(0.02)
    window = time.monotonic() - t1
    events = applied() - before
    # what the shard (this process) spent applying and publishing the churn
    churned = resource.getrusage(resource.RUSAGE_SELF)
    churn_user = churned.ru_utime - churn_usage.ru_utime
    churn_cpu = churn_user + churned.ru_stime - churn_usage.ru_stime
    time.sleep(args.summary_interval * 3)  # the last summaries
    rss_end = _rss_mib()
    shard.stop()
    sims.stop()
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "clusters": args.clusters,
        "nodes": args.nodes,
        "pods_per_node": args.pods_per_node,
        "sim_procs": args.sim_procs,
        "cold_sync_s": round(cold, 1),
        "clusters_synced": len(synced),
        "events_written": written,
        "events_offered_per_s": round(written / offered_s),
        "events_applied": events,
        "events_per_s": round(events / window),
        "window_s": round(window, 1),
        "churn_shard_cpu_pct": round(churn_cpu / window * 100, 1),
        "churn_shard_cpu_ms_per_event": round(churn_cpu / max(events, 1) * 1000, 3),
        "churn_shard_user_cpu_pct": round(churn_user / window * 100, 1),
        "latency_p50_s": round(percentile(latencies, 0.5), 3),
        "latency_p99_s": round(percentile(latencies, 0.99), 3),
        "latency_max_s": round(max(latencies), 3) if latencies else None,
        "latency_samples": len(latencies),
        "mean_latency_s": round(statistics.fmean(latencies), 3) if latencies else None,
        "broker_peak_rss_mib": round(rss_mib),
        "broker_rss_after_sync_mib": rss_synced,
        "broker_rss_at_end_mib": rss_end,
        "summary_writes": shard.writes,
        **idle,
    }


def _cpu_seconds() -> float:
    """CPU seconds (user + system) of this process, every thread."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _proc_cpu_seconds(pid: int | None) -> float:
    """CPU seconds (user + system) of another process, from /proc (0.0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_decode(args: argparse.Namespace) -> dict[str, Any]:
    """One 1,000-node list: typed client deserialisation vs raw bytes + orjson (best of --repeat)."""
    from kubernetes import client

    from adapters.kube import KubeRest, connect

    sims = Kubesims(
        argparse.Namespace(**{**vars(args), "clusters": 1, "pods_per_node": 0, "sim_procs": 1}), 1
    )
    [(name, path)] = sims.kubeconfigs.items()
    api = connect(path)
    core = client.CoreV1Api(api)
    rest = KubeRest(name, api, timeout=(10.0, 300.0))
    typed, raw = [], []
    for _ in range(args.repeat):
        t = time.perf_counter()
        n_typed = len(core.list_node(_request_timeout=300).items)
        typed.append(time.perf_counter() - t)
        t = time.perf_counter()
        n_raw = len(rest.request("GET", "/api/v1/nodes", timeout=(10.0, 300.0))["items"])
        raw.append(time.perf_counter() - t)
    sims.stop()
    return {
        "nodes": (n_typed, n_raw),
        "typed_list_s": round(min(typed), 3),
        "raw_orjson_list_s": round(min(raw), 3),
        "speedup": round(min(typed) / min(raw), 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clusters", type=int, default=100)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods-per-node", type=int, default=5)
    p.add_argument("--rate", type=float, default=6_000, help="pod events per second kubesim offers")
    p.add_argument("--churn-seconds", type=float, default=20.0)
    p.add_argument("--sim-procs", type=int, default=2, help="kubesim processes, each serving a slice")
    p.add_argument("--summary-interval", type=float, default=0.2, help="the publisher's pass interval")
    p.add_argument("--cold-timeout", type=float, default=900.0)
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--decode", action="store_true", help="only compare typed vs raw decoding of a node list")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument(
        "--idle",
        type=float,
        default=0.0,
        help="seconds of nothing changing after the cold sync: the shard's and the members' CPU (%% of a core)",
    )
    p.add_argument(
        "--lost-seconds",
        type=float,
        default=10.0,
        help="settings.clusterLostSeconds: the probe interval is a fifth of it (2 s at the default 10)",
    )
    p.add_argument(
        "--bookmark-seconds",
        type=float,
        default=60.0,
        help="kubesim's watch BOOKMARK interval (a real kube-apiserver sends one about once a minute)",
    )
    args = p.parse_args(argv)
    result = bench_decode(args) if args.decode else bench_sync(args)
    for k, v in result.items():
        print(f"{k:>22}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
