"""Cluster health on an idle healthy fleet, and what the pollers cost per 100 clusters.

Starts kubesim (`synthetic_fleet(C, N)`, controllers off: nothing changes, the fleet is idle), a private
Redis, and the product's poller fleet on real Ray (adapters.ray_actors.PollerFleet: `--shards` PollerShard
actors and their supervisor, default health thresholds, clusterLostSeconds 10). Once every cluster's summary
reads healthy it samples every summary in Redis every `--interval` s for `--seconds` s, as a reader of
/v1/clusters would believe it (broker.health.machine.observed_health: stale summaries read unreachable), and
counts the samples that are not healthy, and the health transitions the shards saw. Then it reports the
processes Ray runs for the broker (every descendant process of this one, Redis excluded) and the resident
memory of each shard actor and of all of them.

    .venv/bin/python benchmarks/health_sample.py --clusters 10 --nodes 4 --seconds 60
    .venv/bin/python benchmarks/health_sample.py --clusters 100 --nodes 10 --shards 1 --seconds 30
    .venv/bin/python benchmarks/health_sample.py --clusters 100 --nodes 10 --shards 4 --seconds 30
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _proc(pid: int, name: str) -> str:
    try:
        return Path(f"/proc/{pid}/{name}").read_text()
    except OSError:
        return ""


def rss_mib(pid: int) -> float:
    for line in _proc(pid, "status").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def threads(pid: int) -> int:
    for line in _proc(pid, "status").splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def descendants(root: int) -> list[int]:
    """Every live descendant process of `root` (from /proc's PPid)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        for line in _proc(int(entry), "status").splitlines():
            if line.startswith("PPid:"):
                children[int(line.split()[1])].append(int(entry))
                break
    out: list[int] = []
    todo = [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    return _proc(pid, "cmdline").replace("\0", " ").strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clusters", type=int, default=10)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--interval", type=float, default=0.5)
    args = ap.parse_args()

    import ray

    from adapters.ray_actors import PollerFleet
    from adapters.redis_process import private_redis
    from adapters.redis_store import RedisStateStore
    from adapters.shard_ring import PollerSpec
    from broker.core.model import ClusterTraits, Health
    from broker.health.machine import HealthThresholds, observed_health
    from kubesim.fleet import synthetic_fleet
    from kubesim.sim import Simulation

    thresholds = HealthThresholds()
    with tempfile.TemporaryDirectory() as tmp, private_redis(Path(tmp)) as redis:
        fleet = synthetic_fleet(args.clusters, args.nodes)
        t0 = time.monotonic()
        with Simulation(fleet, Path(tmp) / "sim", speed=0, controllers=False) as sim:
            names = [c.name for c in fleet.clusters]
            specs = [
                PollerSpec(n, sim.kubeconfig_path(n).as_posix(), None, ClusterTraits(name=n)) for n in names
            ]
            prefix = "hs" + uuid.uuid4().hex[:8]
            pollers = PollerFleet(specs, redis.url, prefix, shards=args.shards, health=thresholds)
            store = RedisStateStore(redis.url, prefix=prefix)
            pollers.start()
            try:
                deadline = time.monotonic() + 300
                while time.monotonic() < deadline:
                    summaries = [store.get_summary(n) for n in names]
                    if all(s is not None and s.health == Health.HEALTHY for s in summaries):
                        break
                    time.sleep(0.5)
                else:
                    sys.exit("not every cluster became healthy within 300 s")
                print(f"{len(names)} clusters healthy {time.monotonic() - t0:.1f} s after start")

                samples = 0
                bad: collections.Counter[str] = collections.Counter()
                end = time.monotonic() + args.seconds
                while time.monotonic() < end:
                    now = time.time()
                    for n in names:
                        s = store.get_summary(n)
                        samples += 1
                        view = observed_health(s, now, thresholds.lost_seconds) if s else None
                        if view is None or view.health != Health.HEALTHY:
                            bad[
                                f"{n}: {view.health if view else 'missing'} {view.reason if view else ''}"
                            ] += 1
                    time.sleep(args.interval)
                transitions: list[dict[str, Any]] = []
                for name in pollers.shard_names:
                    transitions.extend(ray.get(ray.get_actor(name).transitions.remote(), timeout=60))
                worse = [t for t in transitions if t["after"] != Health.HEALTHY]

                me = os.getpid()
                procs = [p for p in descendants(me) if "redis-server" not in cmdline(p)]
                shard_pids = pollers.shard_pids()
                print()
                print(
                    f"| figure ({args.clusters} clusters x {args.nodes} nodes, {args.shards} shard(s)) | measured |"
                )
                print("|---|---|")
                print(
                    f"| summaries sampled over {args.seconds:.0f} s (every {args.interval} s) | {samples} |"
                )
                print(f"| samples not healthy | **{sum(bad.values())}** |")
                print(f"| health transitions to a worse state | {len(worse)} |")
                print(f"| processes Ray runs for the broker | {len(procs)} |")
                for name, pid in sorted(shard_pids.items()):
                    print(
                        f"| shard {name.rsplit('-', 1)[-1]}: RSS, threads | {rss_mib(pid):.0f} MiB, {threads(pid)} |"
                    )
                total = sum(rss_mib(p) for p in shard_pids.values())
                print(
                    f"| all shard actors: RSS | **{total:.0f} MiB**"
                    + (
                        f" ({total / args.clusters * 100:.0f} MiB per 100 clusters)"
                        if args.clusters >= 100
                        else ""
                    )
                    + " |"
                )
                print(f"| every Ray process: RSS | {sum(rss_mib(p) for p in procs):.0f} MiB |")
                for line, count in bad.most_common(10):
                    print(f"  not healthy x{count}: {line}")
                for t in worse[:10]:
                    print(f"  transition: {t}")
                print("\nprocesses:")
                for p in procs:
                    print(f"  {p} {rss_mib(p):7.0f} MiB  {cmdline(p)[:100]}")
            finally:
                pollers.stop()
                store.close()
                if ray.is_initialized():
                    ray.shutdown()


if __name__ == "__main__":
    main()
