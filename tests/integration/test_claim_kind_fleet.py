"""Level 2 follows capacity, end to end: one member cluster whose A100 nodes use the device plugin and
whose H200 node is published by the NVIDIA DRA driver, declared with no `gpuAllocation`. The fleet view
says how each product is offered; an H200 job runs through an allocated ResourceClaim and an A100 job
through `nvidia.com/gpu`, read back with the real kubectl."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml

from broker.app import main as composition
from broker.config.settings import load_fleet_config
from broker.workload.manifest import job_id_label_value
from kubesim.fleet import parse_fleet
from kubesim.sim import Simulation
from tests.conftest import admin_tokens, free_port, wait_for
from tests.kubectl_cli import KUBECTL

pytestmark = pytest.mark.integration

AUTH: dict[str, str] = {}
MIXED = {
    "clusters": [
        {
            "name": "onprem-a",
            "region": "eu-west",
            "podDurationSeconds": 30,
            "nodePools": [
                {"name": "a100", "count": 1, "cpu": "64", "memory": "512Gi",
                 "gpu": {"product": "A100-80GB", "count": 8}},
                {"name": "h200", "count": 1, "cpu": "64", "memory": "512Gi",
                 "gpu": {"product": "H200-141GB", "count": 4, "allocation": "dra"}},
            ],
        }
    ]
}  # fmt: skip


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing at {KUBECTL}: `make setup` installs it; these tests do not skip")
    with Simulation(parse_fleet(MIXED, "mixed"), tmp_path_factory.mktemp("mixed"), speed=20.0) as s:
        yield s


@pytest.fixture(scope="module")
def broker_url(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("mixed-broker")
    tokens, header = admin_tokens(workdir)
    AUTH.update(header)
    doc = {  # no gpuAllocation: each product asked the way the cluster's nodes publish it
        "clusters": [{"name": "onprem-a", "kubeconfig": str(sim.kubeconfig_path("onprem-a"))}],
        "settings": {"redisUrl": redis_url, "redisPrefix": "gpufed-mixed"},
        "auth": {"tokensFile": str(tokens)},
    }
    path = workdir / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc))
    port = free_port()
    with composition.running_broker(load_fleet_config(path), port=port):
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: len(_products(url)) == 2, timeout=60, what="a summary with both products")
        yield url


def _products(url: str) -> dict[str, dict[str, Any]]:
    clusters = httpx.get(f"{url}/v1/fleet", headers=AUTH).json()["clusters"]
    return {p["product"]: p for c in clusters for p in c["products"]}


def _kubectl(sim: Simulation, home: str, *args: str) -> str:
    env = {**os.environ, "KUBECONFIG": str(sim.kubeconfig_path("onprem-a")), "HOME": home}
    out = subprocess.run(
        [str(KUBECTL), *args], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_each_product_runs_the_way_the_cluster_serves_it(
    broker_url: str, sim: Simulation, tmp_path: Any
) -> None:
    products = _products(broker_url)
    h200 = products["H200-141GB"]
    assert (h200["offered"], h200["askedThrough"], h200["free"]) == ("dra", "dra", 4)
    assert (products["A100-80GB"]["offered"], products["A100-80GB"]["free"]) == ("device-plugin", 8)
    ids = {}
    for product in ("H200-141GB", "A100-80GB"):
        spec = {
            "name": f"j-{product[:4].lower()}",
            "gpus": 2,
            "gpuProducts": [product],
            "durationSeconds": 100000,
        }
        r = httpx.post(f"{broker_url}/v1/jobs", json=spec, headers=AUTH)
        assert r.status_code == 201, r.text
        ids[product] = r.json()["id"]

    def running() -> bool:
        states = [httpx.get(f"{broker_url}/v1/jobs/{j}", headers=AUTH).json()["state"] for j in ids.values()]
        return all(s == "RUNNING" for s in states)

    wait_for(running, timeout=60, what="both jobs to run")
    home = str(tmp_path)
    claims = _kubectl(sim, home, "get", "resourceclaims", "-n", "default")
    assert claims.count("allocated,reserved") == 1, claims
    jobs = json.loads(_kubectl(sim, home, "get", "jobs", "-n", "default", "-o", "json"))["items"]
    by_id = {j["metadata"]["labels"]["gpufed.io/job-id"]: j["spec"]["template"]["spec"] for j in jobs}
    h200 = by_id[job_id_label_value(ids["H200-141GB"])]
    a100 = by_id[job_id_label_value(ids["A100-80GB"])]
    assert h200["resourceClaims"][0]["resourceClaimTemplateName"]
    assert "nvidia.com/gpu" not in h200["containers"][0]["resources"].get("limits", {})
    assert "resourceClaims" not in a100
    assert a100["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
