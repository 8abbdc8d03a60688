"""Least-privilege RBAC for a member cluster: what the broker's identity there may do, and nothing more.

Owns `member_rbac(...)`, a pure function returning the manifests (plain dicts, rbac.authorization.k8s.io/v1)
that `gpufed rbac --cluster NAME` prints for an operator to apply in that member cluster:

    ServiceAccount      the broker's identity, in `service_account_namespace` (default gpufed-system),
                        with a kubernetes.io/service-account-token Secret for a long-lived kubeconfig token
    Role + RoleBinding  in the namespace the broker runs jobs in (the cluster's `namespace`):
                        batch/jobs create/delete/get/list/watch (dispatch, cancel, follow, sweep),
                        scheduling.x-k8s.io/podgroups create/delete/get (gang companions),
                        resource.k8s.io/resourceclaimtemplates create/delete/get/update (DRA claims),
                        pods get/list/watch and pods/log get (a job's pods and their logs)
    ClusterRole + ClusterRoleBinding, read-only, list/watch on what the pollers observe:
                        nodes; pods in every namespace (a node's allocated GPUs are the requests of all
                        pods bound to it, whoever runs them); noderesourcetopologies; Kueue clusterqueues and
                        localqueues; resource.k8s.io resourceslices and resourceclaims (DRA GPUs)

Every rule names its verbs and resources; there are no wildcards, no secrets, no write outside the
namespace. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["CLUSTER_RULES", "NAMESPACE_RULES", "member_rbac"]

Obj = dict[str, Any]

READ = ["list", "watch"]

NAMESPACE_RULES: tuple[Obj, ...] = (
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete", "get", "list", "watch"]},
    {"apiGroups": ["scheduling.x-k8s.io"], "resources": ["podgroups"], "verbs": ["create", "delete", "get"]},
    # DRA clusters: the Job's ResourceClaimTemplate (created first, then tied to the Job: get + update)
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaimtemplates"],
        "verbs": ["create", "delete", "get", "update"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
)

CLUSTER_RULES: tuple[Obj, ...] = (
    {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": READ},
    {"apiGroups": ["topology.node.k8s.io"], "resources": ["noderesourcetopologies"], "verbs": READ},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues", "localqueues"], "verbs": READ},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices", "resourceclaims"], "verbs": READ},
)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _check(field: str, value: str, pattern: re.Pattern[str], what: str) -> None:
    if not pattern.match(value):
        raise ValueError(f"{field}: {value!r} is not a valid {what}")


def member_rbac(
    cluster: str,
    namespace: str = "default",
    service_account: str = "gpufed-broker",
    service_account_namespace: str = "gpufed-system",
) -> list[Obj]:
    """The manifests, in apply order. Bad names raise ValueError naming the field."""
    _check("cluster", cluster, _DNS_SUBDOMAIN, "cluster name (DNS subdomain)")
    _check("namespace", namespace, _DNS_LABEL, "namespace (DNS label)")
    _check("serviceAccount", service_account, _DNS_SUBDOMAIN, "ServiceAccount name")
    _check("serviceAccountNamespace", service_account_namespace, _DNS_LABEL, "namespace (DNS label)")
    labels = {"app.kubernetes.io/name": "gpufed", "app.kubernetes.io/component": "member-rbac"}
    annotations = {"gpufed.io/member-cluster": cluster}
    role = f"{service_account}-jobs"
    cluster_role = f"{service_account}-observer"
    subject = {"kind": "ServiceAccount", "name": service_account, "namespace": service_account_namespace}

    def meta(name: str, ns: str | None = None) -> Obj:
        m: Obj = {"name": name, "labels": dict(labels), "annotations": dict(annotations)}
        if ns is not None:
            m["namespace"] = ns
        return m

    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": meta(service_account_namespace)},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": meta(service_account, service_account_namespace),
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": {
                **meta(f"{service_account}-token", service_account_namespace),
                "annotations": {**annotations, "kubernetes.io/service-account.name": service_account},
            },
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta(role, namespace),
            "rules": [dict(r) for r in NAMESPACE_RULES],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta(role, namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [dict(subject)],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": meta(cluster_role),
            "rules": [dict(r) for r in CLUSTER_RULES],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta(cluster_role),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
            "subjects": [dict(subject)],
        },
    ]
