"""The issue's acceptance set-up on real parts: GB200 nodes created with the real kubectl in two empty
kubesim clusters, the broker's pollers reading them, and `gpufed explain` (the CLI, over HTTP).

gb-split has 12 free GB200 nodes in two NVLink cliques of 6, gb-whole 8 free nodes in one clique. An
8 x 4-GPU gang with `topology.nvlinkClique: required` goes to gb-whole; gb-split's verdict names its
best clique.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from broker.app import main as composition
from broker.config.settings import load_fleet_config
from broker.core.topology import CLIQUE_LABEL
from kubesim.fleet import ClusterSpec, FleetSpec
from kubesim.sim import Simulation
from tests.conftest import admin_tokens, free_port, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
KUBECTL = REPO / "tools" / "bin" / "kubectl"
GPUFED = REPO / ".venv" / "bin" / "gpufed"
UUID = "3d2c1b0a-9f8e-4d7c-8b6a-5f4e3d2c1b0a"
TOKEN: dict[str, str] = {}


def _node(name: str, clique: str) -> dict[str, Any]:
    resources = {"cpu": "144", "memory": "1800Gi", "pods": "110", "nvidia.com/gpu": "4"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-GB200",
                "nvidia.com/gpu.count": "4",
                CLIQUE_LABEL: clique,
            },
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def _kubectl_create(sim: Simulation, cluster: str, objects: list[dict[str, Any]], home: Path) -> None:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing at {KUBECTL}: `make setup` installs it; these tests do not skip")
    doc = {"apiVersion": "v1", "kind": "List", "items": objects}
    env = {**os.environ, "KUBECONFIG": str(sim.kubeconfig_path(cluster)), "HOME": str(home)}
    out = subprocess.run(
        [str(KUBECTL), "create", "--validate=false", "-f", "-"],
        input=json.dumps(doc),
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = FleetSpec(
        clusters=[ClusterSpec(name="gb-split", region="eu"), ClusterSpec(name="gb-whole", region="us")]
    )
    with Simulation(fleet, tmp_path_factory.mktemp("gb-kubeconfigs"), speed=20.0) as s:
        home = tmp_path_factory.mktemp("kubectl-home")
        split = [_node(f"split-{c}-{i}", f"{UUID}.{c}") for c in (1, 2) for i in range(6)]
        _kubectl_create(s, "gb-split", split, home)
        _kubectl_create(s, "gb-whole", [_node(f"whole-{i}", f"{UUID}.7") for i in range(8)], home)
        yield s


@pytest.fixture(scope="module")
def broker_url(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("gb-broker")
    doc: dict[str, Any] = {
        "clusters": [
            {"name": n, "kubeconfig": str(sim.kubeconfig_path(n))} for n in ("gb-split", "gb-whole")
        ],
        "settings": {"redisUrl": redis_url, "redisPrefix": "gpufed-gb"},
    }
    tokens, header = admin_tokens(workdir)
    doc["auth"] = {"tokensFile": str(tokens)}
    TOKEN["value"] = header["Authorization"].removeprefix("Bearer ")
    path = workdir / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc))
    port = free_port()
    with composition.running_broker(load_fleet_config(path), port=port):
        url = f"http://127.0.0.1:{port}"

        def cliques() -> int:
            clusters = httpx.get(f"{url}/v1/fleet", headers=header).json()["clusters"]
            return sum(len(c.get("cliques", [])) for c in clusters)

        wait_for(lambda: cliques() == 3, timeout=60, what="the three cliques in the fleet view")
        yield url


def test_gpufed_explain_chooses_the_one_clique_that_fits(broker_url: str, tmp_path: Path) -> None:
    job = {"name": "train", "gpus": 4, "pods": 8, "topology": {"nvlinkClique": "required"}}
    spec = tmp_path / "train.yaml"
    spec.write_text(yaml.safe_dump(job))
    env = {**os.environ, "GPUFED_TOKEN": TOKEN["value"]}
    out = subprocess.run(
        [str(GPUFED), "explain", "-f", str(spec), "--server", broker_url, "-o", "json"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    body = json.loads(out.stdout)
    assert body["placed"] and body["placement"]["cluster"] == "gb-whole"
    assert body["placement"]["clique"] == f"{UUID}.7"
    split = next(c for c in body["clusters"] if c["cluster"] == "gb-split")
    assert split["rejection"]["plugin"] == "nvlink-clique"
    assert (
        split["rejection"]["reason"] == f"no NVLink clique with 8 nodes of 4 free GB200 (best: 6 in {UUID}.1)"
    )
