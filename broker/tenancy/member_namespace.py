"""Tenant namespaces in member clusters: the objects the broker creates there on a tenant's first job.

Owns `namespace_objects(traits, tenant)`: with `create_namespaces` on the cluster, the tenant's
Namespace (labelled with its tenant and the broker as its manager) and, where the cluster runs Kueue,
the LocalQueue the broker's Jobs name (`kueue.x-k8s.io/queue-name`), pointing at the cluster's
ClusterQueue. Level 2 sends them ahead of the Job as companions; a create that finds them there (409) is
success, so "on first use" costs nothing later. Without `create_namespaces` nothing is created and a
missing namespace shows as the refused create (and, once the pollers saw the cluster's namespaces, as the
level-1 filter `tenant-namespace`). Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from broker.core.model import ClusterTraits

__all__ = ["MANAGED_BY_LABEL", "TENANT_LABEL", "namespace_objects"]

TENANT_LABEL = "gpufed.io/tenant"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
LOCAL_QUEUE_API = "kueue.x-k8s.io/v1beta2"


def namespace_objects(traits: ClusterTraits, tenant: str) -> tuple[dict[str, Any], ...]:
    """The Namespace (and LocalQueue) a tenant's job needs on this cluster, when the broker may create
    them; () when it may not."""
    if not traits.create_namespaces:
        return ()
    namespace = traits.namespace_for(tenant)
    labels = {TENANT_LABEL: tenant, MANAGED_BY_LABEL: "gpufed"}
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}
    ]
    if traits.kueue_local_queue:
        objects.append(
            {
                "apiVersion": LOCAL_QUEUE_API,
                "kind": "LocalQueue",
                "metadata": {"name": traits.kueue_local_queue, "namespace": namespace, "labels": labels},
                "spec": {"clusterQueue": traits.kueue_cluster_queue or traits.kueue_local_queue},
            }
        )
    return tuple(objects)
