"""Failover on real parts: kubesim's demo fleet over HTTPS, a private Redis, Ray pollers, the broker.

Each test puts a running job under one fault and checks what a user and an operator care about: no job
is lost, the job ends in the right state (moved and SUCCEEDED when its cluster or node was lost, left
alone when the fault was transient), and once the fault is gone and the fence window has passed, no
job has two live attempts anywhere (the stale attempt in the returned cluster is deleted first).
clusterLostSeconds is 6 here so the suite stays short; docs/reliability.md has the matrix.
"""

from __future__ import annotations

import os
import signal
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for
from tests.demo_broker import DemoBroker, demo_broker, every_cluster_healthy

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# The demo config runs with auth on: the admin token of its tokens.yaml, set by the broker fixture.
AUTH: dict[str, str] = {}
RUNNING: list[DemoBroker] = []  # the module's broker, for the tests that break one of its parts
SPEED = 25.0
LOST_AFTER = 6
# A job that runs ~16 s of real time: long enough to be faulted while RUNNING, short enough to finish.
RUN_SECONDS = 400


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=SPEED) as s:
        yield s


@pytest.fixture(scope="module")
def url(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    settings = {"clusterLostSeconds": LOST_AFTER, "sweepIntervalSeconds": 5}
    with demo_broker(
        sim, tmp_path_factory.mktemp("broker"), redis_url, "gpufed-failover", settings
    ) as broker:
        AUTH.update(broker.auth)
        RUNNING.append(broker)
        yield broker.url


@pytest.fixture(autouse=True)
def clear_faults(sim: Simulation, url: str) -> Iterator[None]:
    yield
    for name in sim.cluster_names():
        sim.faults(name).clear()
    wait_for(lambda: _all_healthy(url) and not _fenced(url), timeout=90, what="the fleet healthy again")


def _all_healthy(url: str) -> bool:
    return every_cluster_healthy(url, AUTH, 3)


def _fenced(url: str) -> list[str]:
    return [
        c["name"]
        for c in httpx.get(f"{url}/v1/clusters", timeout=10, headers=AUTH).json()["items"]
        if c["fenced"]
    ]


def _job(url: str, job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/v1/jobs/{job_id}", timeout=10, headers=AUTH).json()
    return body


def _submit(url: str, name: str, **extra: Any) -> str:
    body = {
        "name": name,
        "gpus": 1,
        "gpuProducts": ["A100-80GB", "H100-80GB"],
        "durationSeconds": RUN_SECONDS,
    }
    r = httpx.post(f"{url}/v1/jobs", json={**body, **extra}, timeout=10, headers=AUTH)
    assert r.status_code == 201, r.text
    job_id: str = r.json()["id"]
    return job_id


def _running(url: str, job_id: str) -> dict[str, Any]:
    job: dict[str, Any] = wait_for(  # type: ignore[assignment]
        lambda: (j := _job(url, job_id))["state"] == "RUNNING" and j, timeout=60, what=f"{job_id} RUNNING"
    )
    return job


def _attempts(sim: Simulation, job_id: str) -> list[tuple[str, str, bool]]:
    """(cluster, Job name, live) of every Job of this job in every cluster, read with the official client."""
    out = []
    for name in sim.cluster_names():
        api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            str(sim.kubeconfig_path(name)), persist_config=False
        )
        try:
            for tries in range(10):  # the test's own reads ride over the 50% error fault, as the broker does
                try:
                    jobs: Any = client.BatchV1Api(api).list_namespaced_job(
                        "default", label_selector=f"gpufed.io/job-id={job_id}"
                    )
                    break
                except ApiException as e:
                    if e.status not in (429, 500, 503, 504) or tries == 9:
                        raise
        finally:
            api.close()
        for j in jobs.items:
            done = any(
                c.type in ("Complete", "Failed") and c.status == "True" for c in j.status.conditions or []
            )
            out.append((name, j.metadata.name, not done and not j.metadata.deletion_timestamp))
    return out


def _finishes_once(sim: Simulation, url: str, job_id: str, attempt: int) -> None:
    """The job SUCCEEDS at `attempt`, and after the fence window no other attempt of it is alive."""
    wait_for(lambda: _job(url, job_id)["state"] == "SUCCEEDED", timeout=120, what=f"{job_id} SUCCEEDED")
    assert _job(url, job_id)["attempt"] == attempt
    wait_for(
        lambda: not any(live for _, _, live in _attempts(sim, job_id)),
        timeout=60,
        what=f"no live attempt of {job_id} left",
    )


def _node_of(sim: Simulation, cluster: str, job_id: str) -> str:
    pods, _ = sim.call(lambda: sim.store(cluster).list("pods", "default"))
    mine = [p for p in pods if (p["metadata"].get("labels") or {}).get("gpufed.io/job-id") == job_id]
    node: str = mine[0]["spec"]["nodeName"]
    return node


@pytest.mark.race
@pytest.mark.parametrize("fault", ["down", "hang", "expired_token"])
def test_a_lost_cluster_s_running_job_runs_elsewhere_and_its_stale_attempt_is_fenced(
    sim: Simulation, url: str, fault: str
) -> None:
    job_id = _submit(url, f"fo-{fault.replace('_', '-')}")
    first = _running(url, job_id)
    lost = first["cluster"]
    sim.faults(lost).set(**{fault: True})

    moved: dict[str, Any] = wait_for(  # type: ignore[assignment]
        lambda: (j := _job(url, job_id))["state"] == "RUNNING" and j["cluster"] != lost and j,
        timeout=90,
        what=f"{job_id} RUNNING in another cluster after {lost} went {fault}",
    )
    assert moved["attempt"] == 2
    events = httpx.get(f"{url}/v1/jobs/{job_id}/events", timeout=10, headers=AUTH).json()["items"]
    assert any(f"cluster {lost} lost" in e["reason"] for e in events), events
    health = {c["name"]: c for c in httpx.get(f"{url}/v1/clusters", timeout=10, headers=AUTH).json()["items"]}
    assert health[lost]["health"] in ("unreachable", "forbidden")
    assert health[lost]["fenced"]

    sim.faults(lost).clear()
    wait_for(lambda: lost not in _fenced(url), timeout=90, what=f"{lost}'s fence lifted")
    # the stale attempt was deleted before the cluster was offered again
    assert [a for a in _attempts(sim, job_id) if a[0] == lost and a[2]] == []
    _finishes_once(sim, url, job_id, attempt=2)


@pytest.mark.race
def test_a_job_with_failover_never_fails_with_its_lost_cluster_and_runs_nowhere(
    sim: Simulation, url: str
) -> None:
    job_id = _submit(url, "fo-never", failover="never")
    lost = _running(url, job_id)["cluster"]
    sim.faults(lost).set(down=True)

    failed: dict[str, Any] = wait_for(  # type: ignore[assignment]
        lambda: (j := _job(url, job_id))["state"] == "FAILED" and j,
        timeout=90,
        what=f"{job_id} FAILED after {lost} went down",
    )
    assert failed["attempt"] == 1  # not moved
    events = httpx.get(f"{url}/v1/jobs/{job_id}/events", timeout=10, headers=AUTH).json()["items"]
    assert any(f"cluster {lost} lost" in e["reason"] and "(failover: never)" in e["reason"] for e in events)

    sim.faults(lost).clear()
    wait_for(lambda: lost not in _fenced(url), timeout=90, what=f"{lost}'s fence lifted")
    # the attempt left in the returned cluster was deleted: a FAILED job holds no GPUs anywhere
    assert not any(live for _, _, live in _attempts(sim, job_id))
    assert _job(url, job_id)["state"] == "FAILED"


@pytest.mark.race
@pytest.mark.parametrize("fault", ["error_rate", "cut_watches", "reset_connections", "poller_killed"])
def test_transient_faults_move_nothing(sim: Simulation, url: str, fault: str) -> None:
    """Faults that are not the loss of a cluster: the job runs to the end where it is, once."""
    job_id = _submit(url, f"fo-{fault.replace('_', '-')}")
    where = _running(url, job_id)["cluster"]
    faults = sim.faults(where)
    if fault == "error_rate":
        faults.error_rate(0.5)
    elif fault == "cut_watches":
        for _ in range(5):
            faults.cut_watches()
    elif fault == "reset_connections":
        for _ in range(5):
            faults.reset_connections()
    else:  # every poller shard process SIGKILLed: Ray restarts them and they resume by themselves
        pollers = RUNNING[0].broker.pollers
        before = pollers.shard_pids()
        for pid in before.values():
            os.kill(pid, signal.SIGKILL)
        wait_for(
            lambda: all(p not in before.values() for p in pollers.shard_pids().values()),
            timeout=60,
            what="every poller shard restarted",
        )
    _finishes_once(sim, url, job_id, attempt=1)


def test_a_node_lost_under_a_running_pod_requeues_the_job(sim: Simulation, url: str) -> None:
    job_id = _submit(url, "fo-node-lost")
    job = _running(url, job_id)
    cluster = job["cluster"]
    store = sim.store(cluster)
    node = _node_of(sim, cluster, job_id)
    sim.call(lambda: store.delete("nodes", "", node))

    wait_for(
        lambda: _job(url, job_id)["attempt"] == 2, timeout=60, what=f"{job_id} requeued after {node} was lost"
    )
    events = httpx.get(f"{url}/v1/jobs/{job_id}/events", timeout=10, headers=AUTH).json()["items"]
    assert any("disrupted on" in e["reason"] for e in events), events
    _finishes_once(sim, url, job_id, attempt=2)


def test_a_spot_interruption_in_the_cloud_requeues_the_job(sim: Simulation, url: str) -> None:
    job_id = _submit(url, "fo-spot", gpuProducts=["H200-141GB"], allowBurst=True)
    job = _running(url, job_id)
    assert job["cluster"] == "cloud-burst"
    node = _node_of(sim, "cloud-burst", job_id)
    req = urllib.request.Request(
        f"{sim.admin_url}/clusters/cloud-burst/spot", method="POST", data=f'{{"node": "{node}"}}'.encode()
    )
    with urllib.request.urlopen(req, timeout=10):
        pass

    wait_for(lambda: _job(url, job_id)["attempt"] == 2, timeout=120, what=f"{job_id} requeued after spot")
    _finishes_once(sim, url, job_id, attempt=2)


def test_a_hung_cluster_does_not_delay_jobs_for_the_others(sim: Simulation, url: str) -> None:
    stuck = _submit(url, "fo-stuck", gpuProducts=["A100-80GB"])
    assert _running(url, stuck)["cluster"] == "onprem-a"
    sim.faults("onprem-a").hang()
    others = [_submit(url, f"fo-other-{i}", gpuProducts=["H100-80GB"]) for i in range(3)]
    # placed while onprem-a hangs (reads of the stuck job time out on onprem-a's own worker)
    wait_for(
        lambda: all(_job(url, j)["state"] in ("PLACED", "ADMITTED", "RUNNING") for j in others),
        timeout=10,
        what="jobs for onprem-b placed while onprem-a hangs",
    )
    sim.faults("onprem-a").clear()
    for j in [stuck, *others]:
        wait_for(_succeeded(url, j), timeout=120, what=f"{j} SUCCEEDED")
    # the stuck job may have been moved (the hang outlasted clusterLostSeconds) or not: either way, once
    # onprem-a's fence is lifted no attempt of any of them is alive anywhere
    wait_for(lambda: "onprem-a" not in _fenced(url), timeout=90, what="onprem-a's fence lifted")
    for j in [stuck, *others]:
        wait_for(_none_alive(sim, j), timeout=60, what=f"no live attempt of {j} left")


def _none_alive(sim: Simulation, job_id: str) -> Callable[[], bool]:
    return lambda: not any(live for _, _, live in _attempts(sim, job_id))


def _succeeded(url: str, job_id: str) -> Callable[[], bool]:
    return lambda: _job(url, job_id)["state"] == "SUCCEEDED"
