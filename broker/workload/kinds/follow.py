"""Following a workload kind in its member: read the object through the gateway, judge it with the
kind's status function (the WorkloadStatus lifecycle.observe takes).

    KindObjects   the gateway's optional reader of any object (adapters.kube_gateway.KubeGateway has it)
    KindWatch     a gateway that follows the kinds' objects by watch (adapters.job_informer.
                  WatchingGateway): a change of one is told as a Job's is (WorkloadWatch.subscribe)
    unwatched(records, dirty, watched)  the placed jobs of a workload kind not already to be read whose
                  cluster's kinds no watch follows: status sync reads each of them every pass
    read_status(gateway, cluster, namespace, name, request)
                  the WorkloadStatus of a job's member object: the kind's semantics for a workload kind,
                  the gateway's Job reading otherwise (and for a gateway that cannot read objects)
Pure: the gateway is a port.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from broker.core.model import JobRecord, JobRequest
from broker.core.ports import ClusterGateway
from broker.core.workloads import WorkloadStatus
from broker.workload.kinds.registry import by_api

__all__ = ["KindObjects", "KindWatch", "kinds_watched", "read_status", "unwatched"]


@runtime_checkable
class KindObjects(Protocol):
    def read_object(
        self, cluster: str, api_version: str, kind: str, namespace: str, name: str
    ) -> Mapping[str, Any] | None:
        """The object, or None when the member has none (404)."""
        ...


@runtime_checkable
class KindWatch(Protocol):
    def kinds_synced(self, cluster: str) -> bool:
        """Whether every kind's objects of the cluster are followed by watch (changes are told)."""
        ...


def kinds_watched(gateway: ClusterGateway) -> Callable[[str], bool]:
    """cluster -> whether its kinds' changes are told (never, for a gateway that does not watch them)."""
    if isinstance(gateway, KindWatch):
        return gateway.kinds_synced
    return lambda _cluster: False


def read_status(
    gateway: ClusterGateway, cluster: str, namespace: str, name: str, request: JobRequest
) -> WorkloadStatus:
    wl = request.workload
    adapter = by_api(wl.get("apiVersion"), wl.get("kind")) if wl is not None else None
    if adapter is None or not isinstance(gateway, KindObjects):
        return gateway.read_workload(cluster, namespace, name)
    obj = gateway.read_object(cluster, adapter.api_version, adapter.kind, namespace, name)
    if obj is None:
        return WorkloadStatus(name=name, namespace=namespace, exists=False)
    return adapter.status(obj, name, namespace, request.pods)


def unwatched(
    records: Iterable[JobRecord], dirty: Collection[str], watched: Callable[[str], bool]
) -> list[JobRecord]:
    return [
        r
        for r in records
        if r.request.workload is not None and r.id not in dirty and not watched(r.cluster or "")
    ]
