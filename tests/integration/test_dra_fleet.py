"""A mixed fleet on real parts: one DRA cluster (the NVIDIA DRA driver's ResourceSlices) and one
device-plugin cluster in kubesim over HTTPS, a private Redis, Ray pollers, the broker's HTTP API.

Jobs the broker places on the DRA cluster run with their ResourceClaims allocated (read back with the
real kubectl), the fleet view counts both kinds of GPUs while they run, and the slices kubectl shows
carry the driver's attribute names.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from broker.app import main as composition
from broker.config.settings import load_fleet_config
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import admin_tokens, free_port, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# The broker runs with auth on: the admin header of its tokens file, set by the broker fixture.
AUTH: dict[str, str] = {}
KUBECTL = REPO / "tools" / "bin" / "kubectl"
Kubectl = Callable[..., str]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "dra.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("dra-kubeconfigs"), speed=20.0) as s:
        yield s


@pytest.fixture(scope="module")
def kubectl(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing at {KUBECTL}: `make setup` installs it; these tests do not skip")
    home = tmp_path_factory.mktemp("kubectl-home")

    def run(cluster: str, *args: str) -> str:
        """kubectl's stdout; "No resources found" (which kubectl prints on stderr) comes back too."""
        env = {**os.environ, "KUBECONFIG": str(sim.kubeconfig_path(cluster)), "HOME": str(home)}
        out = subprocess.run(
            [str(KUBECTL), *args], check=False, env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        return out.stdout + (out.stderr if "No resources found" in out.stderr else "")

    return run


@pytest.fixture(scope="module")
def broker_url(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("dra-broker")
    doc = {
        "clusters": [
            {
                "name": "dra-east",
                "kubeconfig": str(sim.kubeconfig_path("dra-east")),
                "region": "us-east",
                "gpuAllocation": "dra",
            },
            {
                "name": "plugin-west",
                "kubeconfig": str(sim.kubeconfig_path("plugin-west")),
                "region": "eu-west",
            },
        ],
        "settings": {"redisUrl": redis_url, "redisPrefix": "gpufed-dra"},
    }
    tokens, header = admin_tokens(workdir)  # auth is on (docs/tenancy.md)
    doc["auth"] = {"tokensFile": str(tokens)}
    AUTH.update(header)
    path = workdir / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc))
    port = free_port()
    with composition.running_broker(load_fleet_config(path), port=port):
        url = f"http://127.0.0.1:{port}"
        # a cluster is listed from its shard's first summary ("unknown", "connecting", no products: docs/health.md),
        # so being listed is not being observed: wait for both clusters' first listed capacity
        wait_for(
            lambda: _observed(url) == {"dra-east", "plugin-west"}, timeout=60, what="both clusters observed"
        )
        yield url


def _fleet(url: str) -> dict[str, dict[str, Any]]:
    return {c["cluster"]: c for c in httpx.get(f"{url}/v1/fleet", headers=AUTH).json()["clusters"]}


def _observed(url: str) -> set[str]:
    """The clusters whose summary says healthy with their GPUs counted (their informers have listed)."""
    return {name for name, c in _fleet(url).items() if c["health"] == "healthy" and c.get("products")}


def _product(url: str, cluster: str, product: str) -> dict[str, Any] | None:
    c = _fleet(url).get(cluster) or {}
    return next((p for p in c.get("products", []) if p["product"] == product), None)


def _mig(url: str, cluster: str, product: str, profile: str) -> dict[str, Any] | None:
    c = _fleet(url).get(cluster) or {}
    return next((m for m in c.get("mig", []) if m["product"] == product and m["profile"] == profile), None)


