"""charts/gpufed: `helm lint` and `helm template` with the helm binary the project installs (tools/bin),
across the values files in tests/fixtures/helm; what an operator relies on is read back from the
rendered manifests (restricted Pod Security, probes, the config the broker parses, the Redis choice).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from broker.config.redis_settings import parse_sentinel_url
from broker.config.settings import parse_fleet_config

REPO = Path(__file__).resolve().parents[2]
HELM = REPO / "tools" / "bin" / "helm"
CHART = REPO / "charts" / "gpufed"
VALUES = REPO / "tests" / "fixtures" / "helm"
GOOD = [
    "minimal.yaml",
    "ha-external-redis.yaml",
    "no-networkpolicy.yaml",
    "sso.yaml",
    "documented.yaml",
    "redis-sentinel.yaml",
    "hub.yaml",
    "clusterprofiles.yaml",
    "operator-kit.yaml",
]


def _helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM.exists(), "tools/bin/helm is missing: run `make setup`"
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120, check=False)


def _render(values: str) -> dict[tuple[str, str], dict[str, Any]]:
    out = _helm("template", "rel", str(CHART), "--namespace", "gpufed", "-f", str(VALUES / values))
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


@pytest.mark.parametrize("values", GOOD)
def test_helm_lint_passes(values: str) -> None:
    out = _helm("lint", "--strict", str(CHART), "-f", str(VALUES / values))
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("values", GOOD)
def test_the_broker_pod_is_restricted_and_probed(values: str) -> None:
    docs = _render(values)
    deploy = docs[("Deployment", "rel-gpufed")]
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    (broker,) = pod["containers"]
    sc = broker["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert broker["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert broker["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "limits" in broker["resources"] and "requests" in broker["resources"]
    mounts = {m["mountPath"] for m in broker["volumeMounts"]}
    assert {"/tmp", "/etc/gpufed/config", "/etc/gpufed/kubeconfigs"} <= mounts  # writable /tmp for Ray
    assert ("ServiceAccount", "rel-gpufed") in docs
    assert docs[("Service", "rel-gpufed")]["spec"]["ports"][0]["targetPort"] == "http"


@pytest.mark.parametrize("values", GOOD)
def test_the_config_map_is_a_config_the_broker_accepts(values: str, tmp_path: Path) -> None:
    docs = _render(values)
    text = docs[("ConfigMap", "rel-gpufed-config")]["data"]["clusters.yaml"]
    cfg = parse_fleet_config(yaml.safe_load(text), "configmap", tmp_path)
    source = yaml.safe_load((VALUES / values).read_text())
    assert [c.name for c in cfg.clusters] == [c["name"] for c in source["clusters"]]
    assert all(str(c.kubeconfig) == f"/etc/gpufed/kubeconfigs/{c.name}.kubeconfig" for c in cfg.clusters)


def test_single_sign_on_and_audit_retention_reach_the_brokers_config(tmp_path: Path) -> None:
    text = _render("sso.yaml")[("ConfigMap", "rel-gpufed-config")]["data"]["clusters.yaml"]
    cfg = parse_fleet_config(yaml.safe_load(text), "configmap", tmp_path)
    assert cfg.auth is not None and cfg.auth.oidc is not None
    assert cfg.auth.oidc.issuer_url == "https://keycloak.example.com/realms/gpu"
    assert cfg.auth.oidc.policy().tenants_from_groups == {"ml-team": "ml", "vision-team": "vision"}
    assert (cfg.settings.audit.retention_days, cfg.settings.audit.max_records) == (90, 500000)


def test_internal_redis_by_default_with_aof_and_its_own_network_policy() -> None:
    docs = _render("minimal.yaml")
    redis = docs[("StatefulSet", "rel-gpufed-redis")]
    args = redis["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    assert redis["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert ("NetworkPolicy", "rel-gpufed-redis") in docs
    env = {
        e["name"]: e.get("value")
        for e in docs[("Deployment", "rel-gpufed")]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    # the chart's own Redis has a password, from a Secret the chart makes (random, kept across upgrades)
    assert env["REDIS_URL"] == "redis://:$(REDIS_PASSWORD)@rel-gpufed-redis:6379/0"
    password = docs[("Secret", "rel-gpufed-redis-password")]
    assert len(password["data"]["redis-password"]) >= 32
    assert "--requirepass" in args
    secret = docs[("Secret", "rel-gpufed-kubeconfigs")]
    assert set(secret["data"]) == {"onprem-a.kubeconfig"}
    assert not any(kind == "ServiceMonitor" for kind, _ in docs)


def test_ha_with_external_redis_lease_service_monitor_and_pinned_digest() -> None:
    docs = _render("ha-external-redis.yaml")
    assert not any(kind == "StatefulSet" for kind, _ in docs)
    assert not any(kind == "Secret" for kind, _ in docs)  # kubeconfigs come from an existing Secret
    deploy = docs[("Deployment", "rel-gpufed")]
    assert deploy["spec"]["replicas"] == 3
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].endswith("@sha256:" + "0123456789abcdef" * 4)
    env = {e["name"]: e for e in container["env"]}
    assert env["GPUFED_LEADER_ELECTION"]["value"] == "true" and env["GPUFED_LEASE_SECONDS"]["value"] == "15"
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "gpufed-redis"
    assert env["REDIS_URL"]["value"] == "rediss://:$(REDIS_PASSWORD)@redis.example.internal:6380/2"
    assert env["OTEL_TRACES_EXPORTER"]["value"] == "otlp"
    monitor = docs[("ServiceMonitor", "rel-gpufed")]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert docs[("PodDisruptionBudget", "rel-gpufed")]["spec"]["minAvailable"] == 2
    policy = docs[("NetworkPolicy", "rel-gpufed")]
    cidrs = [
        t["ipBlock"]["cidr"]
        for rule in policy["spec"]["egress"]
        for t in rule.get("to", [])
        if "ipBlock" in t
    ]
    assert "10.20.0.0/16" in cidrs
    sources = policy["spec"]["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}} in sources


def test_redis_sentinel_url_gets_both_passwords_from_the_secret_and_the_sentinel_port(tmp_path: Path) -> None:
    docs = _render("redis-sentinel.yaml")
    assert not any(kind == "StatefulSet" for kind, _ in docs)  # no Redis of the release's own
    container = docs[("Deployment", "rel-gpufed")]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
        "name": "gpufed-redis",
        "key": "redis-password",
    }
    assert env["REDIS_SENTINEL_PASSWORD"]["valueFrom"]["secretKeyRef"]["key"] == "sentinel-password"
    url = env["REDIS_URL"]["value"]
    assert url.startswith("redis+sentinel://:$(REDIS_PASSWORD)@sentinel-0.redis:26379,")
    assert url.endswith("/mymaster/0?sentinelPassword=$(REDIS_SENTINEL_PASSWORD)")
    # What the pod's broker reads once Kubernetes expands the variables.
    expanded = url.replace("$(REDIS_PASSWORD)", "pw").replace("$(REDIS_SENTINEL_PASSWORD)", "spw")
    target = parse_sentinel_url(expanded)
    assert (target.master_name, target.password, target.sentinel_password) == ("mymaster", "pw", "spw")
    assert len(target.sentinels) == 3
    config = yaml.safe_load(docs[("ConfigMap", "rel-gpufed-config")]["data"]["clusters.yaml"])
    settings = parse_fleet_config(config, "clusters.yaml", tmp_path).settings
    assert settings.redis_durability == "replica" and settings.redis_wait_timeout_ms == 500
    ports = {
        p["port"]
        for rule in docs[("NetworkPolicy", "rel-gpufed")]["spec"]["egress"]
        for p in rule.get("ports", [])
    }
    assert {6379, 26379} <= ports


def test_network_policy_can_be_left_out() -> None:
    docs = _render("no-networkpolicy.yaml")
    assert not any(kind == "NetworkPolicy" for kind, _ in docs)
    assert docs[("Service", "rel-gpufed")]["spec"]["type"] == "LoadBalancer"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ("bad-two-replicas-no-lease.yaml", "replicas > 1 needs leaderElection.enabled=true"),
        ("bad-schema.yaml", "allowPrivilegeEscalation"),
        ("bad-settings-typo.yaml", "additional properties 'priorityClass' not allowed"),
        ("bad-ingress-no-hosts.yaml", "ingress.hosts: name at least one host"),
        ("bad-sentinel-password-plain-url.yaml", "redis.sentinelPasswordKey: only with a redis+sentinel://"),
        # the broker refuses to start with neither tokens nor single sign-on (docs/tenancy.md)
        ("bad-no-auth.yaml", "auth: set auth.existingSecret (a Secret with tokens.yaml) or auth.oidc"),
        ("bad-oidc-no-issuer.yaml", "at '/auth/oidc': missing property 'issuerUrl'"),
    ],
)
def test_unsafe_values_are_refused_with_the_reason(values: str, message: str) -> None:
    out = _helm("template", "rel", str(CHART), "-f", str(VALUES / values))
    assert out.returncode != 0
    assert message in out.stderr


_MODELS = {
    "Deployment": "V1Deployment",
    "StatefulSet": "V1StatefulSet",
    "Service": "V1Service",
    "ConfigMap": "V1ConfigMap",
    "Secret": "V1Secret",
    "ServiceAccount": "V1ServiceAccount",
    "NetworkPolicy": "V1NetworkPolicy",
    "PodDisruptionBudget": "V1PodDisruptionBudget",
    "Ingress": "V1Ingress",
    "Pod": "V1Pod",
    "Role": "V1Role",
    "RoleBinding": "V1RoleBinding",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
}


@pytest.mark.parametrize("values", GOOD)
def test_every_rendered_object_is_a_real_kubernetes_object(values: str) -> None:
    """Each built-in object round-trips through the official client's models: a misspelt or misplaced
    field (which the client drops) or a missing required one shows as a difference."""
    api = client.ApiClient()
    for (kind, name), obj in _render(values).items():
        if kind in ("ServiceMonitor", "PrometheusRule"):
            continue  # CRDs (monitoring.coreos.com/v1): not in the client's models
        model = api.deserialize(json.dumps(obj), _MODELS[kind], "application/json")
        assert api.sanitize_for_serialization(model) == obj, (kind, name)  # type: ignore[no-untyped-call]


def test_every_documented_setting_reaches_the_broker(tmp_path: Path) -> None:
    """settings.priorityClasses, tenants, preemption, placement and burst, and a cluster's gpuAllocation,
    tenantNamespace and Kueue clusterQueue (docs/tenancy.md, placement.md, burst.md, dra.md) pass the
    chart's schema and arrive in the clusters.yaml the broker parses."""
    docs = _render("documented.yaml")
    text = docs[("ConfigMap", "rel-gpufed-config")]["data"]["clusters.yaml"]
    cfg = parse_fleet_config(yaml.safe_load(text), "configmap", tmp_path)
    s = cfg.settings
    assert s.priority_classes == {"production": 1000, "default": 0, "preemptible": -100}
    assert s.tenants["ml-research"].weight == 2 and s.tenants["vision"].quotas == {"H100-80GB": 8}
    assert s.preemption is not None and s.preemption.priority_classes == ["production"]
    assert s.placement.scores["binpack"].weight == 3 and s.placement.filters["numa-fit"].enabled is False
    assert s.burst.max_wait_seconds == 600 and s.burst.pools["cloud-burst"].max_nodes == 4
    assert s.tenant_namespace == "gpufed-{tenant}"
    clusters = {c.name: c for c in cfg.clusters}
    assert clusters["dra-lab"].gpu_allocation == "dra"
    assert clusters["onprem-b"].tenant_namespace == "{tenant}-gpu"
    assert clusters["onprem-b"].kueue is not None and clusters["onprem-b"].kueue.cluster_queue == "gpu-cq"
    assert clusters["cloud-burst"].spot is True and clusters["cloud-burst"].price_per_gpu_hour["L4"] == 0.8


