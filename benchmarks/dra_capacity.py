"""Benchmark: DRA capacity (broker/dra.merge) on the NVIDIA driver's slice shapes, as kubesim renders them.

Run: .venv/bin/python -m benchmarks.dra_capacity [nodes]
Prints the median time of dra.merge() for one node of each kind, from raw slices and from slices
parsed once (dra.parse_slice, what the informer keeps) (8 whole H100s; 8 H100s with static
MIG all-balanced; 8 partitionable H200s = 208 devices and 8 counter sets, with 3 partitions in use),
and of building a `nodes`-node cluster summary from parsed partitionable nodes.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from broker.capacity import dra, kube_objects
from broker.capacity.index import CapacityIndex
from broker.core.model import ClusterTraits, Health
from kubesim.catalog import gpu_model, mig_layout
from kubesim.dra import NodeGpus, render_slices


def median_ms(fn: Callable[[], object], repeat: int = 30) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": {},
        "status": {
            "allocatable": {"cpu": "96", "memory": "1Ti", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


KINDS = {
    "whole H100 x8": NodeGpus(gpu_model("H100-80GB"), 8),
    "static MIG H100 x8": NodeGpus(
        gpu_model("H100-80GB"), 8, mig_layout=mig_layout(gpu_model("H100-80GB"), "all-balanced"), mig_gpus=8
    ),
    "partitionable H200 x8": NodeGpus(gpu_model("H200-141GB"), 8, partitionable=True),
}


def main() -> None:
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    for label, cfg in KINDS.items():
        slices = render_slices("n0", cfg)
        devices = [d["name"] for s in slices for d in s["spec"].get("devices") or []]
        used = frozenset(("gpu.nvidia.com", "n0", d) for d in devices if d.endswith("-9-4"))  # 3g partitions
        base = kube_objects.node_facts(node("n0"), [], None)
        parsed = [dra.parse_slice(s) for s in slices]
        raw: list[Any] = list(slices)
        ms = median_ms(functools.partial(dra.merge, base, raw, used))
        pms = median_ms(functools.partial(dra.merge, base, list(parsed), used))
        print(
            f"dra.merge: {label}: {len(devices)} devices, median {ms:.3f} ms from dicts, {pms:.3f} ms parsed"
        )
    cfg = KINDS["partitionable H200 x8"]
    per_node = [(f"n{i}", [dra.parse_slice(s) for s in render_slices(f"n{i}", cfg)]) for i in range(nodes)]

    def build() -> None:
        index = CapacityIndex("c0")
        for name, slices in per_node:
            index.upsert(dra.merge(kube_objects.node_facts(node(name), [], None), slices, frozenset()))
        index.summary(ClusterTraits("c0"), Health.HEALTHY, 0.0)

    ms = median_ms(build, repeat=3)
    print(f"cluster summary from DRA: {nodes} partitionable nodes, median {ms:.0f} ms")


if __name__ == "__main__":
    main()
