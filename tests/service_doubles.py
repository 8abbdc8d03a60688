"""Test doubles for service-level tests: BrokerService over real Redis, with a hand-moved clock and member
clusters that are not the subject of the test.

This module owns the two stand-ins those tests share, so that a change to the broker's Clock or
ClusterGateway port (broker/core/ports.py) is made here once:

    NOW                        the epoch second the clock starts at (summaries' heartbeats use it too)
    ManualClock(now=NOW)       a Clock the test moves by hand: `clock.t += 10`
    RecordingGateway(reads=)   a ClusterGateway that records each create (`created`: cluster, namespace,
                               name, companion kinds) and delete (`deleted`: names), lists no Jobs, and
                               reads a Job back from `status` by name, else as `reads` says
    WatchedGateway(reads=)     a RecordingGateway that also says which Job changed (broker.core.ports.WorkloadWatch:
                               `change(cluster, job id, name, status)` calls the subscriber) and counts its
                               reads by Job name (`read_names`)
    suspended / pods_ready(n)  what `reads` may say: a suspended Job (the default), or one whose n pods
                               are all ready
    idle_h100_node(cluster, heartbeat)   the summary the pollers would write for one idle 8-GPU H100
                               node (also used where the gateway is the real one, over kubesim)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from broker.core.model import ClusterSummary, Health, ProductCapacity
from broker.core.workloads import WorkloadRef, WorkloadStatus

NOW = 1_800_000_000.0

# What the gateway reads back for a Job the test set no status for: (name, namespace, live) -> status,
# where live says whether the gateway created that Job and has not deleted it since.
Reads = Callable[[str, str, bool], WorkloadStatus]


class ManualClock:
    def __init__(self, now: float = NOW) -> None:
        self.t = now

    def now(self) -> float:
        return self.t


def suspended(name: str, namespace: str, live: bool) -> WorkloadStatus:
    """Every Job reads as there and suspended, created or not (nothing ever starts it)."""
    return WorkloadStatus(name=name, namespace=namespace, exists=True, suspended=True)


def pods_ready(pods: int, *, only_live: bool = False) -> Reads:
    """Every Job reads as running with all `pods` pods ready; with only_live, a Job the gateway did not
    create, or has deleted, reads as gone."""

    def reads(name: str, namespace: str, live: bool) -> WorkloadStatus:
        exists = live or not only_live
        return WorkloadStatus(name=name, namespace=namespace, exists=exists, active=pods, ready=pods)

    return reads


class Created(NamedTuple):
    cluster: str
    namespace: str
    name: str
    kinds: tuple[str, ...]  # the companions' kinds, in the order given (e.g. ("Namespace",))


class RecordingGateway:
    """Stands in for the member clusters: records what it is asked to create and delete, lists no Jobs."""

    def __init__(self, reads: Reads = suspended) -> None:
        self.created: list[Created] = []
        self.deleted: list[str] = []
        self.status: dict[str, WorkloadStatus] = {}  # by Job name: what the test says the Job is doing
        self._reads = reads
        self._live: set[str] = set()
        self._lock = threading.Lock()

    def create_workload(
        self, cluster: str, job: Mapping[str, Any], companions: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        meta = job["metadata"]
        kinds = tuple(str(c["kind"]) for c in companions)
        with self._lock:
            self.created.append(Created(cluster, meta.get("namespace", ""), meta["name"], kinds))
            self._live.add(meta["name"])

    def delete_workload(self, cluster: str, namespace: str, name: str) -> None:
        with self._lock:
            self._live.discard(name)
            self.deleted.append(name)

    def read_workload(self, cluster: str, namespace: str, name: str) -> WorkloadStatus:
        with self._lock:
            status = self.status.get(name)
            live = name in self._live
        return status if status is not None else self._reads(name, namespace, live)

    def list_workloads(self, cluster: str, namespace: str) -> list[WorkloadRef]:
        return []

    def created_names(self) -> list[str]:
        """Each created Job as cluster/name, in the order created."""
        with self._lock:
            return [f"{c.cluster}/{c.name}" for c in self.created]


class WatchedGateway(RecordingGateway):
    """A RecordingGateway whose Jobs are followed by watch: it tells its subscriber when one changed."""

    def __init__(self, reads: Reads = suspended) -> None:
        super().__init__(reads)
        self.read_names: list[str] = []
        self.watching = True  # synced(): False makes it a gateway whose caches are not synced
        self._subscribers: list[Callable[[str, str], None]] = []

    def subscribe(self, on_change: Callable[[str, str], None]) -> None:
        self._subscribers.append(on_change)

    def synced(self, cluster: str) -> bool:
        return self.watching

    def read_workload(self, cluster: str, namespace: str, name: str) -> WorkloadStatus:
        with self._lock:
            self.read_names.append(name)
        return super().read_workload(cluster, namespace, name)

    def change(self, cluster: str, job_id: str, name: str, status: WorkloadStatus) -> None:
        """The watch saw Job `name` (of broker job `job_id`) change to `status`."""
        with self._lock:
            self.status[name] = status
        for subscriber in self._subscribers:
            subscriber(cluster, job_id)


def idle_h100_node(
    cluster: str, heartbeat: float, *, shared_allocatable: int = 0, shared_free: int = 0
) -> ClusterSummary:
    """A healthy cluster of one idle 8-GPU H100 node (one NUMA block of 4 free); `shared_*`: its
    time-sliced replicas."""
    return ClusterSummary(
        cluster=cluster,
        health=Health.HEALTHY,
        heartbeat=heartbeat,
        products=(
            ProductCapacity(
                product="H100-80GB",
                memory_mib=81559,
                total=8,
                allocatable=8,
                allocated=0,
                free=8,
                nodes_by_free=(0,) * 8 + (1,),
                numa_blocks=(0,) * 4 + (1,),
                nodes=1,
                shared_allocatable=shared_allocatable,
                shared_free=shared_free,
            ),
        ),
    )
