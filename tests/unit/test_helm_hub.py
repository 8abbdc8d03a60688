"""charts/gpufed with `hub:` and `clusterProfiles:` (docs/hub.md, docs/clusterprofile.md): what the chart
renders is what the broker takes, and the RBAC it makes for an in-cluster hub is the RBAC those pages list.
The chart's general checks (lint, restricted pod, real objects, the config parsed) run over these values
files too, in tests/unit/test_helm_chart.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from broker.config.settings import parse_fleet_config
from tests.unit.test_helm_chart import REPO, _render

Docs = dict[tuple[str, str], dict[str, Any]]


def _rendered(values: str) -> list[dict[str, Any]]:
    return list(_render(values).values())


def _all_rendered(values: str) -> list[dict[str, Any]]:
    """Every object, also those sharing a kind and name in several namespaces (_render keys by name)."""
    from tests.unit.test_helm_chart import CHART, VALUES, _helm

    out = _helm("template", "rel", str(CHART), "--namespace", "gpufed", "-f", str(VALUES / values))
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _documented_rbac(page: str, kind: str) -> list[dict[str, Any]]:
    """The rules of the `kind` object in the page's yaml blocks, as the page prints them."""
    for block in re.findall(r"```yaml\n(.*?)```", (REPO / "docs" / page).read_text(), re.S):
        doc = yaml.safe_load(block)
        if isinstance(doc, dict) and doc.get("kind") == kind:
            return list(doc["rules"])
    raise AssertionError(f"no {kind} in docs/{page}")


def _config(docs: list[dict[str, Any]], tmp_path: Path) -> Any:
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "rel-gpufed-config"]
    return parse_fleet_config(yaml.safe_load(cm["data"]["clusters.yaml"]), "configmap", tmp_path), cm


def test_an_in_cluster_hub_gets_the_rbac_docs_hub_lists_in_each_watched_namespace(tmp_path: Path) -> None:
    docs = _all_rendered("hub.yaml")
    cfg, cm = _config(docs, tmp_path)
    assert cfg.hub is not None and cfg.hub.namespaces == ["team-a", "team-b"]
    assert cfg.hub.tenant_mapping == {"team-a": "vision"} and cfg.hub.reconcile_seconds == 45
    assert str(cfg.hub.kubeconfig) == "/etc/gpufed/config/hub.kubeconfig" and "hub.kubeconfig" in cm["data"]
    roles = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "Role"}
    bindings = {d["metadata"]["namespace"]: d for d in docs if d["kind"] == "RoleBinding"}
    assert set(roles) == set(bindings) == {"team-a", "team-b"}
    assert all(r["rules"] == _documented_rbac("hub.md", "ClusterRole") for r in roles.values())
    assert bindings["team-a"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "rel-gpufed", "namespace": "gpufed"}
    ]
    assert not any(d["kind"] == "ClusterRole" for d in docs)


def test_a_hub_watching_every_namespace_gets_a_cluster_role(tmp_path: Path) -> None:
    values = tmp_path / "all-namespaces.yaml"
    source = yaml.safe_load((REPO / "tests" / "fixtures" / "helm" / "hub.yaml").read_text())
    del source["hub"]["namespaces"]
    values.write_text(yaml.safe_dump(source))
    from tests.unit.test_helm_chart import CHART, _helm

    out = _helm("template", "rel", str(CHART), "--namespace", "gpufed", "-f", str(values))
    assert out.returncode == 0, out.stderr
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}
    assert docs[("ClusterRole", "rel-gpufed-hub")]["rules"] == _documented_rbac("hub.md", "ClusterRole")
    binding = docs[("ClusterRoleBinding", "rel-gpufed-hub")]
    assert binding["roleRef"]["name"] == "rel-gpufed-hub" and binding["subjects"][0]["name"] == "rel-gpufed"


def test_the_in_cluster_hub_kubeconfig_is_the_pods_own_token_and_loads(tmp_path: Path) -> None:
    """The broker reads the hub as its ServiceAccount through a projected token mounted for it alone (the
    default automount stays off); the kubeconfig the chart writes loads with the client the broker uses."""
    docs = _all_rendered("hub.yaml")
    _, cm = _config(docs, tmp_path)
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deploy["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    (volume,) = [v for v in pod["volumes"] if v["name"] == "hub-token"]
    sources = volume["projected"]["sources"]
    assert sources[0]["serviceAccountToken"]["path"] == "token"
    assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["hub-token"] == "/var/run/secrets/gpufed/hub"
    # the kubeconfig as the pod sees it, its files here
    (tmp_path / "token").write_text("the-projected-token")
    (tmp_path / "ca.crt").write_text("")
    text = cm["data"]["hub.kubeconfig"].replace("/var/run/secrets/gpufed/hub", str(tmp_path))
    (tmp_path / "hub.kubeconfig").write_text(text)
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(tmp_path / "hub.kubeconfig"), client_configuration=cfg)  # type: ignore[no-untyped-call]
    assert cfg.host == "https://kubernetes.default.svc"
    assert cfg.api_key["BearerToken"] == "Bearer the-projected-token"


