"""One product served both ways, end to end (issue 47): a member with one node of 8 H100 through the
device plugin and one of 4 H100 published as `gpu.nvidia.com` ResourceSlices. `/v1/fleet` counts 12
and says what each kind offers; an 8-GPU and a 4-GPU job submitted together both run there, the first
through `nvidia.com/gpu`, the second through an allocated ResourceClaim, read back with kubectl."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
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
FLEET = yaml.safe_load(
    (Path(__file__).parents[2] / "kubesim" / "fleets" / "h100-both-kinds.yaml").read_text()
)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing at {KUBECTL}: `make setup` installs it; these tests do not skip")
    with Simulation(parse_fleet(FLEET, "both-kinds"), tmp_path_factory.mktemp("both"), speed=20.0) as s:
        yield s


@pytest.fixture(scope="module")
def broker_url(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("both-broker")
    tokens, header = admin_tokens(workdir)
    AUTH.update(header)
    doc = {  # no gpuAllocation: each job asks the kind it fits
        "clusters": [{"name": "onprem-mixed", "kubeconfig": str(sim.kubeconfig_path("onprem-mixed"))}],
        "settings": {"redisUrl": redis_url, "redisPrefix": "gpufed-both-kinds"},
        "auth": {"tokensFile": str(tokens)},
    }
    path = workdir / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc))
    port = free_port()
    with composition.running_broker(load_fleet_config(path), port=port):
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _h100(url).get("allocatable") == 12, timeout=60, what="both kinds' H100 counted")
        yield url


def _h100(url: str) -> dict[str, Any]:
    clusters = httpx.get(f"{url}/v1/fleet", headers=AUTH).json()["clusters"]
    return next((p for c in clusters for p in c["products"] if p["product"] == "H100-80GB"), {})


def _kubectl(sim: Simulation, home: str, *args: str) -> str:
    env = {**os.environ, "KUBECONFIG": str(sim.kubeconfig_path("onprem-mixed")), "HOME": home}
    out = subprocess.run(
        [str(KUBECTL), *args], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_an_8_and_a_4_gpu_job_both_run_each_through_the_kind_it_fits(
    broker_url: str, sim: Simulation, tmp_path: Any
) -> None:
    h100 = _h100(broker_url)
    assert (h100["offered"], h100["askedThrough"], h100["total"], h100["allocatable"]) == (
        "both",
        "per-job",
        12,
        12,
    )
    kinds = {k["kind"]: (k["allocatable"], k["maxFreeOnOneNode"]) for k in h100["kinds"]}
    assert kinds == {"device-plugin": (8, 8), "dra": (4, 4)}
    started = time.monotonic()
    ids = {}
    for gpus in (8, 4):
        spec = {"name": f"j-{gpus}", "gpus": gpus, "gpuProducts": ["H100-80GB"], "durationSeconds": 100000}
        r = httpx.post(f"{broker_url}/v1/jobs", json=spec, headers=AUTH)
        assert r.status_code == 201, r.text
        ids[gpus] = r.json()["id"]

    def running() -> bool:
        states = [httpx.get(f"{broker_url}/v1/jobs/{j}", headers=AUTH).json()["state"] for j in ids.values()]
        return all(s == "RUNNING" for s in states)

    wait_for(running, timeout=90, what="both jobs to run")
    home = str(tmp_path)

    def pods_running() -> bool:
        pods = json.loads(_kubectl(sim, home, "get", "pods", "-n", "default", "-o", "json"))["items"]
        return len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods)

    wait_for(pods_running, timeout=90, what="both pods Running")
    print(f"issue-47: submit to both pods Running {time.monotonic() - started:.1f}s")  # docs/benchmarks.md
    claims = _kubectl(sim, home, "get", "resourceclaims", "-n", "default")
    assert claims.count("allocated,reserved") == 1, claims
    jobs = json.loads(_kubectl(sim, home, "get", "jobs", "-n", "default", "-o", "json"))["items"]
    by_id = {j["metadata"]["labels"]["gpufed.io/job-id"]: j["spec"]["template"]["spec"] for j in jobs}
    eight, four = by_id[job_id_label_value(ids[8])], by_id[job_id_label_value(ids[4])]
    assert "resourceClaims" not in eight
    assert eight["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert four["resourceClaims"][0]["resourceClaimTemplateName"]
    assert "nvidia.com/gpu" not in four["containers"][0]["resources"].get("limits", {})
    after = _h100(broker_url)
    assert (after["allocatable"], after["free"]) == (12, 0)  # both nodes full, no GPU counted twice
