"""Benchmark: what the poller supervisor's liveness check costs at many member clusters.

Run: .venv/bin/python -m benchmarks.liveness_check [--clusters 1000] [--shards 8] [--checks 20]

A private redis-server holding one summary per cluster, as a poller shard writes it (an H100 cluster of
10 nodes, the size of the 1,000-member benchmark's members; a real summary with MIG, queues and more
namespaces is larger). Prints the time of one ShardLiveness check (adapters.poller_liveness, run every
LIVENESS_CHECK_SECONDS by the supervisor), and of the two ways to read what it needs: every summary in
full (`observed_summaries`, what the check read before 2026-12-04) and only when each was written and
its health (`publications`). The check's CPU is the supervisor's, a Ray process beside the shards.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from adapters.poller_liveness import LIVENESS_CHECK_SECONDS, ShardLiveness
from adapters.redis_process import private_redis
from adapters.redis_store import RedisStateStore
from adapters.shard_ring import HashRing
from adapters.summary_batch import publications, put_summaries
from broker.core.model import ClusterSummary, Health, MemberNamespace, ProductCapacity


def member_summary(name: str, now: float) -> ClusterSummary:
    """An H100 cluster of 10 nodes with two GPUs in use, as a poller shard publishes it."""
    by_free = (0, 0, 0, 0, 0, 0, 1, 0, 9)
    return ClusterSummary(
        cluster=name,
        health=Health.HEALTHY,
        heartbeat=now,
        published_at=now,
        health_since=now - 60,
        products=(
            ProductCapacity(
                product="H100-80GB",
                memory_mib=81559,
                total=80,
                allocatable=80,
                allocated=2,
                free=78,
                nodes_by_free=by_free,
                numa_blocks=by_free,
                nodes=10,
                gfd_products=("NVIDIA-H100-80GB-HBM3",),
                domains_by_size=(0, 0, 0, 0, 0, 0, 0, 0, 10),
                whole_nodes_by_free=by_free,
            ),
        ),
        nodes_total=10,
        nodes_ready=10,
        namespaces=(MemberNamespace("default"),),
        namespaces_observed=True,
        workload_apis_observed=True,
    )


def timed(what: Callable[[], Any], times: int) -> tuple[float, float]:
    """(median, max) milliseconds of `times` calls."""
    took = []
    for _ in range(times):
        started = time.perf_counter()
        what()
        took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took), max(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--checks", type=int, default=20)
    args = parser.parse_args()
    with private_redis() as rs:
        store = RedisStateStore(rs.url, prefix="live" + uuid.uuid4().hex[:8])
        now = time.time()
        names = [f"m{i:04d}" for i in range(args.clusters)]
        base = member_summary("m", now)
        put_summaries(store, [replace(base, cluster=n) for n in names])
        shards = [f"shard-{i}" for i in range(args.shards)]
        groups = HashRing(shards).assign(names)
        liveness = ShardLiveness(store, shards, 5.0)
        size = len(store.client.hget(f"{store.prefix}:summary:{names[0]}", "json") or b"")
        print(
            f"set-up  {args.clusters} clusters in {args.shards} shards, one {size}-byte summary each, "
            f"private redis-server, {args.checks} calls each"
        )
        for label, call in (
            ("every summary in full (observed_summaries)", store.observed_summaries),
            ("when each was written (publications)", lambda: publications(store, names)),
            ("one liveness check (ShardLiveness.silent)", lambda: liveness.silent(groups)),
        ):
            median, worst = timed(call, args.checks)
            share = median / 1000 / LIVENESS_CHECK_SECONDS * 100
            print(
                f"{label:45s} median {median:6.1f} ms, max {worst:6.1f} ms: "
                f"{share:4.1f}% of a core at one check per {LIVENESS_CHECK_SECONDS:g} s"
            )
        store.client.config_resetstat()
        for _ in range(args.checks):
            publications(store, names)
        scripts = store.client.info("commandstats").get("cmdstat_evalsha", {})
        calls = int(scripts.get("calls", 0))
        print(
            f"redis   publications: {calls // args.checks} script calls per check, "
            f"{float(scripts.get('usec_per_call', 0)) / 1000:.2f} ms each (Redis blocks other clients "
            f"that long), {int(scripts.get('usec', 0)) / args.checks / 1000:.1f} ms of Redis per check"
        )
        store.close()


if __name__ == "__main__":
    main()
