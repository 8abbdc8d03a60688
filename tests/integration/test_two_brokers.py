"""Two broker processes on one Redis and the demo fleet in kubesim: neither over-commits the other.

Both serve the API; the holder of the leader lease runs the control loop (broker/ha/leadership.py), and
the reservation compare-and-set would keep even two loops from over-committing. Jobs are submitted to
both; a sampler watches the member clusters the whole time, as an operator would with
kubectl: no pod may ever be Pending for lack of GPUs, and no Kueue Workload may wait for quota the broker
should have known was taken. Every job must then finish exactly once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config

from broker.app.demo import read_demo_tokens, write_demo_config
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import WorkerRay, free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.race]

REPO = Path(__file__).resolve().parents[2]
# The demo config runs with auth on: the admin token of its tokens.yaml, set by the test.
AUTH: dict[str, str] = {}
JOBS = 96


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=50.0) as s:
        yield s


def _start_broker(cfg: Path, port: int, log: Path, ray: WorkerRay) -> subprocess.Popen[bytes]:
    # The config names the Redis; `gpufed serve` lets REDIS_URL override it, and make test exports one.
    # Both join this worker's Ray (RAY_ADDRESS; tests.conftest WorkerRay) rather than start one each.
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env |= {"PYTHONUNBUFFERED": "1", "RAY_ADDRESS": ray.address}
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "broker.cli", "serve", "--config", str(cfg), "--port", str(port)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


class Sampler(threading.Thread):
    """Reads every member cluster's pods (and onprem-b's Kueue Workloads) in a loop, keeping the worst."""

    def __init__(self, sim: Simulation) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.samples = 0
        self.pending_for_gpus: list[str] = []
        self.over_quota: list[str] = []
        self._apis: dict[str, client.ApiClient] = {
            name: config.new_client_from_config(  # type: ignore[no-untyped-call]
                str(sim.kubeconfig_path(name)), persist_config=False
            )
            for name in sim.cluster_names()
        }

    def run(self) -> None:
        while not self.stop.is_set():
            for name, api in self._apis.items():
                pods: Any = client.CoreV1Api(api).list_namespaced_pod("default")
                for pod in pods.items:
                    for c in pod.status.conditions or []:
                        if (
                            c.type == "PodScheduled"
                            and c.status == "False"
                            and "Insufficient nvidia.com/gpu" in (c.message or "")
                        ):
                            self.pending_for_gpus.append(f"{name}/{pod.metadata.name}: {c.message}")
                if name == "onprem-b":
                    wls: Any = client.CustomObjectsApi(api).list_namespaced_custom_object(
                        "kueue.x-k8s.io", "v1beta1", "default", "workloads"
                    )
                    for wl in wls["items"]:
                        for c in (wl.get("status") or {}).get("conditions") or []:
                            if (
                                c["type"] == "QuotaReserved"
                                and c["status"] == "False"
                                and "insufficient" in c.get("message", "")
                            ):
                                self.over_quota.append(f"{wl['metadata']['name']}: {c['message']}")
            self.samples += 1
            self.stop.wait(0.1)


def test_two_brokers_on_one_redis_never_over_commit_a_member_cluster(
    sim: Simulation, redis_url: str, tmp_path: Path, worker_ray: WorkerRay
) -> None:
    kubeconfigs = {name: sim.kubeconfig_path(name) for name in sim.cluster_names()}
    cfg = write_demo_config(tmp_path, kubeconfigs, redis_url, "two-brokers")
    AUTH["Authorization"] = "Bearer " + read_demo_tokens(tmp_path)["admin"]
    ports = [free_port(), free_port()]
    brokers = [_start_broker(cfg, p, tmp_path / f"broker-{i}.log", worker_ray) for i, p in enumerate(ports)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    sampler = Sampler(sim)
    try:
        for url in urls:
            wait_for(_sees_the_fleet(url), timeout=120, what=f"{url} to see 3 clusters")
        sampler.start()
        ids = []
        for i in range(JOBS):
            body = {
                "name": f"two-gpu-{i}",
                "gpus": 2,
                "durationSeconds": 40,
                "gpuProducts": ["A100-80GB", "H100-80GB"],
            }
            r = httpx.post(f"{urls[i % 2]}/v1/jobs", json=body, timeout=30, headers=AUTH)
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])

        def finished() -> bool:
            states = [
                httpx.get(f"{urls[0]}/v1/jobs/{i}", timeout=30, headers=AUTH).json()["state"] for i in ids
            ]
            return all(s == "SUCCEEDED" for s in states)

        wait_for(finished, timeout=300, interval=1.0, what=f"all {JOBS} jobs to succeed")
        placements = {
            i: [
                e
                for e in httpx.get(f"{urls[1]}/v1/jobs/{i}/events", timeout=30, headers=AUTH).json()["items"]
                if e["state"] == "PLACED"
            ]
            for i in ids
        }
    finally:
        sampler.stop.set()
        for b in brokers:
            b.terminate()
        for b in brokers:
            b.wait(timeout=60)
    assert sampler.samples > 10
    assert sampler.pending_for_gpus == []
    assert sampler.over_quota == []
    # each job placed once, by one of the two brokers: never twice
    assert {i: len(p) for i, p in placements.items()} == dict.fromkeys(ids, 1)


def _sees_the_fleet(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return len(httpx.get(f"{url}/v1/fleet", timeout=5, headers=AUTH).json()["clusters"]) == 3
        except httpx.HTTPError:
            return False

    return check
