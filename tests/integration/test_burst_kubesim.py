"""Burst into a cloud pool that must scale up, on real parts: kubesim's demo fleet over HTTPS, a private
Redis, Ray pollers, the broker with settings.burst.pools (docs/burst.md).

The demo's cloud-burst cluster has an autoscaled L4 pool at 0 nodes. A job that needs L4 GPUs fits no
node anywhere; the broker counts the pool's headroom, places the job there, kubesim's cluster autoscaler
adds a node after its provisioning delay, the job runs and finishes, and its run is paid for at the
L4 price: spend = price x GPUs x the run time the broker saw.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config

from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for
from tests.demo_broker import demo_broker

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
AUTH: dict[str, str] = {}
SPEED = 25.0
L4_PRICE = 0.85  # clusters.example.yaml's cloud-burst price


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=SPEED) as s:
        yield s


@pytest.fixture(scope="module")
def url(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    # the demo fleet's L4 pool (kubesim/fleets/demo.yaml: 0..4 nodes x 8, 90 s to provision)
    pool = {"provisioningDelaySeconds": 90, "minNodes": 0, "maxNodes": 4, "gpusPerNode": 8, "product": "L4"}
    settings = {"burst": {"pools": {"cloud-burst": pool}}}
    with demo_broker(sim, tmp_path_factory.mktemp("broker"), redis_url, "gpufed-burst", settings) as broker:
        AUTH.update(broker.auth)
        yield broker.url


def _job(url: str, job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/v1/jobs/{job_id}", timeout=10, headers=AUTH).json()
    return body


def _l4_nodes(sim: Simulation) -> list[str]:
    api = config.new_client_from_config(  # type: ignore[no-untyped-call]
        str(sim.kubeconfig_path("cloud-burst")), persist_config=False
    )
    with api:
        nodes = client.CoreV1Api(api).list_node(label_selector="nvidia.com/gpu.product=NVIDIA-L4")
        return [str(n.metadata.name) for n in nodes.items if n.metadata is not None]


def test_a_job_bursts_into_a_pool_that_scales_up_and_is_paid_for(sim: Simulation, url: str) -> None:
    assert _l4_nodes(sim) == []
    spec = {"name": "l4-burst", "gpus": 8, "gpuProducts": ["L4"], "allowBurst": True, "durationSeconds": 150}
    r = httpx.post(f"{url}/v1/jobs", json=spec, timeout=10, headers=AUTH)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]

    done = wait_for(lambda: _job(url, job_id)["state"] in ("SUCCEEDED", "FAILED"), timeout=90, what="ended")
    assert done
    job = _job(url, job_id)
    assert (job["state"], job["cluster"]) == ("SUCCEEDED", "cloud-burst")
    assert len(_l4_nodes(sim)) == 1  # one node ordered, not one per pass
    events = httpx.get(f"{url}/v1/jobs/{job_id}/events", timeout=10, headers=AUTH).json()["items"]
    assert any(e["reason"].startswith("burst:") and "scale-up" in e["reason"] for e in events), events

    spend = wait_for(
        lambda: [
            t for t in httpx.get(f"{url}/v1/spend", timeout=10, headers=AUTH).json()["items"] if t["runs"]
        ],
        timeout=10,
        what="the run accounted",
    )
    assert isinstance(spend, list)
    (tenant,) = spend
    assert tenant["runs"] == 1
    assert tenant["spent"] == pytest.approx(L4_PRICE * tenant["gpuHours"], abs=1e-3)
    assert tenant["gpuHours"] == pytest.approx(
        8 * (150 / SPEED) / 3600, rel=0.5
    )  # the run, as the broker saw it
