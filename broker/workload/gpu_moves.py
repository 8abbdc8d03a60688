"""Pure rules for jobs and broken GPUs (docs/health.md): which job a faulted GPU belongs to, what its
events say, and which nodes its next attempt keeps off.

    job_on(fault, jobs, namespace_of)   the placed job whose pod held the GPU (dcgm-exporter's pod
                                        mapping: the pod's name starts with the job's workload name)
    move_reason(fault)                  "moved off GPU 3 of node n0: XID 79 (GPU has fallen off the bus)"
    died_reason(fault)                  "pod died on GPU 3 of node n0: XID 79 (...)": the GPU's fault,
                                        not the job's (requeued with attempt + 1, never FAILED)
    with_avoided(record, fault, until)  the record with that node kept off in its cluster until `until`
    avoided_nodes(record, cluster, health, now)
                                        the nodes level 2 keeps the next attempt's pods off there: its
                                        own faulted nodes (until their time) and the cluster's quarantined
                                        nodes (node-wide faults, repeated faults)
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from broker.core.gpu_health import NODE_WIDE, ClusterGpuHealth, GpuFault, GpuState
from broker.core.model import JobRecord, JobState

__all__ = [
    "AVOID_NODE_SECONDS",
    "GPU_DEATH_SETTLE_SECONDS",
    "avoided_nodes",
    "died_reason",
    "job_on",
    "movable",
    "move_reason",
    "with_avoided",
]

# How long a job moved off a broken GPU keeps off that node (the fault usually lasts until a repair).
AVOID_NODE_SECONDS = 3600.0
# How long a job's failure waits for its cluster's GPU health to show the fault that may have caused it
# (a pod dies seconds after its GPU; a health read comes every intervalSeconds, 10 s by default).
GPU_DEATH_SETTLE_SECONDS = 20.0
_RUNS = (JobState.ADMITTED, JobState.RUNNING)


def job_on(
    fault: GpuFault, jobs: Iterable[JobRecord], namespace_of: Callable[[JobRecord], str]
) -> JobRecord | None:
    """The job (in ADMITTED or RUNNING on the fault's cluster, the caller's `jobs`) whose pod held the GPU."""
    if not fault.pod or "/" not in fault.pod:
        return None
    namespace, pod = fault.pod.split("/", 1)
    for r in jobs:
        name = r.workload_name
        if r.state in _RUNS and name and pod.startswith(f"{name}-") and namespace_of(r) == namespace:
            return r
    return None


def movable(fault: GpuFault) -> bool:
    """A fault the broker moves a job off: fatal, quarantined (not held back by the circuit breaker), a
    GPU of a node (a node-wide condition names no pod), still unhealthy."""
    return fault.quarantined and fault.state is GpuState.UNHEALTHY and fault.gpu != NODE_WIDE


def move_reason(fault: GpuFault) -> str:
    return f"moved off {fault.where}: {fault.reason}"


def died_reason(fault: GpuFault) -> str:
    return f"its pod died on {fault.where}: {fault.reason} (the GPU's fault, not the job's)"


def with_avoided(record: JobRecord, fault: GpuFault, until: float) -> JobRecord:
    cluster = record.cluster or ""
    kept = tuple(a for a in record.avoid_nodes if (a[0], a[1]) != (cluster, fault.node))
    return replace(record, avoid_nodes=(*kept, (cluster, fault.node, until)))


def avoided_nodes(record: JobRecord, cluster: str, health: ClusterGpuHealth, now: float) -> tuple[str, ...]:
    """Sorted node names the job's pods must not land on in `cluster`."""
    nodes = {n for c, n, until in record.avoid_nodes if c == cluster and until > now}
    nodes |= {q.node for q in health.nodes}
    nodes |= {f.node for f in health.faults if f.gpu == NODE_WIDE and f.quarantined}
    return tuple(sorted(nodes))
