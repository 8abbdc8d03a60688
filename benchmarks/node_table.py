"""Benchmark: the fleet view's per-node table (broker.capacity.node_detail) of a 1,000-node cluster, as the pollers
write it to Redis every 5 s: time to build it from NodeFacts, its JSON size, and the put_nodes/get_nodes
round trip on a local Redis.

Run: .venv/bin/python -m benchmarks.node_table [nodes] [redis_url]
"""

from __future__ import annotations

import statistics
import sys
import time

from pydantic import TypeAdapter

from adapters.redis_store import RedisStateStore
from broker.capacity.node_detail import NodeDetail, nodes_table
from broker.core.model import GpuProduct, NodeFacts, NumaZone, Taint

H100 = GpuProduct(name="H100-80GB", memory_mib=81559)


def synthetic_nodes(n: int) -> list[NodeFacts]:
    return [
        NodeFacts(
            name=f"gpu-node-{i:05d}",
            product=H100,
            gpu_count=8,
            gpus_allocatable=8,
            gpus_allocated=i % 9,
            numa_zones=(NumaZone("node-0", 4, max(0, 4 - i % 5)), NumaZone("node-1", 4, 4)),
            topology_policy="single-numa-node",
            taints=(Taint("nvidia.com/gpu", "NoSchedule", "present"),),
            unschedulable=i % 97 == 0,
        )
        for i in range(n)
    ]


def ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:.1f} ms"


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    url = sys.argv[2] if len(sys.argv) > 2 else "redis://127.0.0.1:6379/0"
    nodes = synthetic_nodes(n)
    build: list[float] = []
    for _ in range(20):
        t = time.perf_counter()
        table = nodes_table(nodes)
        build.append(time.perf_counter() - t)
    size = len(TypeAdapter(tuple[NodeDetail, ...]).dump_json(table))
    store = RedisStateStore(url, prefix="bench-nodes")
    put: list[float] = []
    get: list[float] = []
    for _ in range(20):
        t = time.perf_counter()
        store.put_nodes("bench", table, time.time())
        put.append(time.perf_counter() - t)
        t = time.perf_counter()
        store.get_nodes("bench")
        get.append(time.perf_counter() - t)
    store.client.delete("bench-nodes:nodes:bench")
    store.close()
    print(
        f"{n} nodes: build {ms(build)}, JSON {size / 1024:.0f} KiB, put {ms(put)}, get {ms(get)} (medians of 20)"
    )


if __name__ == "__main__":
    main()