def test_the_schema_for_settings_and_clusters_is_the_brokers_own() -> None:
    """values.schema.json's settings and clusters[] are derived from broker.config's models: a setting the
    broker gains is accepted by the chart once tools/chart_schema.py has been run (this fails until then)."""
    import subprocess as sp
    import sys

    out = sp.run(
        [sys.executable, str(REPO / "tools" / "chart_schema.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr


def test_ingress_terminates_tls_for_the_api_and_dashboard() -> None:
    docs = _render("documented.yaml")
    ingress = docs[("Ingress", "rel-gpufed")]["spec"]
    assert ingress["ingressClassName"] == "nginx"
    assert ingress["tls"] == [{"hosts": ["gpufed.example.com"], "secretName": "gpufed-tls"}]
    (rule,) = ingress["rules"]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert rule["host"] == "gpufed.example.com" and backend == {
        "name": "rel-gpufed",
        "port": {"name": "http"},
    }
    assert not any(kind == "Ingress" for kind, _ in _render("minimal.yaml"))  # off by default


def test_helm_test_pod_asks_the_service_for_readyz() -> None:
    docs = _render("documented.yaml")
    pod = docs[("Pod", "rel-gpufed-test")]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "registry.example.com/gpufed/gpufed:0.1.0"  # the broker's own image
    script = container["command"][-1]
    assert "http://rel-gpufed:8080" in script and "/readyz" in script
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    # with ingressFrom set, the NetworkPolicy still lets the test pod in
    sources = docs[("NetworkPolicy", "rel-gpufed")]["spec"]["ingress"][0]["from"]
    assert any(
        s.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component") == "test"
        for s in sources
    )


def test_the_default_image_is_the_one_make_image_builds() -> None:
    """No registry serves a gpufed image: the chart's default is the local tag `make image` gives the
    Containerfile's build, and the Makefile target exists."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    make = subprocess.run(
        ["make", "-n", "image"], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert make.returncode == 0, make.stderr
    assert "-f Containerfile" in make.stdout
    assert f"{values['image']['repository']}:{app_version}" in make.stdout


def test_a_ray_cluster_and_its_token_reach_every_replica() -> None:
    """ray.address becomes RAY_ADDRESS and ray.authToken the Ray token from its Secret (docs/operations.md,
    "Running on a Ray cluster"); without them the pod runs the embedded Ray, as before."""

    def env(values: str) -> dict[str, Any]:
        container = _render(values)[("Deployment", "rel-gpufed")]["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e for e in container["env"]}

    shared = env("documented.yaml")
    assert shared["RAY_ADDRESS"]["value"] == "gpufed-ray-head-svc:6379"
    assert shared["RAY_AUTH_MODE"]["value"] == "token"
    assert shared["RAY_AUTH_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": "gpufed-ray", "key": "auth_token"}
    }
    embedded = env("minimal.yaml")
    assert not {"RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN"} & set(embedded)
