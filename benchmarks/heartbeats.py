"""Benchmark: what an idle fleet's heartbeats cost, written in full or as heartbeats only.

Run: .venv/bin/python -m benchmarks.heartbeats [--clusters 1000] [--rounds 5]

A private redis-server holding one summary per member (benchmarks/liveness_check.member_summary, a
10-node H100 cluster). A round is what 2 s of an idle fleet does: every summary gets its heartbeat
(HEARTBEAT_SECONDS) and the placer's FleetCache refreshes 4 times (the control loop's 0.5 s passes).
Two ways of writing the heartbeat are measured on the same summaries:

    full   put_summaries: the whole summary again, its version bumped (what a shard did before
           2026-12-04), so each refresh reads every summary that moved in full
    beat   beat_summaries: the heartbeat fields only, the version unchanged, so a refresh reads none

Prints, per way and per round (median of `--rounds`): the shard's write time, the cache's refresh time
(the broker's side), the summaries the cache read in full, and Redis's network bytes.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from dataclasses import replace

from adapters.redis_process import private_redis
from adapters.redis_store import RedisStateStore
from adapters.summary_batch import beat_summaries, put_summaries
from benchmarks.liveness_check import member_summary
from broker.cache.fleet_cache import FleetCache
from broker.core.model import ClusterSummary

REFRESHES_PER_ROUND = 4  # the control loop's passes in one heartbeat interval


def network_bytes(store: RedisStateStore) -> int:
    stats = store.client.info("stats")
    return int(stats["total_net_input_bytes"]) + int(stats["total_net_output_bytes"])


def run(url: str, clusters: int, rounds: int, beat: bool) -> dict[str, float]:
    store = RedisStateStore(url, prefix="hb" + uuid.uuid4().hex[:8])
    now = time.time()
    names = [f"m{i:04d}" for i in range(clusters)]
    written: list[ClusterSummary] = put_summaries(
        store, [replace(member_summary(n, now), cluster=n) for n in names]
    )
    cache = FleetCache(store, names)
    cache.refresh()
    writes, refreshes, reads, traffic = [], [], [], []
    for r in range(1, rounds + 1):
        at = now + 2 * r
        reads0, bytes0 = cache.reads, network_bytes(store)
        started = time.perf_counter()
        if beat:
            beat_summaries(store, [(s.cluster, s.version, at, at) for s in written])
        else:
            written = put_summaries(store, [replace(s, heartbeat=at, published_at=at) for s in written])
        writes.append(time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(REFRESHES_PER_ROUND):
            cache.refresh()
        refreshes.append(time.perf_counter() - started)
        reads.append(cache.reads - reads0)
        traffic.append(network_bytes(store) - bytes0)
        assert all(s.heartbeat == at for s in cache.observed())  # the cache sees the heartbeat either way
    store.client.delete(*store.client.keys(f"{store.prefix}:*"))
    store.close()
    return {
        "write_ms": statistics.median(writes) * 1000,
        "refresh_ms": statistics.median(refreshes) * 1000,
        "reads": statistics.median(reads),
        "kib": statistics.median(traffic) / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with private_redis() as rs:
        print(
            f"set-up  {args.clusters} member summaries, private redis-server; a round = one heartbeat of "
            f"every member + {REFRESHES_PER_ROUND} cache refreshes (2 s of an idle fleet); median of "
            f"{args.rounds} rounds"
        )
        for label, beat in (("full", False), ("beat", True)):
            m = run(rs.url, args.clusters, args.rounds, beat)
            print(
                f"{label:5s}   shard writes {m['write_ms']:6.1f} ms, cache refreshes {m['refresh_ms']:6.1f} ms "
                f"({m['reads']:.0f} summaries read in full), Redis traffic {m['kib']:7.1f} KiB per round"
            )


if __name__ == "__main__":
    main()
