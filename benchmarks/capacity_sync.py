"""Capacity sync at fleet scale: kubesim clusters over HTTPS -> ClusterWatchers -> summaries in Redis.

Measures, for C clusters x N nodes x P pods per node (kubesim's synthetic_fleet, pods written straight
into the simulated stores):
    cold sync        start of the watchers -> every cluster's HEALTHY summary (with all its nodes) in Redis
    steady state     pod events per second the broker applies while kubesim writes them as fast as asked
    event -> Redis   latency from the simulated write (stamped in the pod) to the summary write, p50/p99
    broker memory    peak RSS of the broker process (kubesim runs in its own process: it competes for the
                     cores but not for the broker's GIL or memory)
and, with --decode, the raw-JSON list (orjson over _preload_content=False bytes) against the typed
client's deserialisation on one cluster's node list.

    .venv/bin/python benchmarks/capacity_sync.py --clusters 100 --nodes 1000 --pods-per-node 5
    .venv/bin/python benchmarks/capacity_sync.py --clusters 1 --nodes 1000 --decode
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ANNOTATION = "bench.gpufed.io/written-at"


# --------------------------------------------------------------------------- kubesim side (child process)


def _pod(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": {ANNOTATION: "0"}},
        "spec": {
            "nodeName": node,
            "schedulerName": "none",
            "containers": [
                {
                    "name": "c",
                    "image": "busybox:1.36",
                    "resources": {
                        "requests": {"nvidia.com/gpu": "1", "cpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
        "status": {"phase": "Running"},
    }


def run_kubesim(args: argparse.Namespace, out_dir: str, conn: Any) -> None:
    """Serve the fleet; on "churn <seconds> <rate>" flip pod phases at that rate; on "stop" exit."""
    from kubesim.fleet import synthetic_fleet
    from kubesim.sim import Simulation

    fleet = synthetic_fleet(args.clusters, args.nodes, gpus_per_node=8)
    with Simulation(fleet, Path(out_dir), speed=0) as sim:
        names = [c.name for c in fleet.clusters]

        def populate(cluster: str) -> list[str]:
            st = sim.store(cluster)
            nodes, _ = st.list("nodes")
            pods = []
            for n in nodes:
                node = n["metadata"]["name"]
                for i in range(args.pods_per_node):
                    name = f"{node}-p{i}"
                    st.create("pods", _pod(name, node))
                    pods.append(name)
            return pods

        pods = {c: sim.call(lambda c=c: populate(c)) for c in names}
        conn.send(("ready", {c: sim.kubeconfig_path(c).as_posix() for c in names}))
        flips = 0
        while True:
            msg = conn.recv()
            if msg[0] == "stop":
                break
            _, seconds, rate = msg
            batch = max(1, int(rate / 50))  # 50 batches a second
            end = time.monotonic() + seconds
            k = 0
            while time.monotonic() < end:
                t0 = time.monotonic()

                def churn(k0: int = k, batch: int = batch) -> None:
                    now = repr(time.time())
                    for j in range(k0, k0 + batch):
                        c = names[j % len(names)]
                        plist = pods[c]
                        name = plist[(j // len(names)) % len(plist)]

                        def edit(p: dict[str, Any], now: str = now) -> None:
                            p["metadata"].setdefault("annotations", {})[ANNOTATION] = now
                            p["status"]["phase"] = (
                                "Succeeded" if p["status"]["phase"] == "Running" else "Running"
                            )

                        sim.store(c).mutate("pods", "default", name, edit)

                sim.call(churn)
                k += batch
                flips += batch
                time.sleep(max(0.0, 0.02 - (time.monotonic() - t0)))
            conn.send(("churned", flips))
    conn.send(("stopped", 0))


# --------------------------------------------------------------------------- broker side (this process)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_sync(args: argparse.Namespace) -> dict[str, Any]:
    from adapters.kube import ClusterWatcher, WatchSettings
    from adapters.redis_store import RedisStateStore
    from broker import capacity
    from broker.model import ClusterSnapshot, ClusterTraits, Health

    parent, child = mp.Pipe()
    out_dir = tempfile.mkdtemp(prefix="gpufed-bench-")
    proc = mp.get_context("spawn").Process(target=run_kubesim, args=(args, out_dir, child), daemon=True)
    t_spawn = time.monotonic()
    proc.start()
    kind, kubeconfigs = parent.recv()
    assert kind == "ready", kind
    t_world = time.monotonic() - t_spawn
    print(
        f"kubesim up: {args.clusters} x {args.nodes} nodes x {args.pods_per_node} pods in {t_world:.1f}s",
        flush=True,
    )

    store = RedisStateStore(args.redis_url, prefix="bench" + uuid.uuid4().hex[:6])
    latencies: list[float] = []
    lat_lock = threading.Lock()
    pending: dict[str, list[float]] = {c: [] for c in kubeconfigs}

    class TimedWatcher(ClusterWatcher):
        def apply(self, resource_name: str, event_type: str, obj: dict[str, Any], rv: str) -> None:
            stamp = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
            super().apply(resource_name, event_type, obj, rv)
            if stamp and stamp != "0":
                with lat_lock:
                    pending[self.cluster].append(float(stamp))

    synced: set[str] = set()
    settings = WatchSettings(watch_timeout_s=300, list_timeout=(10.0, 300.0))
    watchers: list[ClusterWatcher] = []
    for name, path in kubeconfigs.items():
        traits = ClusterTraits(name=name)

        def publish(snap: ClusterSnapshot, health: Health, hb: float, t: ClusterTraits = traits) -> None:
            store.put_summary(capacity.summarize(snap, t, health, hb))
            done = time.time()
            with lat_lock:
                stamps, pending[t.name] = pending[t.name], []
                latencies.extend(done - s for s in stamps)
                if health == Health.HEALTHY and len(snap.nodes) == args.nodes:
                    synced.add(t.name)

        watchers.append(
            TimedWatcher(name, path, on_snapshot=publish, settings=settings, flush_interval_s=0.05)
        )

    t0 = time.monotonic()
    for w in watchers:
        w.start()
    while len(synced) < len(watchers):
        if time.monotonic() - t0 > args.cold_timeout:
            break
        time.sleep(0.05)
    cold = time.monotonic() - t0
    print(f"cold sync: {len(synced)}/{len(watchers)} clusters in {cold:.1f}s", flush=True)

    def applied() -> int:
        return sum(i.events for w in watchers for i in w.stats.informers.values())

    with lat_lock:
        latencies.clear()
    before = applied()
    t1 = time.monotonic()
    parent.send(("churn", args.churn_seconds, args.rate))
    kind, written = parent.recv()
    # let the broker drain what was written, bounded
    drain_end = time.monotonic() + 30
    while applied() - before < written and time.monotonic() < drain_end:
        time.sleep(0.05)
    window = time.monotonic() - t1
    events = applied() - before
    parent.send(("stop",))
    parent.recv()
    proc.join(30)
    for w in watchers:
        w.stop(timeout=1)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "clusters": args.clusters,
        "nodes": args.nodes,
        "pods_per_node": args.pods_per_node,
        "cold_sync_s": round(cold, 1),
        "clusters_synced": len(synced),
        "events_written": written,
        "events_applied": events,
        "events_per_s": round(events / window),
        "window_s": round(window, 1),
        "latency_p50_s": round(percentile(latencies, 0.5), 3),
        "latency_p99_s": round(percentile(latencies, 0.99), 3),
        "latency_samples": len(latencies),
        "broker_peak_rss_mib": round(rss_mib),
        "snapshots": sum(w.stats.snapshots for w in watchers),
        "mean_latency_s": round(statistics.fmean(latencies), 3) if latencies else None,
    }
    store.close()
    return result


def bench_decode(args: argparse.Namespace) -> dict[str, Any]:
    """One 1,000-node list: typed client deserialisation vs raw bytes + orjson (best of --repeat)."""
    from kubernetes import client

    from adapters.kube import KubeRest, connect

    parent, child = mp.Pipe()
    out_dir = tempfile.mkdtemp(prefix="gpufed-bench-")
    a = argparse.Namespace(**{**vars(args), "clusters": 1, "pods_per_node": 0})
    proc = mp.get_context("spawn").Process(target=run_kubesim, args=(a, out_dir, child), daemon=True)
    proc.start()
    _, kubeconfigs = parent.recv()
    [(name, path)] = kubeconfigs.items()
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
    parent.send(("stop",))
    parent.recv()
    proc.join(30)
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
    p.add_argument("--rate", type=float, default=10_000, help="pod events per second kubesim offers")
    p.add_argument("--churn-seconds", type=float, default=10.0)
    p.add_argument("--cold-timeout", type=float, default=900.0)
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--decode", action="store_true", help="only compare typed vs raw decoding of a node list")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    result = bench_decode(args) if args.decode else bench_sync(args)
    for k, v in result.items():
        print(f"{k:>22}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
