"""Members from ClusterProfiles on a hub, on real parts: a hub kubesim cluster serving
multicluster.x-k8s.io/v1alpha1 ClusterProfiles, two GPU member clusters, a KEP-5339 provider file whose
exec plugin hands out each member's token, Redis, Ray pollers and the broker's HTTP API.

Adding a profile makes its cluster schedulable; deleting it drains it (no new placements, the jobs
already there still followed); the capacity the broker publishes into status.properties is read back
with the real kubectl.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client, config

from broker.app import main as composition
from broker.config.settings import load_fleet_config
from kubesim.fleet import parse_fleet
from kubesim.sim import Simulation
from tests.conftest import admin_tokens, free_port, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# The broker runs with auth on: the admin header of its tokens file, set by the broker fixture.
AUTH: dict[str, str] = {}
KUBECTL = REPO / "tools" / "bin" / "kubectl"
PLUGIN = REPO / "tests" / "fixtures" / "exec_token_plugin.py"
NS = "fleet-system"
GROUP, VERSION, PLURAL = "multicluster.x-k8s.io", "v1alpha1", "clusterprofiles"

FLEET = {
    "clusters": [
        {"name": "hub", "region": "eu-west", "namespaces": [NS]},
        {
            "name": "gpu-east",
            "region": "us-east",
            "nodePools": [
                {"name": "h100", "count": 2, "cpu": "64", "memory": "512Gi", "gpu": {"product": "H100-80GB"}}
            ],
        },
        {
            "name": "gpu-west",
            "region": "eu-west",
            "nodePools": [
                {"name": "a100", "count": 1, "cpu": "64", "memory": "512Gi", "gpu": {"product": "A100-80GB"}}
            ],
        },
    ]
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    with Simulation(parse_fleet(FLEET), tmp_path_factory.mktemp("cp-kubeconfigs"), speed=20.0) as s:
        yield s


@pytest.fixture(scope="module")
def hub(sim: Simulation) -> client.CustomObjectsApi:
    api = config.new_client_from_config(str(sim.kubeconfig_path("hub")), persist_config=False)  # type: ignore[no-untyped-call]
    return client.CustomObjectsApi(api)


@pytest.fixture(scope="module")
def broker_url(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("cp-broker")
    tokens = workdir / "tokens.json"
    tokens.write_text(json.dumps({"gpu-east": sim.token("gpu-east")}))
    providers = {
        "providers": [
            {
                "name": "kubesim-token",
                "execConfig": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": sys.executable,
                    "args": [str(PLUGIN)],
                    "env": [{"name": "GPUFED_TEST_TOKENS", "value": str(tokens)}],
                    "provideClusterInfo": True,
                    "interactiveMode": "Never",
                },
            }
        ]
    }
    providers["providers"].append(
        {
            # a kubeconfig kept in a hub Secret, read by gpufed's kubeconfig-secretreader plugin
            "name": "kubeconfig-secretreader",
            "execConfig": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": sys.executable,
                "args": ["-m", "adapters.kubeconfig_secretreader"],
                "env": [{"name": "KUBECONFIG", "value": str(sim.kubeconfig_path("hub"))}],
                "provideClusterInfo": True,
            },
        }
    )
    (workdir / "providers.json").write_text(json.dumps(providers))
    doc = {
        "clusterProfiles": {
            "hubKubeconfig": str(sim.kubeconfig_path("hub")),
            "namespace": NS,
            "clusterManager": "gpufed",
            "providerFile": "providers.json",
            "pollSeconds": 0.5,
            "publishSeconds": 1,
        },
        "settings": {"redisUrl": redis_url, "redisPrefix": "gpufed-cp"},
    }
    tokens, header = admin_tokens(workdir)  # auth is on (docs/tenancy.md)
    doc["auth"] = {"tokensFile": str(tokens)}
    AUTH.update(header)
    path = workdir / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc))
    port = free_port()
    with composition.running_broker(load_fleet_config(path), port=port):
        yield f"http://127.0.0.1:{port}"


def _profile(
    sim: Simulation, name: str, manager: str, target: str | None = None, secret: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ClusterProfile as a cluster manager writes it: the object, then its status. The access provider
    is the token exec plugin, or with `secret` the kubeconfig-secretreader (a Secret on the hub)."""
    target = target or name
    extension: dict[str, Any] = {"clusterName": target}
    provider = "kubesim-token"
    if secret is not None:
        extension = {"name": secret, "key": "value", "namespace": NS}
        provider = "kubeconfig-secretreader"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterProfile",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {"x-k8s.io/cluster-manager": manager, "multicluster.x-k8s.io/clusterset": "gpus"},
        },
        "spec": {"displayName": name.upper(), "clusterManager": {"name": manager}},
    }
    status = {
        "status": {
            "version": {"kubernetes": "1.37.0"},
            "properties": [
                {
                    "name": "topology.kubernetes.io/region",
                    "value": "us-east",
                    "lastObservedTime": "2026-11-30T10:00:00Z",
                }
            ],
            "accessProviders": [
                {
                    "name": provider,
                    "cluster": {
                        "server": sim.server_url(target),
                        "certificate-authority-data": base64.b64encode(
                            sim.ca_path(target).read_bytes()
                        ).decode(),
                        "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": extension}],
                    },
                }
            ],
        }
    }
    return body, status


def _add_profile(
    hub: client.CustomObjectsApi,
    sim: Simulation,
    name: str,
    manager: str = "gpufed",
    target: str | None = None,
    secret: str | None = None,
) -> None:
    body, status = _profile(sim, name, manager, target, secret)
    hub.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    hub.patch_namespaced_custom_object_status(GROUP, VERSION, NS, PLURAL, name, status)


