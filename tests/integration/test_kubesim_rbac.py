"""Tokens bound to users, RBAC enforced for them, and access reviews, against kubesim with the real kubectl
(`auth can-i`, `auth whoami`, a Forbidden `get`) and the official Python client (a least-privilege token made
from Python, from the fleet file and from the admin endpoint). The admin token stays all-powerful."""

from __future__ import annotations

import functools
import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kubesim.fleet import parse_fleet
from kubesim.sim import Simulation
from tests.kubectl_cli import KUBECTL, run_kubectl

pytestmark = pytest.mark.integration

CLUSTER = "rbac-a"
FLEET = {
    "clusters": [
        {
            "name": CLUSTER,
            "region": "eu-west",
            "nodePools": [
                {"name": "gpu", "count": 2, "machine": "DGX-A100", "gpu": {"product": "A100-80GB"}}
            ],
            "users": [{"name": "viewer", "groups": ["readers"]}],
        }
    ]
}
RBAC = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: node-reader}
rules:
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: readers-nodes}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: node-reader}
subjects:
- {kind: Group, name: readers, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: job-runner, namespace: default}
rules:
- apiGroups: [batch]
  resources: [jobs]
  verbs: [create, get, list, watch, delete]
- apiGroups: [""]
  resources: [pods, pods/log]
  verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: broker-jobs, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: job-runner}
subjects:
- {kind: User, name: broker, apiGroup: rbac.authorization.k8s.io}
"""


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing at {KUBECTL}: run `make setup`; these tests do not skip")
    fleet = parse_fleet(FLEET)
    with Simulation(fleet, tmp_path_factory.mktemp("kubesim-rbac"), controllers=False) as s:
        yield s


@pytest.fixture(scope="module")
def kubectl(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Any:
    cache = tmp_path_factory.mktemp("kubectl-cache")
    run = functools.partial(run_kubectl, kubeconfig=sim.kubeconfig_path(CLUSTER), cache=cache)

    run("apply", "-f", "-", stdin=RBAC)
    return run


def python_client(kubeconfig: Path) -> client.ApiClient:
    cfg = client.Configuration()
    config.load_kube_config(str(kubeconfig), client_configuration=cfg, persist_config=False)  # type: ignore[no-untyped-call]
    cfg.retries = False
    return client.ApiClient(cfg)


def first_line(out: str) -> str:
    return next(line for line in out.splitlines() if line and not line.startswith("Warning:"))


def test_auth_can_i_answers_yes_and_no(sim: Simulation, kubectl: Any) -> None:
    viewer = sim.user_kubeconfig_path(CLUSTER, "viewer")  # declared in the fleet file
    assert first_line(kubectl("auth", "can-i", "list", "nodes", kubeconfig=viewer)) == "yes"
    assert first_line(kubectl("auth", "can-i", "delete", "nodes", kubeconfig=viewer, ok=(1,))) == "no"
    assert first_line(kubectl("auth", "can-i", "list", "pods", kubeconfig=viewer, ok=(1,))) == "no"
    # the admin token may do anything
    assert first_line(kubectl("auth", "can-i", "delete", "nodes")) == "yes"
    assert first_line(kubectl("auth", "can-i", "*", "*")) == "yes"
    # the admin asks for another user (impersonation: a SelfSubjectAccessReview as that user)
    assert first_line(kubectl("auth", "can-i", "create", "jobs.batch", "--as=broker")) == "yes"
    assert (
        first_line(
            kubectl("auth", "can-i", "create", "jobs.batch", "-n", "kube-system", "--as=broker", ok=(1,))
        )
        == "no"
    )
    assert first_line(kubectl("auth", "can-i", "get", "pods", "--subresource=log", "--as=broker")) == "yes"
    listed = [line.split() for line in kubectl("auth", "can-i", "--list", kubeconfig=viewer).splitlines()]
    assert ["nodes", "[]", "[]", "[get", "list", "watch]"] in listed
    assert not any(row and row[0] == "pods" for row in listed)
    whoami = kubectl("auth", "whoami", kubeconfig=viewer)
    assert "viewer" in whoami and "readers" in whoami


def test_a_bound_token_gets_the_real_403(sim: Simulation, kubectl: Any) -> None:
    viewer = sim.user_kubeconfig_path(CLUSTER, "viewer")
    assert f"{CLUSTER}-gpu-0" in kubectl("get", "nodes", kubeconfig=viewer)
    out = kubectl("get", "pods", "-n", "kube-system", kubeconfig=viewer, ok=(1,))
    assert (
        'Error from server (Forbidden): pods is forbidden: User "viewer" cannot list resource "pods" in API '
        'group "" in the namespace "kube-system"'
    ) in out
    out = kubectl("delete", "node", f"{CLUSTER}-gpu-1", kubeconfig=viewer, ok=(1,))
    assert (
        f'nodes "{CLUSTER}-gpu-1" is forbidden: User "viewer" cannot delete resource "nodes" in API group "" at '
        "the cluster scope"
    ) in out
    assert f"{CLUSTER}-gpu-1" in kubectl("get", "nodes")  # still there


def test_least_privilege_token_from_python_and_from_the_admin_endpoint(sim: Simulation) -> None:
    sim.add_user(CLUSTER, "broker", ["gpufed:brokers"])
    with python_client(sim.user_kubeconfig_path(CLUSTER, "broker")) as api:
        batch = client.BatchV1Api(api)
        assert batch.list_namespaced_job("default").items == []
        with pytest.raises(ApiException) as err:
            client.CoreV1Api(api).list_node()
        assert err.value.status == 403
        body = json.loads(str(err.value.body))
        assert body["reason"] == "Forbidden"
        assert body["message"] == (
            'nodes is forbidden: User "broker" cannot list resource "nodes" in API group "" at the cluster scope'
        )
        review = client.AuthorizationV1Api(api).create_self_subject_access_review(
            {
                "spec": {
                    "resourceAttributes": {
                        "verb": "create",
                        "group": "batch",
                        "resource": "jobs",
                        "namespace": "default",
                    }
                }
            }  # type: ignore[arg-type]
        )
        assert review.status is not None and review.status.allowed is True
        assert 'RoleBinding "broker-jobs/default" of Role "job-runner"' in (review.status.reason or "")

    # the admin endpoint binds a token too (the same as the fleet file's `users`)
    req = urllib.request.Request(
        f"{sim.admin_url}/clusters/{CLUSTER}/users",
        data=json.dumps({"name": "auditor", "groups": ["readers"]}).encode(),
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        answer = json.loads(resp.read())
    assert answer["name"] == "auditor" and len(answer["token"]) >= 16
    with python_client(Path(answer["kubeconfig"])) as api:
        assert len(client.CoreV1Api(api).list_node().items) == 2
        with pytest.raises(ApiException) as err:
            client.BatchV1Api(api).list_namespaced_job("default")
        assert err.value.status == 403

    # a SubjectAccessReview asks about anyone (the admin may create them)
    with python_client(sim.kubeconfig_path(CLUSTER)) as admin:
        sar = client.AuthorizationV1Api(admin).create_subject_access_review(
            {
                "spec": {
                    "user": "auditor",
                    "groups": ["readers"],
                    "resourceAttributes": {"verb": "watch", "resource": "nodes"},
                }
            }  # type: ignore[arg-type]
        )
        assert sar.status is not None and sar.status.allowed is True
        sar = client.AuthorizationV1Api(admin).create_subject_access_review(
            {"spec": {"user": "nobody", "resourceAttributes": {"verb": "get", "resource": "nodes"}}}  # type: ignore[arg-type]
        )
        assert sar.status is not None and sar.status.allowed is False
