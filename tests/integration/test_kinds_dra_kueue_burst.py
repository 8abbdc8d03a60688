"""The workload kinds on DRA, Kueue and cloud members, end to end (issue 47): kubesim's fleet
kubesim/fleets/kinds-dra-kueue.yaml over HTTPS, a private Redis, Ray pollers, the broker, real kubectl
and the gpufed CLI.

- a JobSet whose workers ask for 2 GPUs each through their own claim runs on the DRA member with one
  allocated claim per worker pod, through a ResourceClaimTemplate of the workers' role owned by the JobSet;
- on the Kueue member a JobSet gets a Workload with a pod set per role, runs once Kueue admits it, and its
  GPUs show in the ClusterQueue's usage;
- with on-prem full, a JobSet that allows bursting runs on the cloud member, and `gpufed spend` counts it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from broker import cli
from broker.app import main as composition
from broker.config.settings import load_fleet_config
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import admin_tokens, free_port, wait_for
from tests.kubectl_cli import run_kubectl

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
AUTH: dict[str, str] = {}
TOKEN: list[str] = []
CLOUD_PRICE = 6.5


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "kinds-dra-kueue.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kinds-dra"), speed=25.0) as s:
        yield s


@pytest.fixture(scope="module")
def url(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("kinds-dra-broker")
    tokens, header = admin_tokens(workdir)
    AUTH.update(header)
    TOKEN[:] = [header["Authorization"].removeprefix("Bearer ")]
    kube = {name: str(sim.kubeconfig_path(name)) for name in sim.cluster_names()}
    doc = {
        "clusters": [
            {"name": "dra-east", "kubeconfig": kube["dra-east"], "tier": "on-prem"},
            {"name": "kueue-west", "kubeconfig": kube["kueue-west"], "tier": "on-prem",
             "kueue": {"localQueue": "gpu", "clusterQueue": "gpu"}},
            {"name": "cloud-burst", "kubeconfig": kube["cloud-burst"], "tier": "cloud",
             "pricePerGpuHour": {"H200-141GB": CLOUD_PRICE}},
        ],
        "settings": {"redisUrl": redis_url, "redisPrefix": "gpufed-kinds-dra"},
        "auth": {"tokensFile": str(tokens)},
    }  # fmt: skip
    path = workdir / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc))
    port = free_port()
    with composition.running_broker(load_fleet_config(path), port=port) as broker:
        base = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            seen = {s.cluster: s for s in broker.store.observed_summaries()}
            return len(seen) == 3 and all(s.workload_apis_observed and s.products for s in seen.values())

        wait_for(ready, timeout=90, what="every member's capacity and workload APIs read")
        yield base


@pytest.fixture(scope="module")
def kubectl(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., str]:
    cache = tmp_path_factory.mktemp("kubectl")

    def run(cluster: str, *args: str) -> str:
        return run_kubectl(*args, kubeconfig=sim.kubeconfig_path(cluster), cache=cache / cluster)

    return run


def _container(name: str, gpus: int | None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox:1.36", "command": ["sh", "-c", "true"]}
    if gpus:
        c["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return c


def _jobset(name: str, seconds: int, leader_gpus: int | None, **annotations: str) -> dict[str, Any]:
    def role(role: str, pods: int, gpus: int | None) -> dict[str, Any]:
        pod = {"restartPolicy": "Never", "containers": [_container(role, gpus)]}
        job = {"parallelism": pods, "completions": pods, "backoffLimit": 0, "template": {"spec": pod}}
        return {"name": role, "replicas": 1, "template": {"spec": job}}

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": f"{name}-{uuid.uuid4().hex[:6]}",  # unique: a rerun submits again
            "annotations": {"gpufed.io/duration-seconds": str(seconds), **annotations},
        },
        "spec": {"replicatedJobs": [role("leader", 1, leader_gpus), role("workers", 2, 1)]},
    }


def _submit(url: str, obj: dict[str, Any]) -> str:
    r = httpx.post(f"{url}/v1/jobs", json=obj, headers=AUTH, timeout=10)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _job(url: str, job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/v1/jobs/{job_id}", headers=AUTH, timeout=10).json()
    return body


def _wait_state(url: str, job_id: str, *states: str, timeout: float = 90) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def reached() -> bool:
        found[:] = [_job(url, job_id)]
        return found[0]["state"] in states

    wait_for(reached, timeout=timeout, what=f"job {job_id} {'/'.join(states)}")
    return found[0]


def _cancel(url: str, job_id: str) -> None:
    r = httpx.delete(f"{url}/v1/jobs/{job_id}", headers=AUTH, timeout=10)
    assert r.status_code in (200, 202), r.text
    _wait_state(url, job_id, "CANCELLED")


def _get(kubectl: Callable[..., str], cluster: str, *what: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(kubectl(cluster, "get", *what, "-n", "default", "-o", "json"))[
        "items"
    ]
    return items


def test_a_jobset_with_a_claim_in_its_worker_template_runs_on_the_dra_member(
    url: str, kubectl: Callable[..., str]
) -> None:
    js = _jobset("claims", 100000, None, **{"gpufed.io/gpu-products": "H100-80GB"})
    workers = js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]
    workers["metadata"] = {"annotations": {"gpufed.io/claim-gpus": "2"}}
    workers["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "two-h100"}]
    workers["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    job_id = _submit(url, js)
    running = _wait_state(url, job_id, "RUNNING")
    assert running["cluster"] == "dra-east"
    claims = _get(kubectl, "dra-east", "resourceclaims")
    allocated = [c for c in claims if (c.get("status") or {}).get("allocation")]
    assert len(allocated) == 2  # one claim per worker pod, each of 2 GPUs
    assert all(len(c["status"]["allocation"]["devices"]["results"]) == 2 for c in allocated)
    templates = _get(kubectl, "dra-east", "resourceclaimtemplates")
    (template,) = [t for t in templates if t["metadata"]["labels"].get("gpufed.io/role") == "workers"]
    owners = template["metadata"].get("ownerReferences") or []
    assert [(o["kind"], o["name"]) for o in owners] == [("JobSet", running["workload"])]
    pods = [p for p in _get(kubectl, "dra-east", "pods") if p["metadata"]["name"].startswith("gf-")]
    worker_pods = [p for p in pods if "workers" in p["metadata"]["name"]]
    assert len(worker_pods) == 2 and all(p["status"]["phase"] == "Running" for p in worker_pods)
    for p in worker_pods:
        assert p["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == template["metadata"]["name"]
    _cancel(url, job_id)


def test_a_jobset_on_a_kueue_member_runs_once_kueue_admits_it_and_is_charged_to_the_cluster_queue(
    url: str, kubectl: Callable[..., str]
) -> None:
    jobsets = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
    since = json.loads(kubectl("kueue-west", "get", "--raw", jobsets))["metadata"]["resourceVersion"]
    job_id = _submit(url, _jobset("queued", 100000, 1, **{"gpufed.io/gpu-products": "A100-80GB"}))
    running = _wait_state(url, job_id, "RUNNING")
    assert running["cluster"] == "kueue-west"
    name = running["workload"]
    # the JobSet as the broker created it, then as Kueue's admission changed it (a watch from before)
    stream = kubectl(
        "kueue-west", "get", "--raw", f"{jobsets}?watch=1&resourceVersion={since}&timeoutSeconds=2"
    )
    seen = [json.loads(line) for line in stream.splitlines() if line.strip()]
    versions = [e["object"] for e in seen if e["object"].get("metadata", {}).get("name") == name]
    assert versions and versions[0]["spec"].get("suspend") is True  # created suspended, with its queue
    assert versions[0]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu"
    assert any(v["spec"].get("suspend") is False for v in versions[1:])  # unsuspended by the admission
    (jobset,) = [j for j in _get(kubectl, "kueue-west", "jobsets") if j["metadata"]["name"] == name]
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu"
    assert jobset["spec"]["suspend"] is False  # admitted
    (workload,) = [
        w
        for w in _get(kubectl, "kueue-west", "workloads.kueue.x-k8s.io")
        if w["metadata"]["ownerReferences"][0]["name"] == name
    ]
    assert workload["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [("leader", 1), ("workers", 2)]
    assert workload["status"]["admission"]["clusterQueue"] == "gpu"
    cq = json.loads(kubectl("kueue-west", "get", "clusterqueue", "gpu", "-o", "json"))
    used = {r["name"]: r["total"] for f in cq["status"]["flavorsUsage"] for r in f["resources"]}
    assert used["nvidia.com/gpu"] == "3"  # the leader's 1 and the workers' 2
    started = [e for e in _get(kubectl, "kueue-west", "events") if e["reason"] == "Started"]
    assert any(e["involvedObject"]["name"] == name and "clusterQueue gpu" in e["message"] for e in started)
    _cancel(url, job_id)

    def released() -> bool:
        cq = json.loads(kubectl("kueue-west", "get", "clusterqueue", "gpu", "-o", "json"))
        return all(r["total"] == "0" for f in cq["status"]["flavorsUsage"] for r in f["resources"])

    wait_for(released, timeout=60, what="the ClusterQueue's quota freed")


def test_a_rayjob_on_a_kueue_member_gets_head_and_worker_pod_sets_and_runs_once_admitted(
    url: str, kubectl: Callable[..., str]
) -> None:
    rj: dict[str, Any] = yaml.safe_load((REPO / "examples" / "rayjob.yaml").read_text())
    rj["metadata"]["name"] = f"ray-{uuid.uuid4().hex[:6]}"
    rj["metadata"]["annotations"].update(
        {"gpufed.io/gpu-products": "A100-80GB", "gpufed.io/duration-seconds": "100000"}
    )
    job_id = _submit(url, rj)
    running = _wait_state(url, job_id, "RUNNING")
    assert running["cluster"] == "kueue-west"
    name = running["workload"]
    (workload,) = [
        w
        for w in _get(kubectl, "kueue-west", "workloads.kueue.x-k8s.io")
        if w["metadata"]["ownerReferences"][0]["name"] == name
    ]
    assert workload["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
    assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [("head", 1), ("gpu", 2)]
    usage = {
        a["name"]: a["resourceUsage"].get("nvidia.com/gpu")
        for a in workload["status"]["admission"]["podSetAssignments"]
    }
    assert usage == {"head": None, "gpu": "2"}  # the workers' GPUs, charged per role
    (rayjob,) = [r for r in _get(kubectl, "kueue-west", "rayjobs") if r["metadata"]["name"] == name]
    assert rayjob["spec"]["suspend"] is False and rayjob["status"]["jobDeploymentStatus"] == "Running"
    _cancel(url, job_id)


def test_a_jobset_that_may_burst_runs_on_the_cloud_member_when_onprem_is_full_and_spend_counts_it(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fillers = [
        _submit(
            url,
            {
                "name": f"fill-h100-{uuid.uuid4().hex[:6]}",
                "gpus": 4,
                "gpuProducts": ["H100-80GB"],
                "durationSeconds": 100000,
            },
        ),
        _submit(
            url,
            {
                "name": f"fill-a100-{uuid.uuid4().hex[:6]}",
                "gpus": 8,
                "gpuProducts": ["A100-80GB"],
                "durationSeconds": 100000,
            },
        ),
    ]
    for f in fillers:
        _wait_state(url, f, "RUNNING")
    burst = _submit(url, _jobset("bursting", 40, 1, **{"gpufed.io/allow-burst": "true"}))
    running = _wait_state(url, burst, "RUNNING", "SUCCEEDED")
    assert running["cluster"] == "cloud-burst"
    _wait_state(url, burst, "SUCCEEDED")
    for f in fillers:
        _cancel(url, f)

    def spent() -> dict[str, Any] | None:
        capsys.readouterr()
        assert cli.run(["spend", "-o", "json", "--server", url, "--token", TOKEN[0]]) == 0
        items = json.loads(capsys.readouterr().out)["items"]
        mine = [t for t in items if t["tenant"] == "default" and t["runs"] >= 1]
        return mine[0] if mine else None

    row = wait_for(spent, timeout=60, what="the cloud run in gpufed spend")
    assert isinstance(row, dict)
    assert row["runs"] >= 1 and row["gpuHours"] > 0
    # price x GPU-hours (both as the API rounds them), the GPU-hours those of every GPU role's pods
    assert row["spent"] == pytest.approx(CLOUD_PRICE * row["gpuHours"], abs=0.001)
    capsys.readouterr()
    assert cli.run(["spend", "-o", "wide", "--server", url, "--token", TOKEN[0]]) == 0
    table = capsys.readouterr().out
    assert "default" in table and "$" in table