def _submit(url: str, spec: dict[str, Any]) -> str:
    r = httpx.post(f"{url}/v1/jobs", json=spec, headers=AUTH)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _state(url: str, job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/v1/jobs/{job_id}", headers=AUTH).json()
    return body


def test_idle_fleet_counts_dra_and_device_plugin_gpus(broker_url: str) -> None:
    h100 = _product(broker_url, "dra-east", "H100-80GB")
    assert h100 is not None
    # 2 nodes x 4 whole GPUs from DRA slices; the MIG node's 2 GPUs are physical but not whole
    assert (h100["total"], h100["allocatable"], h100["free"]) == (10, 8, 8)
    h200 = _product(broker_url, "dra-east", "H200-141GB")
    assert h200 is not None and h200["free"] == 2
    # the partitionable H200s: partitions counted by shared counters (7 x 1g.18gb per GPU), not devices
    p = _mig(broker_url, "dra-east", "H200-141GB", "1g.18gb")
    assert p is not None and (p["allocatable"], p["free"], p["resource"]) == (14, 14, "mig.nvidia.com")
    a100 = _product(broker_url, "plugin-west", "A100-80GB")
    assert a100 is not None and (a100["total"], a100["free"]) == (24, 16)
    mig = _mig(broker_url, "plugin-west", "A100-80GB", "1g.10gb")
    assert mig is not None and mig["resource"] == "nvidia.com/mig-1g.10gb"


def test_jobs_on_the_dra_cluster_run_with_claims_allocated(broker_url: str, kubectl: Kubectl) -> None:
    whole = _submit(
        broker_url, {"name": "dra-whole", "gpus": 2, "gpuProducts": ["H100-80GB"], "durationSeconds": 100000}
    )
    part = _submit(
        broker_url,
        {
            "name": "dra-mig",
            "mig": {"profile": "3g.71gb"},
            "gpuProducts": ["H200-141GB"],
            "durationSeconds": 100000,
        },
    )
    plugin = _submit(
        broker_url, {"name": "dp-whole", "gpus": 4, "gpuProducts": ["A100-80GB"], "durationSeconds": 100000}
    )

    def running() -> bool:
        return all(_state(broker_url, j)["state"] == "RUNNING" for j in (whole, part, plugin))

    wait_for(running, timeout=60, what="the three jobs to run")
    assert _state(broker_url, whole)["cluster"] == "dra-east"
    assert _state(broker_url, part)["placement"]["resourceName"] == "mig.nvidia.com"
    assert _state(broker_url, plugin)["cluster"] == "plugin-west"

    # the claims, as an operator reads them with kubectl
    table = kubectl("dra-east", "get", "resourceclaims", "-n", "default")
    assert table.splitlines()[0].split() == ["NAME", "STATE", "AGE"]
    assert table.count("allocated,reserved") == 2, table
    claims = json.loads(kubectl("dra-east", "get", "resourceclaims", "-n", "default", "-o", "json"))["items"]
    results = {
        c["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"]: c["status"]["allocation"][
            "devices"
        ]["results"]
        for c in claims
    }
    assert set(results) == {"gpus"}
    devices = sorted(r["device"] for c in claims for r in c["status"]["allocation"]["devices"]["results"])
    assert len(devices) == 3  # 2 whole H100s + one 3g.71gb partition
    assert any("-mig-3g71gb-9-" in d for d in devices), devices
    templates = json.loads(
        kubectl("dra-east", "get", "resourceclaimtemplates", "-n", "default", "-o", "json")
    )
    classes = {
        t["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] for t in templates["items"]
    }
    assert classes == {"gpu.nvidia.com", "mig.nvidia.com"}
    assert all(t["metadata"]["ownerReferences"][0]["kind"] == "Job" for t in templates["items"])

    # the fleet view while they run: both kinds counted, partitions by counters
    def counted() -> bool:
        h100 = _product(broker_url, "dra-east", "H100-80GB")
        h200 = _product(broker_url, "dra-east", "H200-141GB")
        a100 = _product(broker_url, "plugin-west", "A100-80GB")
        p3 = _mig(broker_url, "dra-east", "H200-141GB", "3g.71gb")
        p7 = _mig(broker_url, "dra-east", "H200-141GB", "7g.141gb")
        return bool(
            h100 and h100["free"] == 6 and h100["allocated"] == 2
            and h200 and h200["free"] == 1  # the partitioned H200 is no longer whole
            and p3 and p3["free"] == 3
            and p7 and p7["free"] == 1
            and a100 and a100["free"] == 12
        )  # fmt: skip

    wait_for(counted, timeout=30, what="the fleet view to count the running jobs")

    # cancelling frees the devices: the claims go with the pods, the template with the Job
    for job_id in (whole, part, plugin):
        assert httpx.delete(f"{broker_url}/v1/jobs/{job_id}", headers=AUTH).status_code == 200
    wait_for(
        lambda: "No resources found" in _kubectl_all(kubectl, "resourceclaims"),
        timeout=60,
        what="the claims to be deleted",
    )
    wait_for(
        lambda: "No resources found" in _kubectl_all(kubectl, "resourceclaimtemplates"),
        timeout=60,
        what="the claim templates to be deleted",
    )
    wait_for(
        lambda: (p := _product(broker_url, "dra-east", "H100-80GB")) is not None and p["free"] == 8,
        timeout=30,
        what="the DRA GPUs to be free again",
    )


def _kubectl_all(kubectl: Kubectl, resource: str) -> str:
    return kubectl("dra-east", "get", resource, "-A")


def test_resourceslices_carry_the_drivers_attribute_names(kubectl: Kubectl) -> None:
    text = kubectl("dra-east", "get", "resourceslices", "-o", "yaml")
    doc = yaml.safe_load(text)
    devices = [d for s in doc["items"] for d in s["spec"].get("devices") or []]
    whole = next(d for d in devices if d["name"] == "gpu-0")
    for attr in (
        "type",
        "uuid",
        "productName",
        "architecture",
        "cudaComputeCapability",
        "driverVersion",
        "resource.kubernetes.io/pcieRoot",
        "resource.kubernetes.io/numaNode",
    ):
        assert attr in whole["attributes"], attr
    assert "memory" in whole["capacity"]
    migs = [d for d in devices if d["attributes"]["type"]["string"] == "mig"]
    assert migs and {"parentUUID", "profile"} <= set(migs[0]["attributes"])
    assert {
        "multiprocessors",
        "copyEngines",
        "decoders",
        "encoders",
        "jpegEngines",
        "ofaEngines",
        "memory",
    } <= set(migs[0]["capacity"])
    counters = [cs for s in doc["items"] for cs in s["spec"].get("sharedCounters") or []]
    assert counters and counters[0]["name"].endswith("-counter-set")
    assert any(d.get("consumesCounters") for d in devices)
    classes = kubectl("dra-east", "get", "deviceclasses", "-o", "name")
    assert set(classes.split()) == {
        "deviceclass.resource.k8s.io/gpu.nvidia.com",
        "deviceclass.resource.k8s.io/mig.nvidia.com",
    }
