"""GPU health in the API's JSON (docs/health.md): a cluster's faults, quarantined nodes and circuit
breaker in /v1/fleet, and each node's unhealthy GPUs in its node detail (/v1/fleet?nodes=true)."""

from __future__ import annotations

from typing import Any

from broker.core.gpu_health import ClusterGpuHealth, GpuFault

__all__ = ["cluster_gpu_health_view", "fault_view"]


def fault_view(f: GpuFault) -> dict[str, Any]:
    """One unhealthy GPU: `gpu` is its index (null: the whole node, from a condition or taint)."""
    return {
        "node": f.node,
        "gpu": None if f.gpu < 0 else f.gpu,
        "state": str(f.state),
        "reason": f.reason,
        "xid": f.xid,
        "since": f.since,
        "source": f.source,
        "quarantined": f.quarantined,
        "pod": f.pod,
        "uuid": f.uuid,
    }


def cluster_gpu_health_view(h: ClusterGpuHealth) -> dict[str, Any]:
    return {
        "observed": h.observed,  # dcgm-exporter's metrics were read
        "unhealthyGpus": sum(1 for f in h.faults if f.gpu >= 0),
        "faults": [fault_view(f) for f in h.faults],
        "quarantinedNodes": [{"node": q.node, "reason": q.reason, "since": q.since} for q in h.nodes],
        "breakerOpen": h.breaker_open,
        "breakerReason": h.breaker_reason,
        "recentFaults": h.recent_faults,
    }
