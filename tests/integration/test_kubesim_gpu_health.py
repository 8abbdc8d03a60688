"""kubesim's GPU health signals over real HTTPS (docs/kubesim.md, "GPU health"): dcgm-exporter through the
API server's pod proxy (real kubectl and the Python client, RBAC), the per-cluster Prometheus API, XID
faults from the CLI, and node conditions/taints written by kubectl that the simulation keeps."""

from __future__ import annotations

import functools
import json
import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config, watch

from kubesim.fleet import builtin_fleet, load_fleet, parse_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for
from tests.kubectl_cli import KUBECTL, run_kubectl

pytestmark = pytest.mark.integration

CLUSTER = "gpus"
NODE = "gpus-h100-0"
FLEET = {
    "clusters": [
        {
            "name": CLUSTER,
            "region": "eu-west",
            "dcgmExporter": {"enabled": True, "failAfterSeconds": 2},
            "nodePools": [
                {"name": "h100", "count": 2, "machine": "DGX-H100", "gpu": {"product": "H100-80GB"}},
                {
                    "name": "a100",
                    "count": 1,
                    "gpu": {"product": "A100-80GB"},
                    "dcgmExporter": {"exclude": ["DCGM_FI_DEV_GPU_TEMP"]},
                },
            ],
        }
    ]
}
PROXY_READER = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: dcgm-scraper}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list]
- apiGroups: [""]
  resources: [pods/proxy]
  verbs: [get]
