"""ClusterProfile -> member, reconcile, published properties (broker/config/clusterprofile.py), and the KEP-5339
provider file and member kubeconfig (adapters/clusterprofile.py)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.clusterprofile import load_provider_file, member_kubeconfig
from adapters.kubeconfig_secretreader import PluginError, credential
from broker.config import clusterprofile as cp
from broker.core.errors import ConfigError
from broker.core.model import ClusterSummary, Health, MigCapacity, ProductCapacity


def profile(
    name: str = "gpu-east", providers: list[dict[str, Any]] | None = None, **meta: Any
) -> dict[str, Any]:
    """The reference's ClusterProfile example (section 9), as OCM or GKE Fleet publish it."""
    if providers is None:
        providers = [
            {
                "name": "token-provider",
                "cluster": {
                    "server": "https://10.0.0.1:6443",
                    "certificate-authority-data": "Q0EK",
                    "extensions": [
                        {"name": "client.authentication.k8s.io/exec", "extension": {"clusterName": name}}
                    ],
                },
            }
        ]
    return {
        "apiVersion": "multicluster.x-k8s.io/v1alpha1",
        "kind": "ClusterProfile",
        "metadata": {
            "name": name,
            "namespace": "fleet-system",
            "labels": {"x-k8s.io/cluster-manager": "gpufed", "multicluster.x-k8s.io/clusterset": "gpus"},
            **meta,
        },
        "spec": {"displayName": "GPU East", "clusterManager": {"name": "gpufed"}},
        "status": {
            "version": {"kubernetes": "1.35.2"},
            "properties": [
                {
                    "name": "topology.kubernetes.io/region",
                    "value": "us-east-1",
                    "lastObservedTime": "2026-11-30T10:00:00Z",
                }
            ],
            "accessProviders": providers,
        },
    }


def test_a_profile_becomes_a_member_through_a_known_access_provider() -> None:
    m = cp.member_of(profile(), ["other", "token-provider"])
    assert isinstance(m, cp.ProfileMember)
    assert (m.name, m.namespace, m.server, m.ca_data, m.provider) == (
        "gpu-east",
        "fleet-system",
        "https://10.0.0.1:6443",
        "Q0EK",
        "token-provider",
    )
    assert m.extension == {"clusterName": "gpu-east"}
    assert m.region == "us-east-1"
    assert m.labels["multicluster.x-k8s.io/clusterset"] == "gpus"


@pytest.mark.parametrize(
    ("providers", "field"),
    [
        ([], "status.accessProviders"),
        ([{"name": "token-provider", "cluster": {}}], "status.accessProviders[0].cluster.server"),
        ([{"name": "someone-else", "cluster": {"server": "https://x"}}], "status.accessProviders"),
    ],
)
def test_a_profile_without_usable_access_is_a_problem_naming_the_field(
    providers: list[dict[str, Any]], field: str
) -> None:
    got = cp.member_of(profile(providers=providers), ["token-provider"])
    assert isinstance(got, cp.ProfileProblem) and got.field == field


def test_desired_members_skip_deleting_profiles_and_report_problems() -> None:
    members, problems = cp.desired_members(
        [profile("a"), profile("b", deletionTimestamp="2026-11-30T10:00:00Z"), profile("c", providers=[])],
        ["token-provider"],
    )
    assert set(members) == {"a"}
    assert [p.name for p in problems] == ["c"]


def test_reconcile_adds_removes_and_rebuilds_changed_connections() -> None:
    a, b, c = (cp.member_of(profile(n), ["token-provider"]) for n in ("a", "b", "c"))
    assert (
        isinstance(a, cp.ProfileMember)
        and isinstance(b, cp.ProfileMember)
        and isinstance(c, cp.ProfileMember)
    )
    moved = cp.ProfileMember(**{**b.__dict__, "server": "https://10.0.0.9:6443"})
    changes = cp.reconcile({"b": moved, "c": c}, {"a": a, "b": b})
    assert changes == cp.FleetChanges(added=("c",), removed=("a",), changed=("b",))
    assert cp.reconcile({"a": a}, {"a": a}).empty


def test_label_selector() -> None:
    assert (
        cp.label_selector("gpufed", "gpus")
        == "x-k8s.io/cluster-manager=gpufed,multicluster.x-k8s.io/clusterset=gpus"
    )
    assert cp.label_selector(None, None) == ""


def summary() -> ClusterSummary:
    return ClusterSummary(
        cluster="gpu-east",
        health=Health.HEALTHY,
        products=(ProductCapacity("H100-80GB", 81559, total=16, allocatable=16, allocated=8, free=8),),
        mig=(
            MigCapacity("H100-80GB", "1g.10gb", "nvidia.com/mig-1g.10gb", 14, 10, 7),
            MigCapacity("H100-80GB", "1g.10gb", "mig.nvidia.com", 7, 7, 7),
        ),
    )


