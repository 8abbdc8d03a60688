"""Shutdown after a Redis loss is bounded by its own steps, not by the watchdog (issue 21, case 10).

`gpufed serve` over kubesim's demo fleet and a private Redis without persistence: a job runs, Redis is
killed and started again empty, the leader rebuilds the records (/readyz 200 again), then SIGTERM. The
broker exits 0 within 10 s (the drain timeout is 30 s: the watchdog never fires) and leaves no process
it started (Ray's) behind.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from adapters import redis_process
from adapters.reaper import descendants
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for
from tests.integration.test_crash_safety import BrokerProcess, _alive, _config, _state_is, _submit

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=50.0) as s:
        yield s


def test_sigterm_after_a_redis_loss_and_rebuild_exits_0_within_10_s_leaving_no_ray_process(
    sim: Simulation, tmp_path: Path
) -> None:
    port = redis_process.free_port()
    server = redis_process.spawn(tmp_path, port)  # no persistence: it comes back empty
    b = BrokerProcess(_config(sim, tmp_path, server.url, "shutdown"), tmp_path / "b.log")
    try:
        b.wait_serving()
        job = _submit(b.url, "before-loss", "before-loss", duration=3600)
        wait_for(_state_is(b, job, "RUNNING"), timeout=60, interval=0.5, what="the job RUNNING")
        started = descendants({b.proc.pid})
        redis_process.stop(server.process)
        wait_for(
            lambda: httpx.get(b.url + "/readyz", timeout=30).status_code == 503,
            timeout=60,
            interval=0.5,
            what="/readyz 503 while Redis is down",
        )
        server = redis_process.spawn(tmp_path, port)
        wait_for(
            lambda: httpx.get(b.url + "/readyz", timeout=30).status_code == 200,
            timeout=90,
            interval=0.5,
            what="/readyz 200 again (records rebuilt)",
        )
        b.proc.send_signal(signal.SIGTERM)
        try:
            rc = b.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"not exited 10 s after SIGTERM:\n{b.log.read_text()[-3000:]}")
        log = b.log.read_text()
        assert rc == 0, log[-3000:]
        assert "shutdown did not finish" not in log  # the watchdog did not end it
        wait_for(lambda: not _alive(started), timeout=30, what="every process the broker started to exit")
    finally:
        b.stop()
        redis_process.stop(server.process)
