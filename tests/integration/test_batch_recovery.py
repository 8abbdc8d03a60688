"""A dependency survives a broker SIGKILL and a Redis rebuild (issue 46).

`gpufed serve` processes over kubesim's demo fleet (test_crash_safety's BrokerProcess). B depends on A
(succeeded). In both tests A ends in its member cluster while the broker cannot record it (the broker
killed, or Redis down), that is between A's end and B's release: afterwards B still exists, still names
its dependency, and runs once, after A.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config

from adapters import redis_process
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import WorkerRay, wait_for
from tests.integration.test_crash_safety import BrokerProcess, _config, _jobs_in_clusters, _state_is

pytestmark = [pytest.mark.integration, pytest.mark.race]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=50.0) as s:
        yield s


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(url + "/v1/jobs", json=body, timeout=30)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def _a_and_b(url: str, name: str) -> tuple[str, str]:
    a = _post(url, {"name": f"{name}-a", "gpus": 1, "durationSeconds": 500})
    b = _post(url, {"name": f"{name}-b", "gpus": 1, "durationSeconds": 20, "dependsOn": [{"job": a["id"]}]})
    assert b["state"] == "PENDING"
    return a["id"], b["id"]


def _completed_in_cluster(sim: Simulation, job_id: str) -> bool:
    """The member Job of this job id reports success (what the broker will read when it looks)."""
    for name in sim.cluster_names():
        api = config.new_client_from_config(str(sim.kubeconfig_path(name)), persist_config=False)  # type: ignore[no-untyped-call]
        try:
            jobs: Any = client.BatchV1Api(api).list_namespaced_job(
                "default", label_selector=f"gpufed.io/job-id={job_id}"
            )
            if any((j.status.succeeded or 0) >= 1 for j in jobs.items):
                return True
        finally:
            api.close()
    return False


def _b_runs_after_a(b: BrokerProcess, sim: Simulation, a_id: str, b_id: str) -> None:
    view = b.get(f"/v1/jobs/{b_id}")
    assert view["dependsOn"] == [{"job": a_id, "when": "succeeded"}], view
    wait_for(_state_is(b, a_id, "SUCCEEDED"), timeout=120, interval=0.5, what="A recorded SUCCEEDED")
    wait_for(_state_is(b, b_id, "SUCCEEDED"), timeout=120, interval=0.5, what="B released, run and SUCCEEDED")
    assert len(_jobs_in_clusters(sim, b_id)) == 1
    events = httpx.get(f"{b.url}/v1/jobs/{b_id}/events", timeout=30).json()["items"]
    states = [e["state"] for e in events]
    assert states[0] == "PENDING" and "QUEUED" in states, states


def test_a_broker_sigkill_between_as_end_and_bs_release_loses_neither(
    sim: Simulation, redis_url: str, tmp_path: Path, worker_ray: WorkerRay
) -> None:
    cfg = _config(sim, tmp_path, redis_url, "depkill" + os.urandom(4).hex())
    first = BrokerProcess(cfg, tmp_path / "first.log", ray=worker_ray)
    second: BrokerProcess | None = None
    try:
        first.wait_serving()
        a_id, b_id = _a_and_b(first.url, "kill")
        wait_for(_state_is(first, a_id, "RUNNING"), timeout=90, interval=0.3, what="A RUNNING")
        first.stop()  # SIGKILL
        wait_for(
            lambda: _completed_in_cluster(sim, a_id), timeout=120, interval=0.5, what="A done in its cluster"
        )
        second = BrokerProcess(cfg, tmp_path / "second.log", ray=worker_ray)
        second.wait_serving()
        _b_runs_after_a(second, sim, a_id, b_id)
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_a_redis_rebuild_between_as_end_and_bs_release_loses_neither(
    sim: Simulation, tmp_path: Path, worker_ray: WorkerRay
) -> None:
    port = redis_process.free_port()
    server = redis_process.spawn(tmp_path, port)  # no persistence: it comes back empty
    b = BrokerProcess(_config(sim, tmp_path, server.url, "deprebuild"), tmp_path / "b.log", ray=worker_ray)
    try:
        b.wait_serving()
        a_id, b_id = _a_and_b(b.url, "rebuild")
        wait_for(_state_is(b, a_id, "RUNNING"), timeout=90, interval=0.3, what="A RUNNING")
        redis_process.stop(server.process)
        wait_for(
            lambda: _completed_in_cluster(sim, a_id), timeout=120, interval=0.5, what="A done in its cluster"
        )
        server = redis_process.spawn(tmp_path, port)
        wait_for(
            lambda: (b.status() or {}).get("recovery") is not None,
            timeout=90,
            interval=0.5,
            what="the records rebuilt from the clusters",
        )
        _b_runs_after_a(b, sim, a_id, b_id)
    finally:
        b.stop()
        redis_process.stop(server.process)
