"""Broker replicas on one Redis losing their leader or their Redis, as processes, on the demo fleet in
kubesim and Ray (split from test_crash_safety.py, whose helpers it uses, so that the two halves run on
two pytest-xdist workers at once; each half starts its own fleet).

- The leader killed with two followers running: a follower takes the lease over and every job finishes
  exactly once.
- /readyz says 503 with the reason while Redis is down (and /healthz stays 200); Redis back empty: the
  job records are rebuilt from the clusters (/v1/status says what), retried keys return their jobs.
- A leader SIGSTOPped past its lease wakes up after a takeover, steps down and writes nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters import redis_process
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import WorkerRay, wait_for
from tests.integration.test_crash_safety import BrokerProcess, _config, _jobs_in_clusters, _state_is, _submit

pytestmark = [pytest.mark.integration, pytest.mark.race]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=50.0) as s:
        yield s


@pytest.fixture
def brokers() -> Iterator[list[BrokerProcess]]:
    started: list[BrokerProcess] = []
    try:
        yield started
    finally:
        for b in started:
            b.stop()


def test_a_killed_leader_is_replaced_by_a_follower_and_no_job_is_lost_or_run_twice(
    sim: Simulation, redis_url: str, tmp_path: Path, worker_ray: WorkerRay, brokers: list[BrokerProcess]
) -> None:
    cfg = _config(sim, tmp_path, redis_url, "lead" + os.urandom(4).hex())
    for i in range(3):
        brokers.append(BrokerProcess(cfg, tmp_path / f"b{i}.log", ray=worker_ray))
    for b in brokers:
        b.wait_serving()

    def leaders() -> list[BrokerProcess]:
        return [b for b in brokers if b.proc.poll() is None and (b.status() or {}).get("role") == "leader"]

    wait_for(lambda: len(leaders()) == 1, timeout=30, what="one leader")
    (leader,) = leaders()
    followers = [b for b in brokers if b is not leader]
    ids = [_submit(brokers[i % 3].url, f"ha-{i}", f"ha-{i}", duration=20) for i in range(24)]
    leader.proc.kill()
    leader.proc.wait(timeout=30)
    wait_for(lambda: len(leaders()) == 1, timeout=60, what="a follower to take the lease")
    (new_leader,) = leaders()
    assert new_leader in followers
    ids += [_submit(followers[i % 2].url, f"ha-late-{i}", f"ha-late-{i}", duration=20) for i in range(8)]

    def all_succeeded() -> bool:
        items = new_leader.get("/v1/jobs")["items"]
        states = {j["id"]: j["state"] for j in items}
        return all(states.get(i) == "SUCCEEDED" for i in ids)

    wait_for(all_succeeded, timeout=240, interval=1.0, what="every job to succeed")
    for job_id in ids:
        assert len(_jobs_in_clusters(sim, job_id)) == 1, job_id


def _gpufed_clusters(url: str) -> str:
    """`gpufed clusters` as an operator runs it; its standard output."""
    shown = subprocess.run(
        [sys.executable, "-m", "broker.cli", "clusters", "--server", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_redis_outage_readyz_503_then_redis_back_empty_records_rebuilt_and_keys_kept(
    sim: Simulation, tmp_path: Path, worker_ray: WorkerRay, brokers: list[BrokerProcess]
) -> None:
    port = redis_process.free_port()
    server = redis_process.spawn(tmp_path, port)  # no persistence: it comes back empty
    try:
        b = BrokerProcess(_config(sim, tmp_path, server.url, "outage"), tmp_path / "b.log", ray=worker_ray)
        brokers.append(b)
        b.wait_serving()
        ids = {f"out-{i}": _submit(b.url, f"out-{i}", f"out-{i}", duration=3600) for i in range(3)}
        for job_id in ids.values():
            wait_for(_state_is(b, job_id, "RUNNING"), timeout=60, interval=0.5, what=f"{job_id} RUNNING")
        first = _gpufed_clusters(b.url)
        assert "onprem-a" in first and "rebuilt" not in first, first  # a first start rebuilt nothing
        redis_process.stop(server.process)

        def not_ready() -> dict[str, Any] | None:
            r = httpx.get(b.url + "/readyz", timeout=30)
            return r.json() if r.status_code == 503 else None

        body = wait_for(not_ready, timeout=60, interval=0.5, what="/readyz to say 503")
        assert isinstance(body, dict) and "redis" in body["reasons"]
        assert httpx.get(b.url + "/healthz", timeout=30).status_code == 200  # liveness only
        r = httpx.post(b.url + "/v1/jobs", json={"name": "x", "gpus": 1}, timeout=30)
        assert r.status_code == 503 and r.headers.get("Retry-After")
        server = redis_process.spawn(tmp_path, port)
        wait_for(
            lambda: httpx.get(b.url + "/readyz", timeout=30).status_code == 200,
            timeout=60,
            interval=0.5,
            what="/readyz ready again (records rebuilt)",
        )
        recovery = (b.status() or {}).get("recovery") or {}
        assert recovery.get("recovered") == 3 and sorted(recovery["recovered_ids"]) == sorted(ids.values())
        assert b.get("/v1/clusters")["recovery"] == recovery  # where an operator looks at the fleet
        shown = _gpufed_clusters(b.url)
        assert "3 recovered, 0 queued job(s) lost" in shown, shown
        for key, job_id in ids.items():
            assert _submit(b.url, key, key) == job_id  # a retried key returns the original job
            wait_for(_state_is(b, job_id, "RUNNING"), timeout=60, interval=0.5, what=f"{job_id} followed")
            assert len(_jobs_in_clusters(sim, job_id)) == 1
        assert "state store found empty: 3 job record(s) rebuilt" in b.log.read_text()
        assert "gpufed_recovered_jobs_total 3.0" in httpx.get(b.url + "/metrics", timeout=30).text
    finally:
        redis_process.stop(server.process)


def test_a_paused_leader_that_wakes_up_after_a_takeover_steps_down_without_writing(
    sim: Simulation, redis_url: str, tmp_path: Path, worker_ray: WorkerRay, brokers: list[BrokerProcess]
) -> None:
    cfg = _config(sim, tmp_path, redis_url, "pause" + os.urandom(4).hex())
    for i in range(2):
        brokers.append(BrokerProcess(cfg, tmp_path / f"b{i}.log", ray=worker_ray))
    for b in brokers:
        b.wait_serving()

    def leaders() -> list[BrokerProcess]:
        return [b for b in brokers if (b.status() or {}).get("role") == "leader"]

    wait_for(lambda: len(leaders()) == 1, timeout=30, what="one leader")
    (paused,) = leaders()
    (other,) = [b for b in brokers if b is not paused]
    paused.proc.send_signal(signal.SIGSTOP)  # a GC pause, a frozen VM: it still believes it leads
    try:
        wait_for(lambda: leaders() == [other], timeout=60, what="the other replica to take over")
        ids = [_submit(other.url, f"pause-{i}", duration=20) for i in range(8)]
    finally:
        paused.proc.send_signal(signal.SIGCONT)
    wait_for(
        lambda: (paused.status() or {}).get("role") == "follower",
        timeout=60,
        what="the ex-leader to step down",
    )

    def all_succeeded() -> bool:
        states = {j["id"]: j["state"] for j in other.get("/v1/jobs")["items"]}
        return all(states.get(job_id) == "SUCCEEDED" for job_id in ids)

    wait_for(all_succeeded, timeout=180, interval=1.0, what="every job to succeed")
    for job_id in ids:
        assert len(_jobs_in_clusters(sim, job_id)) == 1, job_id
        placed = [e for e in other.get(f"/v1/jobs/{job_id}/events")["items"] if e["state"] == "PLACED"]
        assert len(placed) == 1, placed
    assert "lost the leader lease" in paused.log.read_text()
