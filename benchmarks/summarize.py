"""Benchmark: rollup.summarize() and placement.place() over synthetic 1,000-node clusters.

Run: .venv/bin/python -m benchmarks.summarize [nodes] [clusters]
Prints the median time of summarize() for one cluster and of place() over `clusters` summaries (warm:
the per-summary indexes built by earlier decisions; cold: fresh summaries each decision), and of
explain_and_decide() (the dry run).
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import replace

from broker.capacity import kube_objects, rollup
from broker.core.model import ClusterSnapshot, ClusterTraits, Health, JobRequest, Tier
from broker.scheduler.placement import PlacementPolicy, explain_and_decide, place

LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
}


def synthetic_snapshot(cluster: str, nodes: int, busy: int = 0) -> ClusterSnapshot:
    """Node i has i % 9 GPUs used; with `busy`, at least that many (busy=5: at most 3 free anywhere)."""
    facts = []
    for i in range(nodes):
        node = {
            "metadata": {"name": f"n{i}", "labels": LABELS},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        facts.append(kube_objects.node_facts_from_requests(node, {"nvidia.com/gpu": max(busy, i % 9)}, None))
    return ClusterSnapshot(cluster=cluster, nodes=tuple(facts))


def median_ms(fn: object, repeat: int = 30) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> None:
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    clusters = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    snap = synthetic_snapshot("c0", nodes)
    traits = ClusterTraits("c0")
    ms = median_ms(lambda: rollup.summarize(snap, traits, Health.HEALTHY, 0.0))
    print(f"summarize: {nodes} nodes, median {ms:.2f} ms")
    summary = rollup.summarize(snap, traits, Health.HEALTHY, 0.0)
    summaries = [replace(summary, cluster=f"c{i}", tier=Tier.ONPREM) for i in range(clusters)]
    job = JobRequest("bench", gpus_per_pod=4, pods=2)
    policy = PlacementPolicy()
    ms = median_ms(lambda: place(job, summaries, {}, policy, 0.0), repeat=200)
    print(f"place: {clusters} clusters, median {ms:.3f} ms ({1000 / ms:,.0f} decisions/s)")
    # Cold: every decision on summaries never seen before, so no per-summary index is warm yet (the
    # worst case: each cluster's options, fit table and tightness are worked out during the decision).
    samples = []
    for _ in range(50):
        fresh = [replace(s) for s in summaries]
        start = time.perf_counter()
        place(job, fresh, {}, policy, 0.0)
        samples.append((time.perf_counter() - start) * 1000)
    ms = statistics.median(samples)
    print(f"place, cold summaries: {clusters} clusters, median {ms:.3f} ms ({1000 / ms:,.0f} decisions/s)")
    ms = median_ms(lambda: explain_and_decide(job, summaries, {}, policy, 0.0), repeat=200)
    print(f"explain_and_decide: {clusters} clusters, median {ms:.3f} ms")
    # A busier fleet: 9 clusters in 10 have no node with 4 free GPUs, so they are rejected by gpu-fit.
    full = rollup.summarize(synthetic_snapshot("c0", nodes, busy=5), traits, Health.HEALTHY, 0.0)
    mixed = [replace(summary if i % 10 == 0 else full, cluster=f"c{i}") for i in range(clusters)]
    ms = median_ms(lambda: place(job, mixed, {}, policy, 0.0), repeat=200)
    print(
        f"place, 9 in 10 clusters full: {clusters} clusters, median {ms:.3f} ms ({1000 / ms:,.0f} decisions/s)"
    )


if __name__ == "__main__":
    main()
