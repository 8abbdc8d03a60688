"""Tenant namespaces in member clusters: the config's pattern, the namespace each tenant's Job lands in,
the Namespace and LocalQueue created on first use, and the RBAC `gpufed rbac` prints for them."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from broker.config.settings import parse_fleet_config
from broker.core.errors import ConfigError
from broker.core.model import ClusterTraits, JobRequest, Placement
from broker.core.workloads import WorkloadRef
from broker.ha.recovery import StoreRecovery
from broker.tenancy import member_quota
from broker.tenancy.rbac import member_rbac
from broker.workload.manifest import build_workload

REPO = Path(__file__).resolve().parents[2]
PLACED = Placement("east", "H100-80GB", "nvidia.com/gpu", 2, 1, 80)


def fleet(settings: dict[str, Any], **cluster: Any) -> dict[str, Any]:
    return {"clusters": [{"name": "east", "kubeconfig": "x", **cluster}], "settings": settings}


@pytest.mark.parametrize(
    ("settings", "cluster", "tenant", "namespace", "creates"),
    [
        ({}, {}, "ml", "default", False),  # no pattern: today's one namespace
        ({}, {"namespace": "gpu-jobs"}, "ml", "gpu-jobs", False),
        ({"tenantNamespace": "gpufed-{tenant}"}, {}, "ml", "gpufed-ml", False),
        ({"tenantNamespace": "gpufed-{tenant}", "createNamespaces": True}, {}, "cv", "gpufed-cv", True),
        # a cluster's own pattern and flag override the fleet's
        (
            {"tenantNamespace": "gpufed-{tenant}", "createNamespaces": True},
            {"tenantNamespace": "{tenant}-gpu", "createNamespaces": False},
            "ml",
            "ml-gpu",
            False,
        ),
    ],
)
def test_each_tenant_maps_to_a_namespace_per_cluster(
    settings: dict[str, Any], cluster: dict[str, Any], tenant: str, namespace: str, creates: bool
) -> None:
    traits = parse_fleet_config(fleet(settings, **cluster), "c.yaml", REPO).traits()["east"]
    assert traits.namespace_for(tenant) == namespace
    assert traits.create_namespaces is creates


@pytest.mark.parametrize(
    ("where", "pattern", "message"),
    [
        (
            "settings",
            "gpufed",
            "settings.tenantNamespace: 'gpufed': a tenant namespace pattern holds {tenant} exactly once",
        ),
        (
            "settings",
            "Team_{tenant}",
            "settings.tenantNamespace: 'Team_{tenant}': with the tenant in place it must be a DNS label",
        ),
        (
            "cluster",
            "{tenant}-{tenant}",
            "cluster 'east' (clusters[0]): tenantNamespace: '{tenant}-{tenant}': a tenant",
        ),
    ],
)
def test_a_bad_pattern_is_refused_naming_the_field(where: str, pattern: str, message: str) -> None:
    raw = fleet({"tenantNamespace": pattern}) if where == "settings" else fleet({}, tenantNamespace=pattern)
    with pytest.raises(ConfigError) as err:
        parse_fleet_config(raw, "c.yaml", REPO)
    assert str(err.value).startswith(f"c.yaml: {message}")


def test_the_job_lands_in_the_tenants_namespace_with_no_companions_unless_the_broker_may_create_it() -> None:
    traits = ClusterTraits("east", tenant_namespace="gpufed-{tenant}")
    made = build_workload("j1", 1, JobRequest("train", tenant="ml", gpus_per_pod=2), PLACED, traits)
    assert made.job["metadata"]["namespace"] == "gpufed-ml"
    assert made.companions == ()


def test_the_namespace_and_its_local_queue_go_first_when_the_broker_may_create_them() -> None:
    traits = ClusterTraits(
        "east",
        tenant_namespace="gpufed-{tenant}",
        create_namespaces=True,
        kueue_local_queue="gpu",
        kueue_cluster_queue="gpu-cq",
    )
    made = build_workload("j1", 1, JobRequest("train", tenant="ml", gpus_per_pod=2, pods=1), PLACED, traits)
    namespace, queue = made.companions
    assert namespace == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "gpufed-ml",
            "labels": {"gpufed.io/tenant": "ml", "app.kubernetes.io/managed-by": "gpufed"},
        },
    }
    assert queue["kind"] == "LocalQueue" and queue["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert queue["metadata"]["namespace"] == "gpufed-ml" and queue["metadata"]["name"] == "gpu"
    assert queue["spec"] == {"clusterQueue": "gpu-cq"}
    assert made.job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu"


def test_the_sweep_lists_every_tenant_namespace_and_the_clusters_own() -> None:
    traits = ClusterTraits("east", namespace="gpu-jobs", tenant_namespace="gpufed-{tenant}")
    assert traits.namespaces_for(["ml", "cv", "ml"]) == ("gpu-jobs", "gpufed-cv", "gpufed-ml")
    assert ClusterTraits("east").namespaces_for(["ml"]) == ("default",)


def _allows(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


def test_rbac_grants_the_job_rules_in_each_tenant_namespace() -> None:
    docs = member_rbac("east", "default", tenant_namespaces=["gpufed-ml", "gpufed-cv"])
    roles = [(d["kind"], d["metadata"]["namespace"]) for d in docs if d["kind"] in ("Role", "RoleBinding")]
    assert roles == [(k, ns) for ns in ("default", "gpufed-ml", "gpufed-cv") for k in ("Role", "RoleBinding")]
    observer = next(d for d in docs if d["kind"] == "ClusterRole")
    for resource in ("namespaces", "resourcequotas", "limitranges"):
        assert _allows(observer["rules"], "", resource, "watch")
    assert not any(_allows(d.get("rules", []), "", "namespaces", "create") for d in docs)


def test_rbac_with_create_namespaces_grants_creating_them_and_jobs_in_any_namespace() -> None:
    docs = member_rbac("east", "default", "gpufed", create_namespaces=True)
    tenant_jobs = next(
        d for d in docs if d["metadata"]["name"] == "gpufed-tenant-jobs" and d["kind"] == "ClusterRole"
    )
    assert _allows(tenant_jobs["rules"], "", "namespaces", "create")
    assert _allows(tenant_jobs["rules"], "kueue.x-k8s.io", "localqueues", "create")
    assert _allows(tenant_jobs["rules"], "batch", "jobs", "create")
    assert not _allows(tenant_jobs["rules"], "", "namespaces", "delete")
    binding = next(
        d for d in docs if d["metadata"]["name"] == "gpufed-tenant-jobs" and d["kind"] == "ClusterRoleBinding"
    )
    assert binding["roleRef"]["name"] == "gpufed-tenant-jobs"
    with pytest.raises(ValueError, match=r"tenantNamespaces\[0\]"):
        member_rbac("east", tenant_namespaces=["Bad_NS"])


def test_the_effective_pod_of_a_namespace_without_limits_is_level_2s_container() -> None:
    job = JobRequest("j", gpus_per_pod=2)
    assert member_quota.effective_pod(job, "nvidia.com/gpu", 2, None) == member_quota.container_resources(
        job, "nvidia.com/gpu", 2
    )


def test_gpufed_rbac_prints_a_role_per_tenant_namespace_from_the_config(tmp_path: Path) -> None:
    cfg = tmp_path / "clusters.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "east", "kubeconfig": "east.kubeconfig"}],
                "settings": {"tenantNamespace": "gpufed-{tenant}", "tenants": {"ml": {}, "cv": {}}},
            }
        )
    )
    gpufed = REPO / ".venv" / "bin" / "gpufed"
    out = subprocess.run(
        [str(gpufed), "rbac", "--cluster", "east", "-c", str(cfg)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    roles = [d["metadata"]["namespace"] for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "Role"]
    assert sorted(roles) == ["default", "gpufed-cv", "gpufed-ml"]
    named = subprocess.run(
        [str(gpufed), "rbac", "--cluster", "east", "-c", str(cfg), "--tenant", "vision"],
        capture_output=True,
        check=False,
        text=True,
        timeout=60,
    )
    roles = [
        d["metadata"]["namespace"] for d in yaml.safe_load_all(named.stdout) if d and d["kind"] == "Role"
    ]
    assert roles == ["default", "gpufed-vision"]


def test_rbac_lets_the_broker_follow_its_jobs_in_every_namespace_only_with_a_pattern() -> None:
    def observer(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return next(d for d in docs if d["kind"] == "ClusterRole")["rules"]  # type: ignore[no-any-return]

    assert not _allows(observer(member_rbac("east")), "batch", "jobs", "watch")
    rules = observer(member_rbac("east", follow_all_namespaces=True))
    assert _allows(rules, "batch", "jobs", "watch") and _allows(rules, "batch", "jobs", "list")
    assert not _allows(rules, "batch", "jobs", "create")


class _ListingGateway:
    """Answers list_workloads with one Job per namespace and remembers which namespaces were listed."""

    def __init__(self) -> None:
        self.listed: list[str] = []

    def list_workloads(self, cluster: str, namespace: str) -> list[WorkloadRef]:
        self.listed.append(namespace)
        return [WorkloadRef(f"gf-{namespace}-1", namespace, f"j-{namespace}", 1)]


def test_rebuilding_job_records_lists_every_tenant_namespace() -> None:
    gateway = _ListingGateway()
    traits = ClusterTraits("east", tenant_namespace="gpufed-{tenant}")
    recovery = StoreRecovery(None, gateway, None, {"east": traits}, "gpufed", tenants=["ml", "cv"])  # type: ignore[arg-type]
    refs = recovery._list_all("east", traits)
    assert gateway.listed == ["default", "gpufed-cv", "gpufed-ml"]
    assert refs is not None and {r.namespace for r in refs} == {"default", "gpufed-cv", "gpufed-ml"}
