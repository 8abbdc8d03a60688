"""Least-privilege RBAC for a member cluster: what the broker's identity there may do, and nothing more.

Owns `member_rbac(...)`, a pure function returning the manifests (plain dicts, rbac.authorization.k8s.io/v1)
that `gpufed rbac --cluster NAME` prints for an operator to apply in that member cluster:

    ServiceAccount      the broker's identity, in `service_account_namespace` (default gpufed-system),
                        with a kubernetes.io/service-account-token Secret for a long-lived kubeconfig token
    Role + RoleBinding  in the namespace the broker runs jobs in (the cluster's `namespace`):
                        batch/jobs create/delete/get/list/watch (dispatch, cancel, follow, sweep),
                        scheduling.x-k8s.io/podgroups create/delete/get (gang companions),
                        resource.k8s.io/resourceclaimtemplates create/delete/get/update (DRA claims),
                        pods get/list/watch/delete and pods/log get (a job's pods and their logs;
                        delete: the checkpoint stop, docs/migration.md), events list/watch (the Job
                        controller's FailedCreate: member trouble, docs/health.md)
    ClusterRole + ClusterRoleBinding, read-only, list/watch on what the pollers observe:
                        nodes; pods in every namespace (a node's allocated GPUs are the requests of all
                        pods bound to it, whoever runs them); noderesourcetopologies; Kueue clusterqueues and
                        localqueues; resource.k8s.io resourceslices and resourceclaims (DRA GPUs);
                        namespaces, resourcequotas and limitranges (tenant namespaces' quotas and limits);
                        with a tenant namespace pattern, batch jobs and events too (the broker's Jobs
                        and their FailedCreate events, one watch each)
    Role + RoleBinding  the same, in each existing tenant namespace (`tenant_namespaces`)
    ClusterRole + ClusterRoleBinding `<sa>-tenant-jobs`, only with `create_namespaces`: create namespaces
                        and Kueue localqueues, and the job rules in every namespace (tenant namespaces
                        the broker creates later)

Every rule names its verbs and resources; there are no wildcards, no secrets, no write outside the
job namespaces (unless createNamespaces asks for it). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["CLUSTER_RULES", "CREATE_NAMESPACE_RULES", "FOLLOW_JOBS_RULES", "NAMESPACE_RULES", "member_rbac"]

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
    # delete: a checkpoint stop deletes an attempt's pods with the job's grace period (docs/migration.md)
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete", "get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    # member trouble (docs/health.md): the Job controller's FailedCreate events of the broker's Jobs
    {"apiGroups": [""], "resources": ["events"], "verbs": READ},
)

CLUSTER_RULES: tuple[Obj, ...] = (
    {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": READ},
    {"apiGroups": ["topology.node.k8s.io"], "resources": ["noderesourcetopologies"], "verbs": READ},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues", "localqueues"], "verbs": READ},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices", "resourceclaims"], "verbs": READ},
    # tenant namespaces: which exist, their quotas and limits (the namespace-quota filter)
    {"apiGroups": [""], "resources": ["namespaces", "resourcequotas", "limitranges"], "verbs": READ},
)

# Tenant namespaces: the broker's Jobs are followed by one watch over every namespace.
FOLLOW_JOBS_RULES: tuple[Obj, ...] = (
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": READ},
    {"apiGroups": [""], "resources": ["events"], "verbs": READ},  # their FailedCreate events (member trouble)
)

# createNamespaces: the broker creates a tenant's namespace and LocalQueue on first use, and runs Jobs in
# namespaces that do not exist yet, so the job rules are granted cluster-wide (a ClusterRole bound by a
# ClusterRoleBinding) instead of a Role per namespace.
CREATE_NAMESPACE_RULES: tuple[Obj, ...] = (
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["create"]},
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
    tenant_namespaces: Sequence[str] = (),
    create_namespaces: bool = False,
    follow_all_namespaces: bool = False,
) -> list[Obj]:
    """The manifests, in apply order. Bad names raise ValueError naming the field.

    `tenant_namespaces` (existing namespaces of tenants, docs/tenancy.md) get the same Role and
    RoleBinding as `namespace`. With `create_namespaces` the job rules and the right to create
    namespaces and LocalQueues are one more ClusterRole, bound cluster-wide. With
    `follow_all_namespaces` (a tenant namespace pattern) the observer also lists and watches Jobs in
    every namespace: the broker follows its Jobs by one cluster-wide watch."""
    _check("cluster", cluster, _DNS_SUBDOMAIN, "cluster name (DNS subdomain)")
    _check("namespace", namespace, _DNS_LABEL, "namespace (DNS label)")
    _check("serviceAccount", service_account, _DNS_SUBDOMAIN, "ServiceAccount name")
    _check("serviceAccountNamespace", service_account_namespace, _DNS_LABEL, "namespace (DNS label)")
    for i, ns in enumerate(tenant_namespaces):
        _check(f"tenantNamespaces[{i}]", ns, _DNS_LABEL, "namespace (DNS label)")
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

    job_namespaces = list(dict.fromkeys([namespace, *tenant_namespaces]))
    docs: list[Obj] = [
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
        *(
            doc
            for ns in job_namespaces
            for doc in (
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role",
                    "metadata": meta(role, ns),
                    "rules": [dict(r) for r in NAMESPACE_RULES],
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": meta(role, ns),
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                    "subjects": [dict(subject)],
                },
            )
        ),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": meta(cluster_role),
            "rules": [
                dict(r) for r in (*CLUSTER_RULES, *(FOLLOW_JOBS_RULES if follow_all_namespaces else ()))
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta(cluster_role),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
            "subjects": [dict(subject)],
        },
    ]
    if create_namespaces:
        tenants_role = f"{service_account}-tenant-jobs"
        docs += [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": meta(tenants_role),
                "rules": [dict(r) for r in (*CREATE_NAMESPACE_RULES, *NAMESPACE_RULES)],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": meta(tenants_role),
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": tenants_role,
                },
                "subjects": [dict(subject)],
            },
        ]
    return docs
