"""Broker processes killed, replaced and stopped, on real Redis, the demo fleet in kubesim and Ray.

- SIGTERM drains: the process exits 0 within the drain timeout and no process it started (Ray's
  raylet, GCS, agents, workers) is left; SIGKILL leaves none either (the reaper).
- SIGKILL at each step of a job's dispatch path (GPUFED_CRASH_AT, broker.controller.faults): after a restart the
  job finishes exactly once (one Job in the member clusters, attempt 1); a retried submit with its
  Idempotency-Key returns the job; a cancel interrupted before its delete still removes the Job; a
  failover interrupted between its release and its requeue still moves the job, once.

The leader killed, Redis lost and a paused leader: test_crash_safety_leaders.py (the same helpers, a
file of its own so that the two run on two pytest-xdist workers at once).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config

from adapters.reaper import descendants
from broker.app.demo import write_demo_config
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import WorkerRay, free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.race]

REPO = Path(__file__).resolve().parents[2]
LEASE_SECONDS = 2.0
DRAIN_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=50.0) as s:
        yield s


def _config(
    sim: Simulation, tmp_path: Path, redis_url: str, prefix: str, lost_after: float | None = None
) -> Path:
    kubeconfigs = {name: sim.kubeconfig_path(name) for name in sim.cluster_names()}
    settings: dict[str, float] = {
        "leaseSeconds": LEASE_SECONDS,
        "drainTimeoutSeconds": DRAIN_TIMEOUT,
        "sweepIntervalSeconds": 5,
    }
    if lost_after is not None:
        settings["clusterLostSeconds"] = lost_after
    # these brokers run --insecure-no-auth: the tests are about crashes, not tokens
    return write_demo_config(tmp_path, kubeconfigs, redis_url, prefix, settings, auth=False)


class BrokerProcess:
    def __init__(
        self, cfg: Path, log: Path, crash_at: str | None = None, ray: WorkerRay | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        # The config names the Redis; `gpufed serve` lets REDIS_URL override it, and make test exports one.
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "RAY_ADDRESS")}
        env["PYTHONUNBUFFERED"] = "1"
        if ray is not None:
            env["RAY_ADDRESS"] = ray.address
        env.pop("GPUFED_CRASH_AT", None)
        if crash_at:
            env["GPUFED_CRASH_AT"] = crash_at
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "broker.cli",
                    "serve",
                    "--config",
                    str(cfg),
                    "--port",
                    str(self.port),
                    "--insecure-no-auth",
                ],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def get(self, path: str) -> Any:
        return httpx.get(self.url + path, timeout=30).json()

    def status(self) -> dict[str, Any] | None:
        try:
            body: dict[str, Any] = httpx.get(self.url + "/v1/status", timeout=5).json()
            return body
        except httpx.HTTPError:
            return None

    def wait_serving(self) -> None:
        def ready() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(f"broker exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                fleet = httpx.get(self.url + "/v1/fleet", timeout=5).json()["clusters"]
                return len(fleet) == 3 and httpx.get(self.url + "/readyz", timeout=5).status_code == 200
            except (httpx.HTTPError, KeyError):
                return False

        wait_for(ready, timeout=180, interval=0.5, what=f"{self.url} to serve the fleet")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


@pytest.fixture
def brokers() -> Iterator[list[BrokerProcess]]:
    started: list[BrokerProcess] = []
    try:
        yield started
    finally:
        for b in started:
            b.stop()


def _alive(procs: set[tuple[int, int]]) -> set[tuple[int, int]]:
    out = set()
    for pid, start in procs:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[19]) == start:
            out.add((pid, start))
    return out


def _jobs_in_clusters(sim: Simulation, job_id: str) -> list[str]:
    """Every Job of this job id in any member cluster: what actually ran."""
    found = []
    for name in sim.cluster_names():
        api = config.new_client_from_config(str(sim.kubeconfig_path(name)), persist_config=False)  # type: ignore[no-untyped-call]
        jobs: Any = client.BatchV1Api(api).list_namespaced_job(
            "default", label_selector=f"gpufed.io/job-id={job_id}"
        )
        found += [f"{name}/{j.metadata.name}" for j in jobs.items]
        api.close()
    return found


def _submit(
    url: str,
    name: str,
    key: str | None = None,
    duration: float = 30,
    products: tuple[str, ...] = ("A100-80GB",),
) -> str:
    headers = {"Idempotency-Key": key} if key else {}
    body = {"name": name, "gpus": 1, "durationSeconds": duration, "gpuProducts": list(products)}
    r = httpx.post(url + "/v1/jobs", json=body, headers=headers, timeout=30)
    assert r.status_code in (200, 201), r.text
    job_id: str = r.json()["id"]
    return job_id


def _state_is(b: BrokerProcess, job_id: str, state: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return bool(b.get(f"/v1/jobs/{job_id}")["state"] == state)
        except (httpx.HTTPError, KeyError):
            return False

    return check


def test_sigterm_drains_and_exits_0_leaving_no_ray_process(
    sim: Simulation, redis_url: str, tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    b = BrokerProcess(_config(sim, tmp_path, redis_url, "term" + os.urandom(4).hex()), tmp_path / "b.log")
    brokers.append(b)
    b.wait_serving()
    job = _submit(b.url, "before-term", duration=3600)
    wait_for(_state_is(b, job, "RUNNING"), timeout=60, interval=0.5, what="the job RUNNING")
    assert "gpufed_leader 1.0" in httpx.get(b.url + "/metrics", timeout=30).text
    started = descendants({b.proc.pid})
    assert len(started) >= 2  # Ray's processes (and the reaper)
    b.proc.send_signal(signal.SIGTERM)
    rc = b.proc.wait(timeout=DRAIN_TIMEOUT + 30)
    log = b.log.read_text()
    assert rc == 0, log[-3000:]
    assert "Traceback" not in log
    assert "leader lease released" in log
    wait_for(lambda: not _alive(started), timeout=30, what="every process the broker started to exit")


def test_sigkill_leaves_no_ray_process(
    sim: Simulation, redis_url: str, tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    b = BrokerProcess(_config(sim, tmp_path, redis_url, "kill" + os.urandom(4).hex()), tmp_path / "b.log")
    brokers.append(b)
    b.wait_serving()
    started = descendants({b.proc.pid})
    assert len(started) >= 2
    b.proc.kill()
    b.proc.wait(timeout=30)
    wait_for(lambda: not _alive(started), timeout=30, what="Ray's processes to go with the broker")


CRASH_STEPS = ["submitted", "reserved", "placed", "created", "observed"]


@pytest.mark.parametrize("step", CRASH_STEPS)
def test_sigkill_at_each_dispatch_step_the_job_still_runs_exactly_once(
    step: str,
    sim: Simulation,
    redis_url: str,
    tmp_path: Path,
    worker_ray: WorkerRay,
    brokers: list[BrokerProcess],
) -> None:
    cfg = _config(sim, tmp_path, redis_url, "crash" + os.urandom(4).hex())
    first = BrokerProcess(cfg, tmp_path / "first.log", crash_at=step, ray=worker_ray)
    brokers.append(first)
    first.wait_serving()
    key = f"crash-{step}"
    job_id: str | None = None
    try:
        job_id = _submit(first.url, f"crash-{step}", key)
    except (httpx.HTTPError, AssertionError):
        # It died before answering: the client retries with its key. At "submitted" always; at a step of
        # the control loop when the loop took the stored job before the answer was written (the two run
        # at once, and nothing orders them); never at "observed", which comes after the job ran.
        assert step != "observed"
    first.proc.wait(timeout=120)
    assert first.proc.returncode == -signal.SIGKILL
    second = BrokerProcess(cfg, tmp_path / "second.log", ray=worker_ray)
    brokers.append(second)
    second.wait_serving()
    again = _submit(second.url, f"crash-{step}", key)
    if job_id is not None:
        assert again == job_id
    wait_for(_state_is(second, again, "SUCCEEDED"), timeout=120, interval=0.5, what=f"{again} SUCCEEDED")
    assert len(_jobs_in_clusters(sim, again)) == 1
    assert second.get(f"/v1/jobs/{again}")["attempt"] == 1
    named = [j for j in second.get("/v1/jobs")["items"] if j["name"] == f"crash-{step}"]
    assert len(named) == 1


def test_sigkill_while_failing_over_a_lost_clusters_job_still_moves_it_once(
    sim: Simulation, redis_url: str, tmp_path: Path, worker_ray: WorkerRay, brokers: list[BrokerProcess]
) -> None:
    cfg = _config(sim, tmp_path, redis_url, "fo" + os.urandom(4).hex(), lost_after=4)
    first = BrokerProcess(cfg, tmp_path / "first.log", crash_at="failed-over", ray=worker_ray)
    brokers.append(first)
    first.wait_serving()
    job_id = _submit(first.url, "to-move", duration=60, products=("A100-80GB", "H100-80GB"))
    wait_for(_state_is(first, job_id, "RUNNING"), timeout=60, interval=0.5, what="the job RUNNING")
    lost = first.get(f"/v1/jobs/{job_id}")["cluster"]
    sim.faults(lost).down()
    try:
        first.proc.wait(timeout=120)  # killed between the release and the requeue
        assert first.proc.returncode == -signal.SIGKILL
        second = BrokerProcess(cfg, tmp_path / "second.log", ray=worker_ray)
        brokers.append(second)
        second.wait_serving()

        def moved() -> bool:
            job = second.get(f"/v1/jobs/{job_id}")
            return bool(job["state"] == "RUNNING" and job["cluster"] != lost)

        wait_for(moved, timeout=120, interval=0.5, what=f"{job_id} RUNNING outside {lost}")
    finally:
        sim.faults(lost).clear()
    wait_for(_state_is(second, job_id, "SUCCEEDED"), timeout=120, interval=0.5, what=f"{job_id} SUCCEEDED")
    assert second.get(f"/v1/jobs/{job_id}")["attempt"] == 2
    # the stale attempt on the lost cluster is deleted once it answers (the fence), the other ran once
    wait_for(
        lambda: (
            [j.split("/")[0] for j in _jobs_in_clusters(sim, job_id)]
            == [second.get(f"/v1/jobs/{job_id}")["cluster"]]
        ),
        timeout=120,
        interval=1.0,
        what="only the second attempt's Job left",
    )


def test_sigkill_between_cancel_and_delete_still_removes_the_job(
    sim: Simulation, redis_url: str, tmp_path: Path, worker_ray: WorkerRay, brokers: list[BrokerProcess]
) -> None:
    cfg = _config(sim, tmp_path, redis_url, "cancel" + os.urandom(4).hex())
    first = BrokerProcess(cfg, tmp_path / "first.log", crash_at="cancelled", ray=worker_ray)
    brokers.append(first)
    first.wait_serving()
    job_id = _submit(first.url, "to-cancel", duration=3600)
    wait_for(_state_is(first, job_id, "RUNNING"), timeout=60, interval=0.5, what="the job RUNNING")
    with pytest.raises(httpx.HTTPError):
        httpx.delete(f"{first.url}/v1/jobs/{job_id}", timeout=30)
    first.proc.wait(timeout=60)
    assert _jobs_in_clusters(sim, job_id)  # CANCELLED was written; the Job is still there
    second = BrokerProcess(cfg, tmp_path / "second.log", ray=worker_ray)
    brokers.append(second)
    second.wait_serving()
    assert second.get(f"/v1/jobs/{job_id}")["state"] == "CANCELLED"
    wait_for(lambda: not _jobs_in_clusters(sim, job_id), timeout=60, interval=0.5, what="the Job deleted")