def test_cluster_profiles_get_their_provider_file_and_the_rbac_docs_list(tmp_path: Path) -> None:
    docs = _all_rendered("clusterprofiles.yaml")
    cfg, cm = _config(docs, tmp_path)
    cp = cfg.cluster_profiles
    assert cfg.clusters == [] and cp is not None
    assert (cp.namespace, cp.cluster_manager, cp.clusterset, cp.member_namespace) == (
        "fleet-system",
        "gpufed",
        "gpus",
        "gpu-jobs",
    )
    assert str(cp.provider_file) == "/etc/gpufed/config/providers.json"
    providers = yaml.safe_load(cm["data"]["providers.json"])["providers"]
    assert providers[0]["name"] == "kubeconfig-secretreader"
    # the hub of `hub:` is another cluster here: its kubeconfig is the Secret's hub key
    assert cfg.hub is not None and str(cfg.hub.kubeconfig) == "/etc/gpufed/kubeconfigs/hub.kubeconfig"
    (secret,) = [
        d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "rel-gpufed-kubeconfigs"
    ]
    assert "hub.kubeconfig" in secret["data"]
    (role,) = [d for d in docs if d["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "fleet-system"
    assert role["rules"] == _documented_rbac("clusterprofile.md", "Role")
    assert not any(d["kind"] in ("ClusterRole", "ClusterRoleBinding") for d in docs)


def _documented_config(page: str, key: str) -> dict[str, Any]:
    """The `# clusters.yaml` block of docs/<page> that sets `key`, as the page prints it."""
    for block in re.findall(r"```yaml\n(.*?)```", (REPO / "docs" / page).read_text(), re.S):
        doc = yaml.safe_load(block)
        if block.startswith("# clusters.yaml") and isinstance(doc, dict) and key in doc:
            return doc
    raise AssertionError(f"no clusters.yaml block with {key} in docs/{page}")


def test_every_option_the_hub_and_clusterprofile_pages_document_passes_the_chart(tmp_path: Path) -> None:
    """The Configure blocks of docs/hub.md and docs/clusterprofile.md, given to the chart as values (the
    files they name become the chart's own), render into the same hub: and clusterProfiles: settings the
    broker reads from the blocks themselves."""
    from tests.unit.test_helm_chart import CHART, _helm

    hub_doc = _documented_config("hub.md", "hub")
    profiles_doc = _documented_config("clusterprofile.md", "clusterProfiles")
    kubeconfig = "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n"
    values = {
        "clusters": [{k: v for k, v in c.items() if k != "kubeconfig"} for c in hub_doc["clusters"]],
        "kubeconfigs": {"files": {c["name"]: kubeconfig for c in hub_doc["clusters"]} | {"hub": kubeconfig}},
        "auth": {"existingSecret": "gpufed-tokens"},
        "hub": {"enabled": True, "inCluster": False}
        | {k: v for k, v in hub_doc["hub"].items() if k != "kubeconfig"},
        "clusterProfiles": {
            "enabled": True,
            "inCluster": False,
            "providers": [{"name": "p", "execConfig": {}}],
        }
        | {
            k: v
            for k, v in profiles_doc["clusterProfiles"].items()
            if k not in ("hubKubeconfig", "providerFile")
        },
    }
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    out = _helm("template", "rel", str(CHART), "--namespace", "gpufed", "-f", str(tmp_path / "values.yaml"))
    assert out.returncode == 0, out.stderr
    cfg, _ = _config([d for d in yaml.safe_load_all(out.stdout) if d], tmp_path)
    documented = parse_fleet_config(
        {**hub_doc, **profiles_doc, "clusters": hub_doc["clusters"]}, "docs", tmp_path
    )
    assert documented.hub is not None and cfg.hub is not None
    assert documented.hub.namespaces and documented.hub.tenant_mapping  # the page sets every option
    assert cfg.hub.model_dump(exclude={"kubeconfig"}) == documented.hub.model_dump(exclude={"kubeconfig"})
    assert documented.cluster_profiles is not None and cfg.cluster_profiles is not None
    assert (
        documented.cluster_profiles.cluster_manager and documented.cluster_profiles.gpu_allocation != "auto"
    )
    paths = {"hub_kubeconfig", "provider_file"}
    assert cfg.cluster_profiles.model_dump(exclude=paths) == documented.cluster_profiles.model_dump(
        exclude=paths
    )
    assert [c.name for c in cfg.clusters] == [c.name for c in documented.clusters]
