"""What the API's fleet reads cost while a burst holds thousands of reservations.

    .venv/bin/python -m benchmarks.fleet_reads [--clusters 20] [--reservations 6000] [--repeat 5]

A private redis-server holds `--clusters` summaries (50 nodes x 8 H100 each) and `--reservations`
live one-GPU reservations spread over them, as in the middle of an 8,000-job burst
(benchmarks.fleet_scale). Prints the CPU and wall time of one cold read (nothing cached) of
  snapshot  the published placeable snapshot (broker.cache.fleet_snapshot: summaries, every
            reservation parsed and deducted), what the submit warnings read until 2026-12-06;
  observed  the observed summaries alone (broker.cache.observed_fleet), what they read now.
During a burst every ledger moves between two reads, so a read then is as cold as these.
"""

from __future__ import annotations

import argparse
import time
import uuid

from adapters.redis_process import private_redis
from adapters.redis_store import RedisStateStore
from broker.cache.fleet_snapshot import SnapshotPublisher
from broker.cache.observed_fleet import ObservedFleet
from broker.core.model import ClusterSummary, Health, ProductCapacity, Reservation


class WallClock:
    def now(self) -> float:
        return time.time()


def fill(store: RedisStateStore, clusters: list[str], reservations: int) -> None:
    full = (0,) * 8 + (50,)
    for name in clusters:
        product = ProductCapacity("H100-80GB", 81559, 400, 400, 0, 400, full, full, 50)
        store.put_summary(
            ClusterSummary(cluster=name, health=Health.HEALTHY, heartbeat=time.time(), products=(product,))
        )
    now = time.time()
    for i in range(reservations):
        c = clusters[i % len(clusters)]
        state = store.cluster_states([c])[c]
        held = Reservation(f"job-{i}", 1, c, "H100-80GB", "nvidia.com/gpu", 1, now, now + 3600)
        if not store.reserve(held, now, state.summary.version, state.ledger).ok:
            raise SystemExit(f"reservation {i} refused")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--reservations", type=int, default=6000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    names = [f"cluster-{i:02d}" for i in range(args.clusters)]
    with private_redis() as rs:
        store = RedisStateStore(rs.url, prefix="reads" + uuid.uuid4().hex[:8])
        fill(store, names, args.reservations)
        for label in ("snapshot", "observed"):
            cpu, wall = [], []
            for _ in range(args.repeat):
                read = (
                    SnapshotPublisher(store, WallClock(), lambda: names).current
                    if label == "snapshot"
                    else ObservedFleet(store, lambda: names).current
                )
                c0, w0 = time.process_time(), time.perf_counter()
                read()
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - w0)
            print(
                f"{label:9} {args.clusters} clusters, {args.reservations} reservations: one cold read "
                f"CPU {1e3 * min(cpu):.1f}-{1e3 * max(cpu):.1f} ms, wall {1e3 * min(wall):.1f}-{1e3 * max(wall):.1f} ms"
            )
        store.close()


if __name__ == "__main__":
    main()
