"""Redis restarted empty while a member cluster is down: re-sent keys never run a job twice (issue 21,
case 2).

`gpufed serve` over kubesim's demo fleet and a private Redis without persistence. Jobs with
Idempotency-Keys run on one cluster; Redis is killed, that cluster goes down, Redis comes back empty
and the leader rebuilds what the other clusters hold. While the down cluster has not been listed, a
re-sent key is answered 503 with Retry-After and the reason (the cluster named), never a new job; once
the cluster answers, the same keys return the original jobs, and each job has exactly one Job in the
member clusters.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from adapters import redis_process
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for
from tests.integration.test_crash_safety import BrokerProcess, _config, _jobs_in_clusters, _state_is, _submit

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=50.0) as s:
        yield s


def _resend(url: str, key: str) -> httpx.Response:
    body = {"name": key, "gpus": 1, "durationSeconds": 3600, "gpuProducts": ["A100-80GB"]}
    return httpx.post(url + "/v1/jobs", json=body, headers={"Idempotency-Key": key}, timeout=30)


def test_keys_resent_while_a_member_is_down_after_a_redis_loss_never_make_a_second_job(
    sim: Simulation, tmp_path: Path
) -> None:
    port = redis_process.free_port()
    server = redis_process.spawn(tmp_path, port)  # no persistence: it comes back empty
    b = BrokerProcess(_config(sim, tmp_path, server.url, "pending", lost_after=120), tmp_path / "b.log")
    try:
        b.wait_serving()
        ids = {f"dup-{i}": _submit(b.url, f"dup-{i}", f"dup-{i}", duration=3600) for i in range(2)}
        for job_id in ids.values():
            wait_for(_state_is(b, job_id, "RUNNING"), timeout=60, interval=0.5, what=f"{job_id} RUNNING")
        clusters = {b.get(f"/v1/jobs/{job_id}")["cluster"] for job_id in ids.values()}
        redis_process.stop(server.process)
        for cluster in clusters:
            sim.faults(cluster).down()
        server = redis_process.spawn(tmp_path, port)
        wait_for(
            lambda: (b.status() or {}).get("recovery") is not None,
            timeout=90,
            interval=0.5,
            what="the records rebuilt from the clusters that answer",
        )
        for key in ids:
            r = _resend(b.url, key)
            assert r.status_code == 503, r.text
            assert r.headers.get("Retry-After")
            assert all(c in r.json()["message"] for c in clusters), r.text
        for cluster in clusters:
            sim.faults(cluster).up()

        def original_returned(key: str) -> bool:
            r = _resend(b.url, key)
            assert r.status_code in (200, 503), r.text  # never 201: never a new job
            return r.status_code == 200 and r.json()["id"] == ids[key]

        for key, job_id in ids.items():
            wait_for(
                functools.partial(original_returned, key), timeout=90, interval=0.5, what=f"{key} -> {job_id}"
            )
            wait_for(_state_is(b, job_id, "RUNNING"), timeout=60, interval=0.5, what=f"{job_id} followed")
            assert len(_jobs_in_clusters(sim, job_id)) == 1
        assert len(b.get("/v1/jobs")["items"]) == len(ids)  # no second job under any id
    finally:
        b.stop()
        redis_process.stop(server.process)