- nonResourceURLs: ["/prometheus/*"]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: scrapers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: dcgm-scraper}
subjects:
- {kind: User, name: scraper, apiGroup: rbac.authorization.k8s.io}
"""


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing at {KUBECTL}: run `make setup`; these tests do not skip")
    with Simulation(parse_fleet(FLEET), tmp_path_factory.mktemp("kubesim-gpus")) as s:
        yield s


@pytest.fixture(scope="module")
def kubectl(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Any:
    cache = tmp_path_factory.mktemp("kubectl-cache")
    return functools.partial(run_kubectl, kubeconfig=sim.kubeconfig_path(CLUSTER), cache=cache)


@pytest.fixture(scope="module")
def core(sim: Simulation) -> Any:
    kubeconfig = str(sim.kubeconfig_path(CLUSTER))
    api = config.new_client_from_config(kubeconfig, persist_config=False)  # type: ignore[no-untyped-call]
    return client.CoreV1Api(api)


def exporter_of(core: Any, node: str) -> str:
    def find() -> str | None:
        pods = core.list_namespaced_pod(
            "gpu-operator", label_selector="app=nvidia-dcgm-exporter", field_selector=f"spec.nodeName={node}"
        ).items
        return pods[0].metadata.name if pods and pods[0].status.phase == "Running" else None

    return str(wait_for(find, 30, what=f"the dcgm-exporter pod on {node} to run"))


def prom(sim: Simulation, query: str, *, method: str = "GET", token: str | None = None) -> tuple[int, Any]:
    ctx = ssl.create_default_context(cafile=str(sim.ca_path(CLUSTER)))
    url = f"{sim.prometheus_url(CLUSTER)}/api/v1/query"
    data = None
    if method == "GET":
        url += "?" + urllib.parse.urlencode({"query": query})
    else:
        data = urllib.parse.urlencode({"query": query}).encode()
    headers = {"Authorization": f"Bearer {token or sim.token(CLUSTER)}"}
    if data is not None:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def run_pod(core: Any, name: str, gpus: int, node: str = NODE) -> None:
    core.create_namespaced_pod(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "annotations": {
                    "sim.gpufed.io/duration-seconds": "36000",
                    "sim.gpufed.io/checkpoint-every-seconds": "1",
                },
            },
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [
                    {
                        "name": "main",
                        "image": "trainer:1",
                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    }
                ],
            },
        },
    )
    wait_for(
        lambda: core.read_namespaced_pod(name, "default").status.phase == "Running", 30, what=f"{name} to run"
    )


def test_the_demo_fleet_runs_dcgm_exporter_on_every_cluster() -> None:
    fleet = load_fleet(builtin_fleet("demo"))
    assert all(c.dcgm_exporter is not None and c.dcgm_exporter.enabled for c in fleet.clusters)


def test_kubectl_reads_the_exporter_through_the_pod_proxy_with_the_pod_mapping(
    sim: Simulation, core: Any, kubectl: Any
) -> None:
    run_pod(core, "mapped", 2)
    exporter = exporter_of(core, NODE)
    for port in ("9400", "metrics"):
        text = kubectl(
            "get", "--raw", f"/api/v1/namespaces/gpu-operator/pods/{exporter}:{port}/proxy/metrics"
        )
        assert "# TYPE DCGM_FI_DEV_XID_ERRORS gauge" in text
        gpu0 = next(line for line in text.splitlines() if line.startswith('DCGM_FI_DEV_XID_ERRORS{gpu="0"'))
        assert f'Hostname="{NODE}"' in gpu0 and 'modelName="NVIDIA H100 80GB HBM3"' in gpu0
        assert 'namespace="default",pod="mapped"' in gpu0 and gpu0.endswith(" 0")
    # a pool that switched a metric off: absent there, present elsewhere
    a100 = kubectl(
        "get",
        "--raw",
        f"/api/v1/namespaces/gpu-operator/pods/{exporter_of(core, 'gpus-a100-0')}:9400/proxy/metrics",
    )
    assert "DCGM_FI_DEV_GPU_TEMP" not in a100 and "DCGM_FI_DEV_GPU_TEMP" in text


def test_the_python_client_reads_it_and_the_proxy_answers_errors_as_the_real_one(
    sim: Simulation, core: Any
) -> None:
    exporter = exporter_of(core, "gpus-h100-1")
    text = core.connect_get_namespaced_pod_proxy_with_path(f"{exporter}:9400", "gpu-operator", "metrics")
    assert "DCGM_EXP_XID_ERRORS_TOTAL" not in text, "no series before the first XID"
    assert text.count("DCGM_FI_DEV_ROW_REMAP_FAILURE{") == 8
    with pytest.raises(client.ApiException) as refused:
        core.connect_get_namespaced_pod_proxy_with_path(f"{exporter}:8080", "gpu-operator", "metrics")
    assert refused.value.status == 503 and "connection refused" in str(refused.value.body)
    with pytest.raises(client.ApiException) as missing:
        core.connect_get_namespaced_pod_proxy_with_path("nope:9400", "gpu-operator", "metrics")
    assert missing.value.status == 404


def test_rbac_guards_pods_proxy_and_the_prometheus_api(sim: Simulation, core: Any, kubectl: Any) -> None:
    kubectl("apply", "-f", "-", stdin=PROXY_READER)
    sim.add_user(CLUSTER, "scraper", [])
    sim.add_user(CLUSTER, "nobody", [])
    exporter = exporter_of(core, NODE)
    path = f"/api/v1/namespaces/gpu-operator/pods/{exporter}:9400/proxy/metrics"
    ok = kubectl("get", "--raw", path, kubeconfig=sim.user_kubeconfig_path(CLUSTER, "scraper"))
    assert "DCGM_FI_DEV_XID_ERRORS" in ok
    denied = kubectl("get", "--raw", path, kubeconfig=sim.user_kubeconfig_path(CLUSTER, "nobody"), ok=(1,))
    assert 'cannot get resource "pods/proxy"' in denied
    tokens = {
        u: sim.call(lambda u=u: next(t for t, i in sim.api(CLUSTER).users.items() if i.user == u))
        for u in ("scraper", "nobody")
    }
    assert prom(sim, "DCGM_FI_DEV_XID_ERRORS", token=tokens["scraper"])[0] == 200
    assert prom(sim, "DCGM_FI_DEV_XID_ERRORS", token=tokens["nobody"])[0] == 403


def test_the_prometheus_api_answers_prometheus_json(sim: Simulation, core: Any) -> None:
    exporter_of(core, NODE)
    status, body = prom(
        sim, f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{NODE}", gpu=~"0|1"}} or DCGM_FI_DEV_GPU_TEMP{{gpu="7"}}'
    )
    assert status == 200 and body["status"] == "success" and body["data"]["resultType"] == "vector"
    result = body["data"]["result"]
    assert [(r["metric"]["__name__"], r["metric"]["gpu"]) for r in result][:2] == [
        ("DCGM_FI_DEV_XID_ERRORS", "0"),
        ("DCGM_FI_DEV_XID_ERRORS", "1"),
    ]
    first = result[0]
    assert first["metric"]["job"] == "nvidia-dcgm-exporter" and first["metric"]["instance"].endswith(":9400")
    assert isinstance(first["value"][0], float) and first["value"][1] == "0"
    assert {r["metric"]["Hostname"] for r in result[2:]} == {"gpus-h100-0", "gpus-h100-1"}, (
        "A100 pool excludes TEMP"
    )
    status, posted = prom(
        sim, '{__name__=~"DCGM_FI_DEV_ROW_REMAP_FAILURE|DCGM_FI_DEV_XID_ERRORS"}', method="POST"
    )
    assert status == 200 and len(posted["data"]["result"]) == 2 * 3 * 8
    status, bad = prom(sim, "rate(DCGM_FI_DEV_XID_ERRORS[5m])")
    assert status == 400 and bad["status"] == "error" and bad["errorType"] == "bad_data"
    assert bad["error"].startswith('invalid parameter "query": 1:5: parse error')


def test_xid_from_the_cli_quarantines_the_gpu_and_fails_the_pod_on_it(sim: Simulation, core: Any) -> None:
    run_pod(core, "victim", 8, node="gpus-h100-1")
    wait_for(
        lambda: (core.read_namespaced_pod("victim", "default").metadata.annotations or {}).get(
            "gpufed.io/checkpoint"
        ),
        30,
        what="a periodic checkpoint",
    )

    def cli(*args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "kubesim.cli", "fault", CLUSTER, *args, "--admin", sim.admin_url],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return out.stdout

    assert '"unhealthy": true' in cli("--xid", "gpus-h100-1:3:79", "--xid", "gpus-h100-1:5:13")
    node = core.read_node("gpus-h100-1")
    assert (node.status.allocatable["nvidia.com/gpu"], node.status.capacity["nvidia.com/gpu"]) == ("7", "8")
    _, body = prom(sim, 'DCGM_EXP_XID_ERRORS_TOTAL{Hostname="gpus-h100-1"}')
    assert sorted(
        (r["metric"]["gpu"], r["metric"]["xid"], r["value"][1]) for r in body["data"]["result"]
    ) == [
        ("3", "79", "1"),
        ("5", "13", "1"),
    ]
    pod = wait_for(
        lambda: (p := core.read_namespaced_pod("victim", "default")).status.phase == "Failed" and p,
        30,
        what="the pod on the dead GPU to fail",
    )
    term = pod.status.container_statuses[0].state.terminated  # type: ignore[attr-defined]
    assert (term.exit_code, term.reason) == (1, "Error") and term.message.startswith("progress=")
    cli("--xid", "gpus-h100-1:3", "--clear")
    assert core.read_node("gpus-h100-1").status.allocatable["nvidia.com/gpu"] == "8"


def test_node_conditions_and_taints_set_with_kubectl_persist_and_reach_watches(
    sim: Simulation, core: Any, kubectl: Any
) -> None:
    rv = core.read_node(NODE).metadata.resource_version
    condition = {
        "type": "GpuXidError",
        "status": "True",
        "reason": "XID79",
        "message": "GPU 3 fell off the bus",
        "lastHeartbeatTime": "2026-01-01T00:00:00Z",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    kubectl(
        "patch",
        "node",
        NODE,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"conditions": [condition]}}),
    )
    kubectl("taint", "nodes", NODE, "gpufed.io/gpu-health=xid79:NoSchedule")
    run_pod(core, "after", 1, node="gpus-h100-1")  # the controllers keep working meanwhile
    node = core.read_node(NODE)
    types = {c.type: c.status for c in node.status.conditions}
    assert types["GpuXidError"] == "True" and types["Ready"] == "True"
    assert any(t.key == "gpufed.io/gpu-health" and t.effect == "NoSchedule" for t in node.spec.taints)
    seen = []
    for event in watch.Watch().stream(
        core.list_node, field_selector=f"metadata.name={NODE}", resource_version=rv, timeout_seconds=5
    ):
        seen.append(event)
        obj = event["object"]
        if (
            event["type"] == "MODIFIED"
            and any(c.type == "GpuXidError" for c in obj.status.conditions)
            and any(t.key == "gpufed.io/gpu-health" for t in obj.spec.taints or ())
        ):
            break
    assert seen and seen[-1]["type"] == "MODIFIED", [e["type"] for e in seen]