def test_capacity_properties_and_merge_keep_others() -> None:
    ours = cp.capacity_properties(summary(), "2026-12-01T01:00:00Z")
    values = {p["name"]: p["value"] for p in ours}
    assert values == {
        "gpu.gpufed.io/health": "healthy",
        "gpu.gpufed.io/H100-80GB.free": "8",
        "gpu.gpufed.io/H100-80GB.allocatable": "16",
        "gpu.gpufed.io/H100-80GB.total": "16",
        "gpu.gpufed.io/H100-80GB.mig-1g.10gb.free": "17",  # device plugin and DRA together
    }
    assert all(p["lastObservedTime"] == "2026-12-01T01:00:00Z" for p in ours)
    existing = [
        {"name": "topology.kubernetes.io/region", "value": "us-east-1"},
        {"name": "gpu.gpufed.io/H100-80GB.free", "value": "16"},
    ]
    merged = cp.merge_properties(existing, ours)
    names = [p["name"] for p in merged]
    assert names[0] == "topology.kubernetes.io/region" and names.count("gpu.gpufed.io/H100-80GB.free") == 1
    assert not cp.same_values(existing, ours) and cp.same_values(merged, ours)


def test_provider_file_and_member_kubeconfig(tmp_path: Path) -> None:
    path = tmp_path / "providers.json"
    path.write_text(
        json.dumps(
            {
                "providers": [
                    {
                        "name": "token-provider",
                        "execConfig": {
                            "apiVersion": "client.authentication.k8s.io/v1",
                            "command": "/plugins/cp-creds",
                            "args": ["--managed-serviceaccount=gpufed"],
                            "provideClusterInfo": True,
                            "interactiveMode": "Never",
                        },
                    }
                ]
            }
        )
    )
    providers = load_provider_file(path)
    m = cp.member_of(profile(), providers)
    assert isinstance(m, cp.ProfileMember)
    kc = member_kubeconfig(m, providers[m.provider])
    cluster = kc["clusters"][0]["cluster"]
    assert cluster["server"] == "https://10.0.0.1:6443"
    assert cluster["extensions"] == [
        {"name": "client.authentication.k8s.io/exec", "extension": {"clusterName": "gpu-east"}}
    ]
    user = kc["users"][0]["user"]["exec"]
    assert user["command"] == "/plugins/cp-creds" and user["provideClusterInfo"] is True
    assert set(kc["users"][0]["user"]) == {"exec"}  # no token or client key in the kubeconfig


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({}, "providers"),
        ({"providers": [{"execConfig": {"command": "x"}}]}, r"providers\[0\].name"),
        ({"providers": [{"name": "p", "execConfig": {}}]}, r"providers\[0\].execConfig.command"),
        (
            {"providers": [{"name": "p", "execConfig": {"command": "x"}}]},
            r"providers\[0\].execConfig.apiVersion",
        ),
    ],
)
def test_bad_provider_file_names_the_field(tmp_path: Path, doc: dict[str, Any], field: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match=field):
        load_provider_file(path)


def test_kubeconfig_secretreader_returns_the_contexts_credentials() -> None:
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://x"}}],
        "users": [
            {"name": "tok", "user": {"token": "abc"}},
            {
                "name": "cert",
                "user": {
                    "client-certificate-data": base64.b64encode(b"CERT PEM").decode(),
                    "client-key-data": base64.b64encode(b"KEY PEM").decode(),
                },
            },
        ],
        "contexts": [
            {"name": "a", "context": {"cluster": "c", "user": "tok"}},
            {"name": "b", "context": {"cluster": "c", "user": "cert"}},
        ],
        "current-context": "a",
    }
    text = yaml.safe_dump(kubeconfig)
    v1 = "client.authentication.k8s.io/v1"
    assert credential(text, None, v1) == {
        "apiVersion": v1,
        "kind": "ExecCredential",
        "status": {"token": "abc"},
    }
    assert credential(text, "b", v1)["status"] == {
        "clientCertificateData": "CERT PEM",
        "clientKeyData": "KEY PEM",
    }
    with pytest.raises(PluginError, match="no context named 'z'"):
        credential(text, "z", v1)


def test_config_with_profiles_only_resolves_paths_and_checks_files(tmp_path: Path) -> None:
    from broker.config.settings import load_fleet_config

    (tmp_path / "hub.kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    doc = {
        "clusterProfiles": {
            "hubKubeconfig": "hub.kubeconfig",
            "namespace": "fleet-system",
            "clusterManager": "gpufed",
            "providerFile": "providers.json",
            "gpuAllocation": "dra",
        }
    }
    path = tmp_path / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"clusterProfiles.providerFile: file not found"):
        load_fleet_config(path)
    (tmp_path / "providers.json").write_text("{}")
    cfg = load_fleet_config(path)
    assert cfg.clusters == [] and cfg.cluster_profiles is not None
    assert cfg.cluster_profiles.hub_kubeconfig == (tmp_path / "hub.kubeconfig").resolve()
    assert cfg.cluster_profiles.gpu_allocation == "dra"
    doc["clusterProfiles"]["namespace"] = "Not A Label"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=r"clusterProfiles.namespace"):
        load_fleet_config(path)
