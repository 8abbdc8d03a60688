"""`gpufed serve` with settings.apiProcesses: the HTTP API in processes of its own beside the controller,
on real Redis, the demo fleet in kubesim and Ray, auth on.

One broker with two API processes: a submit through the port runs to SUCCEEDED (the API processes write,
the controller places); /v1/status names the broker's lease and says leader; /metrics, answered by an API
process, counts the controller's placements (every process's counters added up); an API process killed
is replaced while the port keeps answering; with controllerNice the broker's threads run at that niceness
and the API processes, the replaced one too, at the one the broker was started with; SIGTERM stops the broker and its API processes, exit 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from adapters.reaper import descendants
from broker.app.cpu_priority import thread_niceness
from broker.app.demo import read_demo_tokens, write_demo_config
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import WorkerRay, free_port, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=50.0) as s:
        yield s


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _api_processes(pid: int) -> set[int]:
    return {p for p, _ in descendants({pid}) if "broker.app.api_process" in _cmdline(p)}


def test_the_api_in_processes_of_its_own_serves_places_counts_and_stops(
    sim: Simulation, redis_url: str, tmp_path: Path, worker_ray: WorkerRay
) -> None:
    kubeconfigs = {name: sim.kubeconfig_path(name) for name in sim.cluster_names()}
    settings = {"apiProcesses": 2, "controllerNice": 5, "leaseSeconds": 2.0, "drainTimeoutSeconds": 30}
    cfg = write_demo_config(tmp_path, kubeconfigs, redis_url, "apiproc" + os.urandom(4).hex(), settings)
    admin = {"Authorization": f"Bearer {read_demo_tokens(tmp_path)['admin']}"}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PROMETHEUS_MULTIPROC_DIR")}
    log = tmp_path / "broker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "broker.cli", "serve", "--config", str(cfg), "--port", str(port)],
            cwd=REPO,
            env=env | {"PYTHONUNBUFFERED": "1", "RAY_ADDRESS": worker_ray.address},  # no Ray of its own
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def ready() -> bool:
            if proc.poll() is not None:
                pytest.fail(f"gpufed serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                return httpx.get(url + "/readyz", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, timeout=180, interval=0.5, what="gpufed serve to be ready")
        # /readyz answers once the first API process serves, while the broker still starts the second
        # (each waits for the one before to be ready; one that dies meanwhile fails the start): the broker
        # says when all are up (and then lowers its own threads), and only then are they counted and one
        # of them killed.
        wait_for(
            lambda: "the broker process runs at niceness 5, its API processes as started" in log.read_text(),
            timeout=60,
            interval=0.2,
            what="gpufed serve to start both API processes",
        )
        first = _api_processes(proc.pid)
        assert len(first) == 2, log.read_text()[-3000:]
        # controllerNice: the broker's threads yield the CPU to the API processes, which keep the
        # niceness they were started with (this test's)
        started_with = os.getpriority(os.PRIO_PROCESS, 0)
        broker_threads = thread_niceness(proc.pid)
        assert sorted(broker_threads.values()).count(max(started_with, 5)) == len(broker_threads) - 1
        assert all(set(thread_niceness(p).values()) == {started_with} for p in first)

        body = {"name": "through-an-api-process", "gpus": 1, "durationSeconds": 2}
        r = httpx.post(url + "/v1/jobs", json=body, headers=admin, timeout=30)
        assert r.status_code == 201, r.text
        job = r.json()["id"]

        def state() -> str:
            return str(httpx.get(f"{url}/v1/jobs/{job}", headers=admin, timeout=10).json()["state"])

        wait_for(lambda: state() == "SUCCEEDED", timeout=120, interval=0.5, what="the job to succeed")

        status = httpx.get(url + "/v1/status", headers=admin, timeout=10).json()
        assert status["role"] == "leader" and status["leader"] == status["replica"]
        assert httpx.get(url + "/v1/status", timeout=10).status_code == 401  # behind auth, as in one process

        metrics = httpx.get(url + "/metrics", timeout=10).text
        placed = [
            line for line in metrics.splitlines() if line.startswith("gpufed_placements_total{")
        ]  # counted by the controller process, served by an API process
        assert placed and sum(float(line.rsplit(" ", 1)[1]) for line in placed) >= 1, metrics[:2000]
        assert "gpufed_leader 1.0" in metrics

        killed = next(iter(first))
        os.kill(killed, signal.SIGKILL)

        def replaced() -> bool:
            now = _api_processes(proc.pid)
            return killed not in now and len(now) == 2

        wait_for(replaced, timeout=60, interval=0.2, what="the killed API process to be replaced")
        assert all(set(thread_niceness(p).values()) == {started_with} for p in _api_processes(proc.pid))
        r = httpx.post(url + "/v1/jobs", json=body | {"name": "after-a-kill"}, headers=admin, timeout=30)
        assert r.status_code == 201, r.text

        serving = _api_processes(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, log.read_text()[-3000:]
        wait_for(
            lambda: not any(Path(f"/proc/{p}").exists() for p in serving),
            timeout=30,
            what="the API processes to exit with the broker",
        )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
