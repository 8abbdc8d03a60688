"""End to end on real parts: HTTP endpoint -> placement -> Job in a kubesim cluster -> status back.

Three simulated member clusters (kubesim's demo fleet, over real HTTPS), a private Redis, Ray started
once for the session, the broker's poller actor, control loop and HTTP API on a free port. The Job the
broker creates is read back with the official kubernetes client, as an operator would see it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client, config
from prometheus_client.parser import text_string_to_metric_families

from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for
from tests.demo_broker import demo_broker
from tests.k8s_fields import labels_of, present

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
# The demo config runs with auth on: the admin token of its tokens.yaml, set by the broker fixture.
AUTH: dict[str, str] = {}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=50.0) as s:
        yield s


@pytest.fixture(scope="module")
def broker_url(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with demo_broker(sim, tmp_path_factory.mktemp("broker"), redis_url, "gpufed-skeleton") as broker:
        AUTH.update(broker.auth)
        yield broker.url


def _batch_api(sim: Simulation, cluster: str) -> client.BatchV1Api:
    api = config.new_client_from_config(  # type: ignore[no-untyped-call]
        str(sim.kubeconfig_path(cluster)), persist_config=False
    )
    return client.BatchV1Api(api)


def _job(url: str, job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/v1/jobs/{job_id}", headers=AUTH).json()
    return body


def test_a_submitted_job_runs_in_the_chosen_cluster_with_its_hints_and_succeeds(
    sim: Simulation, broker_url: str
) -> None:
    spec = {"name": "skeleton-h100", "gpus": 8, "gpuProducts": ["H100-80GB"], "durationSeconds": 60}
    r = httpx.post(f"{broker_url}/v1/jobs", json=spec, headers=AUTH)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]

    placed = wait_for(
        lambda: (j := _job(broker_url, job_id))["state"] != "QUEUED" and j, timeout=30, what="placement"
    )
    assert isinstance(placed, dict)
    assert placed["cluster"] == "onprem-b", placed  # the only cluster with H100-80GB nodes
    assert placed["placement"]["resourceName"] == "nvidia.com/gpu"

    jobs = _batch_api(sim, "onprem-b").list_namespaced_job(
        "default", label_selector=f"gpufed.io/job-id={job_id}"
    )
    assert len(jobs.items) == 1
    k8s_job = jobs.items[0]
    assert labels_of(k8s_job)["gpufed.io/attempt"] == "1"
    # a finished Job leaves the member on its own (kubesim's TTL-after-finished controller deletes it:
    # test_kubesim_lifecycle); default finishedJobTtlSeconds, one hour
    assert present(k8s_job.spec, "job spec").ttl_seconds_after_finished == 3600
    template = present(k8s_job.spec, "job spec").template
    pod = present(template.spec, "pod template spec")
    resources = present(pod.containers[0].resources, "container resources")
    assert present(resources.limits, "limits")["nvidia.com/gpu"] == "8"
    assert present(resources.requests, "requests")["nvidia.com/gpu"] == "8"
    assert present(pod.node_selector, "nodeSelector")["nvidia.com/gpu.product"].startswith("NVIDIA-H100")
    assert any(t.key == "nvidia.com/gpu" for t in pod.tolerations or [])
    assert labels_of(template)["gpufed.io/job-id"] == job_id

    done = wait_for(
        lambda: (j := _job(broker_url, job_id))["state"] in ("SUCCEEDED", "FAILED") and j,
        timeout=120,
        what="the job to finish",
    )
    assert isinstance(done, dict)
    assert done["state"] == "SUCCEEDED", done["reason"]
    states = [
        e["state"] for e in httpx.get(f"{broker_url}/v1/jobs/{job_id}/events", headers=AUTH).json()["items"]
    ]
    assert states[0] == "QUEUED" and states[-1] == "SUCCEEDED" and "PLACED" in states


def test_a_job_that_fits_nowhere_stays_queued_with_a_readable_reason(broker_url: str) -> None:
    r = httpx.post(f"{broker_url}/v1/jobs", json={"name": "too-big", "gpus": 16}, headers=AUTH)
    assert r.status_code == 201
    job_id = r.json()["id"]
    job = wait_for(
        lambda: "clusters are available" in (j := _job(broker_url, job_id))["reason"] and j,
        timeout=30,
        what="a diagnosis",
    )
    assert isinstance(job, dict)
    assert job["state"] == "QUEUED"
    assert job["reason"].startswith("0/3 clusters are available:")
    assert "16" in job["reason"]


def test_bad_submission_is_refused_with_the_field_named(broker_url: str) -> None:
    r = httpx.post(f"{broker_url}/v1/jobs", json={"name": "Bad Name!", "gpus": -1}, headers=AUTH)
    assert r.status_code == 422
    fields = {f["field"] for f in r.json()["fields"]}
    assert {"name", "gpus"} <= fields


def test_same_idempotency_key_returns_the_same_job(broker_url: str) -> None:
    spec = {"name": "idem", "gpus": 1, "gpuProducts": ["A100-80GB"], "durationSeconds": 30}
    headers = {"Idempotency-Key": "skeleton-idem-1"}
    first = httpx.post(f"{broker_url}/v1/jobs", json=spec, headers={**headers, **AUTH})
    second = httpx.post(f"{broker_url}/v1/jobs", json=spec, headers={**headers, **AUTH})
    assert first.status_code == 201 and second.status_code == 200
    assert first.json()["id"] == second.json()["id"]


def test_cancel_deletes_the_workload_from_its_cluster(sim: Simulation, broker_url: str) -> None:
    spec = {"name": "to-cancel", "gpus": 1, "gpuProducts": ["A100-80GB"], "durationSeconds": 100000}
    job_id = httpx.post(f"{broker_url}/v1/jobs", json=spec, headers=AUTH).json()["id"]
    placed = wait_for(
        lambda: (j := _job(broker_url, job_id))["state"] in ("ADMITTED", "RUNNING") and j,
        timeout=30,
        what="the job to start",
    )
    assert isinstance(placed, dict)
    batch = _batch_api(sim, placed["cluster"])
    selector = f"gpufed.io/job-id={job_id}"
    assert len(batch.list_namespaced_job("default", label_selector=selector).items) == 1

    r = httpx.delete(f"{broker_url}/v1/jobs/{job_id}", headers=AUTH)
    assert r.status_code == 200 and r.json()["state"] == "CANCELLED"
    wait_for(
        lambda: not batch.list_namespaced_job("default", label_selector=selector).items,
        timeout=30,
        what="the Job to be deleted from the member cluster",
    )
    again = httpx.delete(f"{broker_url}/v1/jobs/{job_id}", headers=AUTH)
    assert again.status_code == 409


def test_explain_shows_every_clusters_verdict_without_placing(broker_url: str) -> None:
    r = httpx.post(
        f"{broker_url}/v1/explain",
        json={"name": "what-if", "gpus": 4, "gpuProducts": ["H200-141GB"]},
        headers=AUTH,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["placed"] is False
    assert "burst not allowed" in body["message"]
    assert {c["cluster"] for c in body["clusters"]} == {"onprem-a", "onprem-b", "cloud-burst"}
    cloud = next(c for c in body["clusters"] if c["cluster"] == "cloud-burst")
    assert cloud["rejection"] == {
        "plugin": "burst",
        "reason": "burst not allowed",
        "code": "UNSCHEDULABLE_AND_UNRESOLVABLE",
        "best": None,
    }
    with_burst = httpx.post(
        f"{broker_url}/v1/explain",
        json={"name": "what-if", "gpus": 4, "gpuProducts": ["H200-141GB"], "allowBurst": True},
        headers=AUTH,
    ).json()
    assert with_burst["placed"] is True and with_burst["placement"]["cluster"] == "cloud-burst"
    names = [j["name"] for j in httpx.get(f"{broker_url}/v1/jobs", headers=AUTH).json()["items"]]
    assert "what-if" not in names


def test_metrics_expose_fleet_capacity_for_prometheus(broker_url: str) -> None:
    # right after start a cluster's first summaries may still be filling in (run alone, this test is first)
    want = 'gpufed_gpus_allocatable{cluster="onprem-b",product="H100-80GB"} 24'

    def page_with_h100() -> str | None:
        page = httpx.get(f"{broker_url}/metrics", headers=AUTH).text
        return page if want in page else None

    text = wait_for(
        page_with_h100,
        timeout=30,
        what="onprem-b's H100 nodes in the metrics",
    )
    assert isinstance(text, str)
    assert "# TYPE gpufed_gpus_free gauge" in text
    assert 'gpufed_gpus_allocatable{cluster="onprem-b",product="H100-80GB"} 24' in text
    assert 'gpufed_cluster_healthy{cluster="cloud-burst"} 1' in text
    assert 'gpufed_bad_nodes{cluster="onprem-a"} 0' in text

    # the pollers' event-to-Redis freshness, a real histogram per cluster, as Prometheus parses it: a job
    # makes watch events (its pods) that the pollers carry to Redis
    r = httpx.post(
        f"{broker_url}/v1/jobs",
        json={"name": "metrics-probe", "gpus": 1, "gpuProducts": ["A100-80GB"], "durationSeconds": 5},
        headers=AUTH,
    )
    assert r.status_code == 201, r.text

    def lag_family() -> Any:  # a prometheus_client Metric
        page = httpx.get(f"{broker_url}/metrics", headers=AUTH).text
        fam = {f.name: f for f in text_string_to_metric_families(page)}["gpufed_event_to_redis_seconds"]
        return fam if fam.samples else None

    lag: Any = wait_for(lag_family, timeout=30, what="an event-to-Redis observation")
    assert lag.type == "histogram"
    clusters = {s.labels["cluster"] for s in lag.samples}
    assert clusters <= {"onprem-a", "onprem-b", "cloud-burst"} and clusters
    for cluster in clusters:
        buckets = [s for s in lag.samples if s.name.endswith("_bucket") and s.labels["cluster"] == cluster]
        assert buckets[-1].labels["le"] == "+Inf"
        counts = [s.value for s in buckets]
        assert counts == sorted(counts) and counts[-1] >= 1  # cumulative, at least one write measured


def test_gpu_products_are_checked_and_spelled_canonically(broker_url: str) -> None:
    r = httpx.post(
        f"{broker_url}/v1/jobs", json={"name": "typo", "gpus": 1, "gpuProducts": ["H10"]}, headers=AUTH
    )
    assert r.status_code == 422
    assert r.json()["fields"][0]["field"] == "gpuProducts[0]"
    assert "did you mean H100-80GB or H100-NVL-94GB?" in r.json()["message"]  # and the known names listed
    r = httpx.post(
        f"{broker_url}/v1/jobs", json={"name": "bad-mig", "mig": {"profile": "5g.50gb"}}, headers=AUTH
    )
    assert r.status_code == 422 and r.json()["fields"][0]["field"] == "mig.profile"
    r = httpx.post(
        f"{broker_url}/v1/jobs",
        json={"name": "lower", "gpus": 1, "gpuProducts": ["a100-80gb"], "durationSeconds": 10},
        headers=AUTH,
    )
    assert r.status_code == 201
    job_id = r.json()["id"]
    placed = wait_for(lambda: (j := _job(broker_url, job_id))["cluster"] and j, timeout=30, what="placement")
    assert isinstance(placed, dict) and placed["cluster"] == "onprem-a"


def test_fleet_node_detail_says_what_each_node_offers_and_why_not(broker_url: str) -> None:
    def tables() -> dict[str, Any] | None:
        body: dict[str, Any] = httpx.get(
            f"{broker_url}/v1/fleet", params={"nodes": "true"}, headers=AUTH
        ).json()
        detail = {c["cluster"]: c["nodeDetail"] for c in body["clusters"]}
        return detail if all(d is not None for d in detail.values()) else None

    detail = wait_for(tables, timeout=30, what="the pollers' node tables in Redis")
    assert isinstance(detail, dict)
    a = {n["name"]: n for n in detail["onprem-a"]["items"]}
    assert len(a) == 4 and {n["product"] for n in a.values()} == {"A100-80GB"}
    mig_nodes = [n for n in a.values() if n["mig"]]
    assert len(mig_nodes) == 1 and mig_nodes[0]["migStrategy"] == "mixed"
    assert all(len(n["numa"]) == 2 for n in a.values() if not n["mig"])
    b = detail["onprem-b"]["items"]
    assert all("nvidia.com/gpu=present:NoSchedule" in n["taints"] for n in b)
    assert all(n["offersNothing"] is None or n["offersNothing"].startswith("all ") for n in b)

    # without nodes=true the summary carries no node table; the fleet-wide demand is beside the capacity
    plain = httpx.get(f"{broker_url}/v1/fleet", headers=AUTH).json()
    assert all("nodeDetail" not in c for c in plain["clusters"])
    products = {p["product"]: p for p in plain["products"]}
    assert products["H100-80GB"]["allocatable"] == 24 and "queued" in products["H100-80GB"]
    assert all("sharedFree" in p for c in plain["clusters"] for p in c["products"])

    cli = subprocess.run(
        [str(REPO / ".venv" / "bin" / "gpufed"), "fleet", "--nodes", "--server", broker_url],
        env={**os.environ, "GPUFED_TOKEN": AUTH["Authorization"].removeprefix("Bearer ")},  # the CLI's token
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    assert "onprem-a: GPU nodes" in cli.stdout and "queued demand" in cli.stdout