def _fleet(url: str) -> dict[str, dict[str, Any]]:
    return {c["cluster"]: c for c in httpx.get(f"{url}/v1/fleet", headers=AUTH).json()["clusters"]}


def _job(url: str, job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/v1/jobs/{job_id}", headers=AUTH).json()
    return body


def _kubectl(sim: Simulation, home: Path, *args: str) -> str:
    env = {**os.environ, "KUBECONFIG": str(sim.kubeconfig_path("hub")), "HOME": str(home)}
    out = subprocess.run(
        [str(KUBECTL), *args], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_profiles_join_publish_and_drain(
    sim: Simulation, hub: client.CustomObjectsApi, broker_url: str, tmp_path: Path
) -> None:
    # nothing on the hub yet: an H100 job can go nowhere
    job_id = httpx.post(
        f"{broker_url}/v1/jobs",
        json={"name": "cp-h100", "gpus": 8, "gpuProducts": ["H100-80GB"], "durationSeconds": 100000},
        headers=AUTH,
    ).json()["id"]
    assert _fleet(broker_url) == {}
    assert _job(broker_url, job_id)["state"] == "QUEUED"

    # another manager's profile is not ours; ours joins the fleet and takes the job
    _add_profile(hub, sim, "foreign", manager="ocm", target="gpu-west")
    _add_profile(hub, sim, "gpu-east")
    wait_for(lambda: "gpu-east" in _fleet(broker_url), timeout=30, what="gpu-east to join the fleet")
    running = wait_for(
        lambda: (j := _job(broker_url, job_id))["state"] == "RUNNING" and j, timeout=60, what="the job to run"
    )
    assert isinstance(running, dict) and running["cluster"] == "gpu-east"
    assert set(_fleet(broker_url)) == {"gpu-east"}
    assert _fleet(broker_url)["gpu-east"]["region"] == "us-east"  # from the profile's properties

    # what the broker publishes, read back with kubectl
    def published() -> dict[str, str]:
        text = _kubectl(sim, tmp_path, "get", "clusterprofile", "gpu-east", "-n", NS, "-o", "json")
        return {p["name"]: p["value"] for p in json.loads(text)["status"].get("properties") or []}

    props = wait_for(
        lambda: (p := published()).get("gpu.gpufed.io/H100-80GB.free") == "8" and p,
        timeout=30,
        what="the free H100s (16 - 8 running) in status.properties",
    )
    assert isinstance(props, dict)
    assert props["gpu.gpufed.io/H100-80GB.total"] == "16"
    assert props["gpu.gpufed.io/health"] == "healthy"
    assert props["topology.kubernetes.io/region"] == "us-east"  # the manager's property is kept
    foreign = json.loads(_kubectl(sim, tmp_path, "get", "clusterprofile", "foreign", "-n", NS, "-o", "json"))
    assert not any(p["name"].startswith("gpu.gpufed.io/") for p in foreign["status"]["properties"])

    # deleting the profile drains the cluster: no new placements, the running job still followed
    hub.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "gpu-east")
    wait_for(lambda: "gpu-east" not in _fleet(broker_url), timeout=30, what="gpu-east to leave the fleet")
    second = httpx.post(
        f"{broker_url}/v1/jobs",
        json={"name": "cp-after", "gpus": 1, "gpuProducts": ["H100-80GB"]},
        headers=AUTH,
    ).json()["id"]
    queued = wait_for(
        lambda: "clusters are available" in (j := _job(broker_url, second))["reason"] and j,
        timeout=30,
        what="a diagnosis for the job after the drain",
    )
    assert isinstance(queued, dict) and queued["state"] == "QUEUED"
    assert _job(broker_url, job_id)["state"] == "RUNNING"
    assert httpx.delete(f"{broker_url}/v1/jobs/{job_id}", headers=AUTH).status_code == 200
    east = config.new_client_from_config(  # type: ignore[no-untyped-call]
        str(sim.kubeconfig_path("gpu-east")), persist_config=False
    )
    batch = client.BatchV1Api(east)
    wait_for(
        lambda: not batch.list_namespaced_job("default", label_selector=f"gpufed.io/job-id={job_id}").items,
        timeout=30,
        what="the drained cluster's Job to be deleted on cancel",
    )

    # and it can come back; gpu-west joins with its kubeconfig in a hub Secret (kubeconfig-secretreader)
    core = client.CoreV1Api(hub.api_client)
    core.create_namespaced_secret(
        NS,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="gpu-west-kubeconfig", namespace=NS),
            string_data={"value": sim.kubeconfig_path("gpu-west").read_text()},
        ),
    )
    _add_profile(hub, sim, "gpu-west", secret="gpu-west-kubeconfig")
    wait_for(lambda: "gpu-west" in _fleet(broker_url), timeout=30, what="gpu-west to join through the Secret")
    a100 = httpx.post(
        f"{broker_url}/v1/jobs",
        json={"name": "cp-a100", "gpus": 2, "gpuProducts": ["A100-80GB"], "durationSeconds": 30},
        headers=AUTH,
    ).json()["id"]
    done = wait_for(
        lambda: (j := _job(broker_url, a100))["state"] == "SUCCEEDED" and j, timeout=60, what="the A100 job"
    )
    assert isinstance(done, dict) and done["cluster"] == "gpu-west"
    _add_profile(hub, sim, "gpu-east")
    placed = wait_for(
        lambda: (j := _job(broker_url, second))["state"] != "QUEUED" and j, timeout=60, what="re-join"
    )
    assert isinstance(placed, dict) and placed["cluster"] == "gpu-east"
