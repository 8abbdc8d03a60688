"""The Kubernetes edge of the broker, in one import: clients, informers and the gateway.

connect / KubeRest       adapters.kube_rest       one ApiClient per member cluster; raw JSON requests
ClusterWatcher           adapters.cluster_watcher  list + watch nodes, pods, NRT, Kueue ClusterQueues ->
                                                  ClusterSnapshots, with the cluster's health
KubeGateway              adapters.kube_gateway    broker.core.ports.ClusterGateway: create/delete/read Jobs
WatchingGateway          adapters.job_informer    KubeGateway reading Job status from one Job informer per
                                                  cluster (label-selected on gpufed.io/job-id)
"""

from __future__ import annotations

from adapters.cluster_watcher import ClusterWatcher
from adapters.job_informer import WatchingGateway
from adapters.kube_gateway import KubeGateway, object_path, workload_status
from adapters.kube_informer import ALL_RESOURCES, Resource, WatchSettings
from adapters.kube_rest import ApiStatus, KubeRest, connect, raise_for_status

__all__ = [
    "ALL_RESOURCES",
    "ApiStatus",
    "ClusterWatcher",
    "KubeGateway",
    "KubeRest",
    "Resource",
    "WatchSettings",
    "WatchingGateway",
    "connect",
    "object_path",
    "raise_for_status",
    "workload_status",
]
