"""Arrays, groups and dependencies end to end (issue 46): the broker (`gpufed serve`'s composition, auth on)
over kubesim's demo fleet on real HTTPS, real Redis and Ray; member Jobs read back with the kubernetes client.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config

from broker.cli import run as gpufed
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for
from tests.demo_broker import DemoBroker, demo_broker

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
LIVE = ("PLACED", "ADMITTED", "RUNNING")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=50.0) as s:
        yield s


@pytest.fixture(scope="module")
def broker(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DemoBroker]:
    with demo_broker(sim, tmp_path_factory.mktemp("broker"), redis_url, "gpufed-batch") as b:
        yield b


def _call(b: DemoBroker, method: str, path: str, **kw: Any) -> Any:
    r = httpx.request(method, b.url + path, headers=b.auth, timeout=30, **kw)
    assert r.status_code < 300, r.text
    return r.json()


def _member_envs(sim: Simulation, job_id: str) -> list[dict[str, str]]:
    """The container environment of every member-cluster Job of this job id."""
    found = []
    for name in sim.cluster_names():
        api = config.new_client_from_config(str(sim.kubeconfig_path(name)), persist_config=False)  # type: ignore[no-untyped-call]
        jobs: Any = client.BatchV1Api(api).list_job_for_all_namespaces(
            label_selector=f"gpufed.io/job-id={job_id}"
        )
        for j in jobs.items:
            for c in j.spec.template.spec.containers:
                found.append({e.name: e.value for e in c.env or []})
        api.close()
    return found


def test_an_array_of_8_with_parallelism_2_never_runs_more_than_2_and_each_sees_its_index(
    sim: Simulation, broker: DemoBroker
) -> None:
    body = _call(
        broker,
        "POST",
        "/v1/jobs",
        json={"name": "hp", "gpus": 1, "durationSeconds": 60, "array": {"count": 8, "parallelism": 2}},
    )
    ids = [j["id"] for j in body["items"]]
    most = 0

    def all_done() -> bool:
        nonlocal most
        counts = _call(broker, "GET", "/v1/groups/hp")["counts"]
        most = max(most, sum(counts.get(s, 0) for s in LIVE))
        return bool(counts.get("SUCCEEDED", 0) == 8)

    wait_for(all_done, timeout=180, interval=0.05, what="the array's 8 members to succeed")
    assert 1 <= most <= 2, most
    for i, job_id in enumerate(ids):
        envs = _member_envs(sim, job_id)
        assert envs and all(e["GPUFED_ARRAY_INDEX"] == str(i) for e in envs), (i, envs)


def test_cancel_group_cancels_every_remaining_member_and_the_group_counts_them(
    sim: Simulation, broker: DemoBroker
) -> None:
    body = _call(
        broker,
        "POST",
        "/v1/jobs",
        json={"name": "sweep", "gpus": 1, "durationSeconds": 100000, "array": {"count": 4, "parallelism": 1}},
    )
    first = body["items"][0]["id"]
    wait_for(
        lambda: _call(broker, "GET", f"/v1/jobs/{first}")["state"] == "RUNNING",
        timeout=90,
        what="member 0 running",
    )
    token = broker.auth["Authorization"].removeprefix("Bearer ")
    assert gpufed(["cancel", "--group", "sweep", "--server", broker.url, "--token", token]) == 0
    group = _call(broker, "GET", "/v1/groups/sweep")
    assert group["counts"] == {"CANCELLED": 4} and group["total"] == 4
    wait_for(lambda: _member_envs(sim, first) == [], timeout=60, what="the running member's Job deleted")


def test_b_runs_only_after_a_succeeds_and_c_after_a_failed_job_fails_without_running(
    sim: Simulation, broker: DemoBroker
) -> None:
    a = _call(broker, "POST", "/v1/jobs", json={"name": "train-a", "gpus": 1, "durationSeconds": 300})
    b = _call(
        broker,
        "POST",
        "/v1/jobs",
        json={"name": "eval-b", "gpus": 1, "durationSeconds": 30, "dependsOn": [{"job": "train-a"}]},
    )
    bad = _call(
        broker,
        "POST",
        "/v1/jobs",
        json={
            "name": "bad",
            "gpus": 1,
            "durationSeconds": 5,
            "podAnnotations": {"sim.gpufed.io/exit-code": "1"},
        },
    )
    c = _call(
        broker, "POST", "/v1/jobs", json={"name": "after-bad", "gpus": 1, "dependsOn": [{"job": bad["id"]}]}
    )
    assert b["state"] == "PENDING" and "waiting for job train-a" in b["reason"]

    seen_b_while_a_ran: list[str] = []

    def a_done() -> bool:
        # B's state counts only when A was running both before and after B was read: two GETs are not
        # one snapshot, and A may end (and B be released) between them
        running = ("PLACED", "ADMITTED", "RUNNING")
        state_a = _call(broker, "GET", f"/v1/jobs/{a['id']}")["state"]
        if state_a in running:
            state_b = _call(broker, "GET", f"/v1/jobs/{b['id']}")["state"]
            if _call(broker, "GET", f"/v1/jobs/{a['id']}")["state"] in running:
                seen_b_while_a_ran.append(state_b)
        return bool(state_a == "SUCCEEDED")

    wait_for(a_done, timeout=120, interval=0.1, what="A to succeed")
    assert seen_b_while_a_ran and set(seen_b_while_a_ran) == {"PENDING"}
    wait_for(
        lambda: _call(broker, "GET", f"/v1/jobs/{b['id']}")["state"] == "SUCCEEDED",
        timeout=120,
        what="B to run and succeed",
    )

    wait_for(
        lambda: _call(broker, "GET", f"/v1/jobs/{c['id']}")["state"] == "FAILED",
        timeout=120,
        what="C to fail",
    )
    failed = _call(broker, "GET", f"/v1/jobs/{c['id']}")
    assert failed["reason"].startswith("dependency failed: job") and "ended FAILED" in failed["reason"]
    assert failed["cluster"] is None and _member_envs(sim, c["id"]) == []  # never ran


def test_the_client_example_submits_waits_and_reads_logs(broker: DemoBroker, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFED_")}
    env["GPUFED_URL"] = broker.url
    env["GPUFED_TOKEN"] = broker.auth["Authorization"].removeprefix("Bearer ")
    env["GPUFED_CONFIG"] = os.devnull
    run = subprocess.run(
        [sys.executable, str(REPO / "examples" / "client_quickstart.py")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("dry run: onprem-") or lines[0].startswith("dry run: cloud"), lines
    assert any(line.startswith("ended SUCCEEDED on ") for line in lines), lines
    assert any(line.startswith("log: ") and "exited with code 0" in line for line in lines), lines
    assert lines[-1] == "sweep {'SUCCEEDED': 3}", lines
    assert len([j for j in _call(broker, "GET", "/v1/jobs")["items"] if j["name"] == "quickstart-train"]) == 1
