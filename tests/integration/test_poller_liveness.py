"""A frozen poller shard is replaced from the outside (issue 21, case 1).

A `ray::PollerShard` process stopped with SIGSTOP never crashes, so Ray never restarts it by itself and
every cluster it watches goes stale: placement stops. The supervisor judges a shard by what it
publishes: past clusterLostSeconds / 2 of silence it is killed and Ray restarts it. The whole broker
over kubesim's demo fleet, real Redis, real Ray: after a SIGSTOP the capacity is fresh again and a job
submitted then runs, within 30 s; meanwhile /readyz says capacity is stale and why; /metrics counts the
replacement per shard.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import poll_for
from tests.demo_broker import DemoBroker, demo_broker

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LOST = 10.0  # clusterLostSeconds (the default): a shard silent for 5 s is replaced


@pytest.fixture(scope="module")
def broker(
    redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DemoBroker]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with (
        Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=50.0) as sim,
        demo_broker(
            sim, tmp_path_factory.mktemp("broker"), redis_url, "liveness", {"clusterLostSeconds": LOST}
        ) as running,
    ):
        yield running


def _replacements(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        if family.name == "gpufed_poller_shard_replacements"
        for s in family.samples
    )


def test_a_stopped_shard_is_replaced_and_a_new_job_runs_within_30_s(broker: DemoBroker) -> None:
    url, auth = broker.url, broker.auth
    poll_for("/readyz 200", lambda: httpx.get(f"{url}/readyz", timeout=10).status_code == 200, 30)
    assert _replacements(url) == 0
    pids = broker.broker.pollers.shard_pids()
    stopped_at = time.monotonic()
    for pid in pids.values():
        os.kill(pid, signal.SIGSTOP)
    try:
        # While the shard is frozen, /readyz says the capacity is stale and why.
        def stale() -> str | None:
            r = httpx.get(f"{url}/readyz", timeout=10)
            reason = r.json().get("reasons", {}).get("capacity") if r.status_code == 503 else None
            return str(reason) if reason else None

        reason = poll_for("/readyz to say the capacity is stale", stale, 20, interval=0.1)
        assert "capacity is stale: no summary from the pollers for" in reason, reason

        spec = {"name": "after-freeze", "gpus": 1, "gpuProducts": ["H100-80GB"], "durationSeconds": 600}
        r = httpx.post(f"{url}/v1/jobs", json=spec, headers=auth, timeout=30)
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]

        def running() -> bool:
            job = httpx.get(f"{url}/v1/jobs/{job_id}", headers=auth, timeout=10).json()
            return bool(job["state"] == "RUNNING")

        poll_for("the job submitted after the freeze to run", running, 30 - (time.monotonic() - stopped_at))

        def ready() -> str | None:
            r = httpx.get(f"{url}/readyz", timeout=10)
            return r.text if r.status_code == 200 else None

        poll_for("/readyz 200 again", ready, 30)
        assert broker.broker.pollers.shard_pids() != pids  # a new process publishes now
        assert _replacements(url) >= 1
    finally:
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
