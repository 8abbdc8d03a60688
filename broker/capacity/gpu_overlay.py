"""Unhealthy GPUs out of a node's capacity, never counted twice.

    with_gpu_health(facts, faults, quarantine) -> NodeFacts

A quarantined GPU (broker.core.gpu_health.GpuFault with `quarantined`, unhealthy or still recovering)
is not free. NVIDIA's device plugin already drops a GPU it sees fail from the node's allocatable
`nvidia.com/gpu` (allocatable = capacity - unhealthy), and a DRA driver taints the device (which
broker.capacity.dra leaves out), so only what the member has not already dropped is taken off: with
`gpu.count` physical GPUs and A allocatable, the member dropped D = gpu.count - A, and the broker takes
max(0, quarantined - D) more. The NUMA zone of each GPU taken off (index // GPUs per zone) loses one
available GPU, so the per-zone histograms agree.

A quarantined node (repeated faults, or a node-wide condition or taint from a health agent) keeps its
counts but gets the broker-side taint `gpufed.io/gpu-quarantine:NoSchedule`, which no broker workload
tolerates: the roll-up then counts nothing free on it and the fleet view says why. Nothing is written
to the member. MIG and time-sliced GPUs are left to the node quarantine (a slice names no GPU index).
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from broker.core.gpu_health import NODE_WIDE, GpuFault, GpuState, NodeQuarantine
from broker.core.model import MigStrategy, NodeFacts, NumaZone, Taint

__all__ = ["QUARANTINE_TAINT", "taken_off", "with_gpu_health"]

QUARANTINE_TAINT = "gpufed.io/gpu-quarantine"


def _out(faults: Sequence[GpuFault]) -> list[GpuFault]:
    return sorted(
        (f for f in faults if f.quarantined and f.state is not GpuState.HEALTHY and f.gpu != NODE_WIDE),
        key=lambda f: f.gpu,
    )


def taken_off(facts: NodeFacts, faults: Sequence[GpuFault]) -> int:
    """How many whole GPUs the broker takes off beyond what the member already dropped."""
    if facts.product is None or facts.mig_strategy is not MigStrategy.NONE or facts.shared_replicas > 1:
        return 0
    dropped = max(0, facts.gpu_count - facts.gpus_allocatable)
    return min(facts.gpus_allocatable, max(0, len(_out(faults)) - dropped))


def _zones(facts: NodeFacts, gpus: Sequence[int]) -> tuple[NumaZone, ...]:
    zones = list(facts.numa_zones)
    if not zones or facts.gpu_count <= 0:
        return facts.numa_zones
    per_zone = max(1, -(-facts.gpu_count // len(zones)))
    for gpu in gpus:
        i = min(len(zones) - 1, gpu // per_zone)
        z = zones[i]
        zones[i] = replace(z, gpus_available=max(0, z.gpus_available - 1))
    return tuple(zones)


def with_gpu_health(
    facts: NodeFacts, faults: Sequence[GpuFault], quarantine: NodeQuarantine | None = None
) -> NodeFacts:
    """The node as the broker counts it, given its faults and whether it is quarantined whole."""
    if facts.product is None:
        return facts
    out = facts
    extra = taken_off(facts, faults)
    if extra:
        gpus = [f.gpu for f in _out(faults)][-extra:]
        out = replace(out, gpus_allocatable=facts.gpus_allocatable - extra, numa_zones=_zones(facts, gpus))
    node_wide = any(f.gpu == NODE_WIDE and f.quarantined for f in faults)
    if (quarantine is not None or node_wide) and all(t.key != QUARANTINE_TAINT for t in out.taints):
        out = replace(out, taints=(*out.taints, Taint(QUARANTINE_TAINT, "NoSchedule", "gpu-health")))
    return out
