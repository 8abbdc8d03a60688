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
from typing import Any

import httpx
import pytest
from kubernetes import client, config

from adapters import redis_process
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import WorkerRay, wait_for
from tests.integration.test_crash_safety import BrokerProcess, _config, _jobs_in_clusters, _state_is, _submit

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=50.0) as s:
        yield s


def _down_and_seen(b: BrokerProcess, sim: Simulation, clusters: set[str]) -> None:
    """Take the clusters down and wait until the broker sees their calls fail."""
    for cluster in clusters:
        sim.faults(cluster).down()

    def seen() -> bool:
        items = b.get("/v1/clusters")["items"]
        return all(c["health"] != "healthy" for c in items if c["name"] in clusters)

    wait_for(seen, timeout=60, interval=0.3, what=f"{sorted(clusters)} seen failing")


def _resend(url: str, key: str, products: list[str] | None = None) -> httpx.Response:
    body = {"name": key, "gpus": 1, "durationSeconds": 3600, "gpuProducts": products or ["A100-80GB"]}
    return httpx.post(url + "/v1/jobs", json=body, headers={"Idempotency-Key": key}, timeout=30)


def test_keys_resent_while_a_member_is_down_after_a_redis_loss_never_make_a_second_job(
    sim: Simulation, tmp_path: Path, worker_ray: WorkerRay
) -> None:
    port = redis_process.free_port()
    server = redis_process.spawn(tmp_path, port)  # no persistence: it comes back empty
    b = BrokerProcess(
        _config(sim, tmp_path, server.url, "pending", lost_after=120), tmp_path / "b.log", ray=worker_ray
    )
    try:
        b.wait_serving()
        ids = {f"dup-{i}": _submit(b.url, f"dup-{i}", f"dup-{i}", duration=3600) for i in range(2)}
        for job_id in ids.values():
            wait_for(_state_is(b, job_id, "RUNNING"), timeout=60, interval=0.5, what=f"{job_id} RUNNING")
        clusters = {b.get(f"/v1/jobs/{job_id}")["cluster"] for job_id in ids.values()}
        _down_and_seen(b, sim, clusters)  # not listed from a Job cache that has not yet seen it go
        redis_process.stop(server.process)
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


def _live_jobs_where_up(sim: Simulation, job_id: str, down: set[str]) -> list[str]:
    """The Jobs of a job id in the member clusters that answer (what runs where the broker can see)."""
    found = []
    for name in sim.cluster_names():
        if name in down:
            continue
        api = config.new_client_from_config(str(sim.kubeconfig_path(name)), persist_config=False)  # type: ignore[no-untyped-call]
        jobs: Any = client.BatchV1Api(api).list_namespaced_job(
            "default", label_selector=f"gpufed.io/job-id={job_id}"
        )
        found += [f"{name}/{j.metadata.name}" for j in jobs.items]
        api.close()
    return found


def test_a_cluster_declared_lost_lets_resent_keys_through_and_one_job_is_kept_when_it_returns(
    sim: Simulation, tmp_path: Path, worker_ray: WorkerRay
) -> None:
    """Case 2, the other half: the down cluster is declared lost (clusterLostSeconds 4), so a re-sent key
    makes a new job elsewhere; when the cluster returns with the original Job, the rebuild restores it and
    one of the two is cancelled, both jobs' events say so, and never are both RUNNING. The one kept is the
    one that can stay where it runs (issue 48 finding 7): the newer while the returning cluster is still
    fenced, else the older; either way it keeps the attempt it ran, the work does not start again."""
    port = redis_process.free_port()
    server = redis_process.spawn(tmp_path, port)
    b = BrokerProcess(
        _config(sim, tmp_path, server.url, "lostkeys", lost_after=4), tmp_path / "b.log", ray=worker_ray
    )
    keys = ("back-0", "back-1")
    try:
        b.wait_serving()
        originals = {k: _submit(b.url, k, k, duration=3600) for k in keys}
        for job_id in originals.values():
            wait_for(_state_is(b, job_id, "RUNNING"), timeout=60, interval=0.5, what=f"{job_id} RUNNING")
        down = {b.get(f"/v1/jobs/{job_id}")["cluster"] for job_id in originals.values()}
        attempts = {job_id: b.get(f"/v1/jobs/{job_id}")["attempt"] for job_id in originals.values()}
        _down_and_seen(b, sim, down)
        redis_process.stop(server.process)
        server = redis_process.spawn(tmp_path, port)

        def made_anew(key: str) -> bool:
            r = _resend(b.url, key, products=["A100-80GB", "H100-80GB"])
            assert r.status_code in (201, 503), r.text  # held back (pending), or a new job once lost
            return r.status_code == 201

        for key in keys:
            wait_for(functools.partial(made_anew, key), timeout=90, interval=0.5, what=f"{key}: a new job")
        newer = {k: _resend(b.url, k).json()["id"] for k in keys}  # the key names the new job now
        assert set(newer.values()).isdisjoint(originals.values())
        for key, job_id in newer.items():
            wait_for(
                _state_is(b, job_id, "RUNNING"), timeout=60, interval=0.5, what=f"{key}: {job_id} RUNNING"
            )
            attempts[job_id] = b.get(f"/v1/jobs/{job_id}")["attempt"]
            assert _live_jobs_where_up(sim, job_id, down) != []
            assert _live_jobs_where_up(sim, originals[key], down) == []  # before it returns: one runs here
        for cluster in down:
            sim.faults(cluster).up()

        winners: dict[str, tuple[str, str]] = {}  # key -> (kept, cancelled)

        def reconciled(key: str) -> bool:
            old = b.get(f"/v1/jobs/{originals[key]}")
            new = b.get(f"/v1/jobs/{newer[key]}")
            assert not old.get("state") == new.get("state") == "RUNNING", (old, new)  # never both
            if {old.get("state"), new.get("state")} != {"CANCELLED", "RUNNING"}:
                return False
            pair = (
                (originals[key], newer[key])
                if old.get("state") == "RUNNING"
                else (newer[key], originals[key])
            )
            if _resend(b.url, key).json().get("id") != pair[0]:
                return False
            winners[key] = pair
            return True

        for key in keys:
            wait_for(functools.partial(reconciled, key), timeout=120, interval=0.5, what=f"{key}: one kept")
        for key in keys:
            kept_id, cancelled_id = winners[key]
            cancelled = b.get(f"/v1/jobs/{cancelled_id}/events")
            kept = b.get(f"/v1/jobs/{kept_id}/events")
            assert any("duplicate" in e["reason"] and kept_id in e["reason"] for e in _items(cancelled))
            assert any(e["reason"].startswith("kept:") and cancelled_id in e["reason"] for e in _items(kept))
            assert b.get(f"/v1/jobs/{kept_id}")["attempt"] == attempts[kept_id]  # it did not start again
            wait_for(
                lambda c=cancelled_id: _jobs_in_clusters(sim, c) == [],  # type: ignore[misc]
                timeout=60,
                interval=0.5,
                what=f"{cancelled_id}'s Job deleted",
            )
            assert len(_jobs_in_clusters(sim, kept_id)) == 1
    finally:
        b.stop()
        redis_process.stop(server.process)


def _items(body: Any) -> list[dict[str, Any]]:
    return list(body["items"] if isinstance(body, dict) else body)
