"""`gpufed rbac`: the member-cluster manifests are real RBAC objects, grant what the broker calls, and no more.

Checked with the real tools: kubectl reads the printed stream (offline, `label --local`), and every object
round-trips through the official Kubernetes client's models (an unknown or missing field shows as a
difference). The rules are compared with what the pollers watch (adapters.kube_informer's resources) and
what the gateway does to Jobs.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from adapters.kube_informer import ALL_RESOURCES
from broker.tenancy.rbac import member_rbac

REPO = Path(__file__).resolve().parents[2]
KUBECTL = REPO / "tools" / "bin" / "kubectl"
GPUFED = REPO / ".venv" / "bin" / "gpufed"


def _printed(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GPUFED), "rbac", *args], capture_output=True, text=True, timeout=60, check=False
    )


def _allows(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


def test_kubectl_reads_every_printed_manifest(tmp_path: Path) -> None:
    out = _printed("--cluster", "onprem-b", "--namespace", "ml-jobs")
    assert out.returncode == 0, out.stderr
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "none")}  # no cluster: kubectl works offline
    read = subprocess.run(
        [
            str(KUBECTL),
            "label",
            "--local",
            "--dry-run=client",
            "-f",
            "-",
            "gpufed.io/checked=yes",
            "-o",
            "json",
        ],
        input=out.stdout,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert read.returncode == 0, read.stderr
    items, text, decoder = [], read.stdout.strip(), json.JSONDecoder()
    while text:  # one JSON object per manifest
        obj, end = decoder.raw_decode(text)
        items.append(obj)
        text = text[end:].strip()
    kinds = [item["kind"] for item in items]
    assert kinds == [
        "Namespace",
        "ServiceAccount",
        "Secret",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
    ]
    assert items[3]["metadata"]["namespace"] == "ml-jobs"
    assert all(i["metadata"]["labels"]["gpufed.io/checked"] == "yes" for i in items)


_MODELS = {
    "Namespace": "V1Namespace",
    "ServiceAccount": "V1ServiceAccount",
    "Secret": "V1Secret",
    "Role": "V1Role",
    "RoleBinding": "V1RoleBinding",
    "ClusterRole": "V1ClusterRole",
    "ClusterRoleBinding": "V1ClusterRoleBinding",
}


def test_every_object_round_trips_through_the_official_client_models() -> None:
    api = client.ApiClient()
    for obj in member_rbac("onprem-b", "ml-jobs"):
        model = api.deserialize(json.dumps(obj), _MODELS[obj["kind"]], "application/json")
        assert api.sanitize_for_serialization(model) == obj, obj["kind"]  # type: ignore[no-untyped-call]


def test_the_rules_grant_what_the_broker_calls_and_nothing_more() -> None:
    docs = {d["kind"]: d for d in member_rbac("onprem-b", "ml-jobs", "gpufed", "gpufed-system")}
    cluster_rules = docs["ClusterRole"]["rules"]
    ns_rules = docs["Role"]["rules"]

    # the pollers list and watch every resource they observe, cluster-wide
    for res in ALL_RESOURCES:
        path = res.paths[0]
        group = "" if path.startswith("/api/") else path.split("/")[2]
        for verb in ("list", "watch"):
            assert _allows(cluster_rules, group, res.name, verb), (res.name, verb)
    for group, resource in (
        ("kueue.x-k8s.io", "localqueues"),
        ("resource.k8s.io", "resourceslices"),
        ("resource.k8s.io", "resourceclaims"),
    ):
        assert _allows(cluster_rules, group, resource, "watch")
    # cluster-wide it only reads
    assert {v for r in cluster_rules for v in r["verbs"]} == {"list", "watch"}

    # in the job namespace: Jobs in full, PodGroups for gangs, pods read and deleted (the checkpoint
    # stop, docs/migration.md) but never created or changed, their logs read
    for verb in ("create", "delete", "get", "list", "watch"):
        assert _allows(ns_rules, "batch", "jobs", verb)
    assert _allows(ns_rules, "", "pods/log", "get")
    assert _allows(ns_rules, "", "pods", "delete") and not _allows(cluster_rules, "", "pods", "delete")
    assert not any(_allows(ns_rules, "", "pods", v) for v in ("create", "update", "patch"))
    everything = cluster_rules + ns_rules
    assert not any("*" in r["verbs"] or "*" in r["resources"] or "*" in r["apiGroups"] for r in everything)
    assert not any("secrets" in r["resources"] for r in everything)

    subject = {"kind": "ServiceAccount", "name": "gpufed", "namespace": "gpufed-system"}
    assert docs["RoleBinding"]["subjects"] == [subject] == docs["ClusterRoleBinding"]["subjects"]
    assert docs["RoleBinding"]["roleRef"]["name"] == docs["Role"]["metadata"]["name"]
    assert docs["RoleBinding"]["metadata"]["namespace"] == "ml-jobs"


def test_the_namespace_comes_from_the_cluster_config(tmp_path: Path) -> None:
    cfg = tmp_path / "clusters.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {"clusters": [{"name": "gpu-east", "kubeconfig": "east.kubeconfig", "namespace": "batch-gpu"}]}
        )
    )
    out = _printed("--cluster", "gpu-east", "-c", str(cfg))
    assert out.returncode == 0, out.stderr
    role = next(d for d in yaml.safe_load_all(out.stdout) if d["kind"] == "Role")
    assert role["metadata"]["namespace"] == "batch-gpu"

    unknown = _printed("--cluster", "gpu-west", "-c", str(cfg))
    assert unknown.returncode == 2 and "--cluster: 'gpu-west' is not in" in unknown.stderr


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--cluster", "Bad_Name"), "cluster"),
        (("--cluster", "ok", "--namespace", "Not A Namespace"), "namespace"),
    ],
)
def test_bad_names_are_refused_naming_the_field(args: tuple[str, ...], field: str) -> None:
    out = _printed(*args)
    assert out.returncode == 2
    assert out.stderr.startswith(f"gpufed: error: {field}: ")  # every CLI error is one prefixed line
