"""NVLink cliques on real parts: kubesim's GB200 NVL72 racks over HTTPS (kubesim/fleets/nvl72.yaml), a
private Redis, Ray pollers, the broker's HTTP API, and the real kubectl reading where the pods landed.

Both clusters are declared `computeDomains: true` and `workloadApi: true`: every gang gets a
ComputeDomain whose channel kubesim allocates only inside one clique, and a Workload gang (all pods
bound or none). Four gangs of 4-GPU pods with `topology.nvlinkClique: required` on cluster nvl-a (two
racks of 18): 8 pods, then 8 more (best fit: the same rack, so the other stays whole), then 12 (the
whole rack), then 8 with 8 nodes free in the cluster but 2 + 6 in two racks: it waits rather than
splitting, its reason naming the best clique. Every running gang has all its pods on nodes of one
clique, and its ComputeDomain is Ready over exactly those nodes. Cancelling a gang deletes its domain
and lets the waiting one run in one rack; a gang on nvl-b whose cluster is lost is re-placed on nvl-a
only once a clique there takes it whole.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from adapters.kube_gateway import KubeGateway
from broker.app import main as composition
from broker.config.settings import load_fleet_config
from broker.core.model import ClusterTraits, JobRequest, Placement
from broker.core.topology import CLIQUE_LABEL, NvlinkClique
from broker.workload.manifest import build_workload, job_id_label_value, workload_name
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import admin_tokens, free_port, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
AUTH: dict[str, str] = {}
KUBECTL = REPO / "tools" / "bin" / "kubectl"
RACK1 = "5b0e6a43-8f0c-4d0e-9a3c-1f2e3d4c5b6a.1"
RACK2 = "5b0e6a43-8f0c-4d0e-9a3c-1f2e3d4c5b6a.2"
GB300_RACK = "0c1d2e3f-4a5b-4c6d-8e7f-8091a2b3c4d5.1"
DOMAINS = "computedomains.resource.nvidia.com"
LOST_AFTER = 6


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "nvl72.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("nvl-kubeconfigs"), speed=20.0) as s:
        yield s


@pytest.fixture(scope="module")
def broker_url(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("nvl-broker")
    doc: dict[str, Any] = {
        "clusters": [
            {
                "name": name,
                "kubeconfig": str(sim.kubeconfig_path(name)),
                "computeDomains": True,
                "workloadApi": True,
            }
            for name in ("nvl-a", "nvl-b")
        ],
        "settings": {
            "redisUrl": redis_url,
            "redisPrefix": "gpufed-nvl",
            "clusterLostSeconds": LOST_AFTER,
            "sweepIntervalSeconds": 2,
        },
    }
    tokens, header = admin_tokens(workdir)
    doc["auth"] = {"tokensFile": str(tokens)}
    AUTH.update(header)
    path = workdir / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc))
    port = free_port()
    with composition.running_broker(load_fleet_config(path), port=port):
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _cliques(url, "nvl-a") == 2, timeout=60, what="both racks of nvl-a in its summary")
        yield url


def _cliques(url: str, cluster: str) -> int:
    clusters: list[dict[str, Any]] = httpx.get(f"{url}/v1/fleet", headers=AUTH).json()["clusters"]
    found: dict[str, Any] = next((c for c in clusters if c["cluster"] == cluster), {})
    return len(found.get("cliques", []))


def _kubectl(sim: Simulation, cluster: str, *args: str) -> Any:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing at {KUBECTL}: `make setup` installs it; these tests do not skip")
    env = {**os.environ, "KUBECONFIG": str(sim.kubeconfig_path(cluster))}
    out = subprocess.run(
        [str(KUBECTL), *args, "-o", "json"], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _spec(name: str, pods: int, products: tuple[str, ...] = ("GB200",)) -> dict[str, Any]:
    return {
        "name": name,
        "gpus": 4,
        "pods": pods,
        "gpuProducts": list(products),
        "topology": {"nvlinkClique": "required"},
        "durationSeconds": 86400,
    }


def _submit(url: str, name: str, pods: int, products: tuple[str, ...] = ("GB200",)) -> str:
    spec = _spec(name, pods, products)
    r = httpx.post(f"{url}/v1/jobs", json=spec, headers=AUTH)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _explain_a(url: str, pods: int) -> dict[str, Any]:
    """nvl-a's verdict in a dry run (POST /v1/explain, what `gpufed explain` shows) of a gang."""
    body = httpx.post(f"{url}/v1/explain", json=_spec("dry", pods), headers=AUTH).json()
    verdict: dict[str, Any] = next(c for c in body["clusters"] if c["cluster"] == "nvl-a")
    return verdict


def _settled(url: str, pods: int, clique: str) -> None:
    """Wait until the broker would put the next gang into `clique`. The previous gang's reservation
    is held until a summary newer than its pods is published (service._settle): meanwhile its nodes
    count twice, and the broker is pessimistic, not wrong."""

    def chosen() -> bool:
        option = _explain_a(url, pods).get("option") or {}
        return option.get("clique") == clique

    wait_for(chosen, timeout=30, what=f"a gang of {pods} to fit best in {clique}")


def _job(url: str, job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/v1/jobs/{job_id}", headers=AUTH).json()
    return body


def _running_cliques(sim: Simulation, url: str, job_id: str, pods: int, cluster: str = "nvl-a") -> set[str]:
    """The cliques of the nodes the job's pods run on, once all `pods` run; and its ComputeDomain (made
    by the broker, its channel allocated by kubesim) is Ready over exactly those nodes and cliques."""
    wait_for(
        lambda: (j := _job(url, job_id))["state"] == "RUNNING" and j["cluster"] == cluster,
        timeout=90,
        what=f"{job_id} RUNNING in {cluster}",
    )
    selector = f"gpufed.io/job-id={job_id_label_value(job_id)}"

    def bound() -> list[str]:
        items = _kubectl(sim, cluster, "get", "pods", "-A", "-l", selector)["items"]
        nodes = [p["spec"].get("nodeName") for p in items if p["status"].get("phase") == "Running"]
        return nodes if len(nodes) == pods and all(nodes) else []

    nodes = wait_for(bound, timeout=60, what=f"{pods} pods of {job_id} running")
    assert isinstance(nodes, list)
    labels = {
        n["metadata"]["name"]: n["metadata"]["labels"]
        for n in _kubectl(sim, cluster, "get", "nodes")["items"]
    }
    cliques = {labels[n].get(CLIQUE_LABEL, "") for n in nodes}

    def ready() -> dict[str, Any] | None:
        items = _kubectl(sim, cluster, "get", DOMAINS, "-A", "-l", selector)["items"]
        live = [d for d in items if (d.get("status") or {}).get("status") == "Ready"]
        return live[0] if len(items) == 1 and live else None

    domain = wait_for(ready, timeout=30, what=f"the ComputeDomain of {job_id} Ready")
    assert isinstance(domain, dict)
    assert domain["spec"]["numNodes"] == pods
    assert sorted(n["name"] for n in domain["status"]["nodes"]) == sorted(nodes)
    assert {n["cliqueID"] for n in domain["status"]["nodes"]} == cliques
    gangs = _kubectl(sim, cluster, "get", "workloads.scheduling.k8s.io", "-A", "-l", selector)["items"]
    assert [g["spec"]["podGroups"][0]["policy"]["gang"]["minCount"] for g in gangs] == [pods]
    return cliques


def _gone(sim: Simulation, cluster: str, job_id: str) -> bool:
    """No ComputeDomain, channel template or Workload of the job is left in the cluster."""
    selector = f"gpufed.io/job-id={job_id_label_value(job_id)}"
    if _kubectl(sim, cluster, "get", DOMAINS, "-A", "-l", selector)["items"]:
        return False
    channels = {f"{workload_name(job_id, attempt)}-channel" for attempt in range(4)}
    templates = _kubectl(sim, cluster, "get", "resourceclaimtemplates.resource.k8s.io", "-A")["items"]
    workloads = _kubectl(sim, cluster, "get", "workloads.scheduling.k8s.io", "-A", "-l", selector)["items"]
    return not workloads and not any(t["metadata"]["name"] in channels for t in templates)


def test_gangs_run_in_one_clique_best_fit_and_a_split_gang_waits(sim: Simulation, broker_url: str) -> None:
    first = _submit(broker_url, "first", 8)
    assert _running_cliques(sim, broker_url, first, 8) == {RACK1}  # both racks free: the first by name
    _settled(broker_url, 8, RACK1)  # best fit: rack 1 (10 free) before rack 2 (18), kept whole
    second = _submit(broker_url, "second", 8)
    assert _running_cliques(sim, broker_url, second, 8) == {RACK1}  # best fit: rack 2 stays whole
    _settled(broker_url, 12, RACK2)
    third = _submit(broker_url, "third", 12)
    assert _running_cliques(sim, broker_url, third, 12) == {RACK2}
    assert _job(broker_url, third)["placement"]["clique"] == RACK2
    # 8 free nodes in nvl-a, but 2 in rack 1 and 6 in rack 2: the gang waits rather than splitting
    wanted = f"no NVLink clique with 8 nodes of 4 free GB200 (best: 6 in {RACK2})"
    wait_for(lambda: wanted in _explain_a(broker_url, 8)["rejection"]["reason"], timeout=30, what=wanted)
    fourth = _submit(broker_url, "fourth", 8)
    wait_for(
        lambda: wanted in _job(broker_url, fourth)["reason"], timeout=30, what="the verdict naming rack 2"
    )
    assert _job(broker_url, fourth)["state"] == "QUEUED"


def test_the_compute_domain_is_owned_by_its_job_and_goes_with_it(sim: Simulation) -> None:
    """Level 2's objects through the real gateway on kubesim: the ComputeDomain is created before the
    Job, gets an ownerReference to it, and the garbage collector deletes it with the Job."""
    placement = Placement(
        "nvl-a", "GB200", "nvidia.com/gpu", 4, 2, 50, gfd_products=("NVIDIA-GB200",), clique=RACK1
    )
    job = JobRequest("cd", gpus_per_pod=4, pods=2, nvlink_clique=NvlinkClique.REQUIRED)
    traits = ClusterTraits("nvl-a", compute_domains=True)
    w = build_workload("jcd", 0, job, placement, traits)
    gateway = KubeGateway.from_kubeconfigs({"nvl-a": (sim.kubeconfig_path("nvl-a"), None)})
    gateway.create_workload("nvl-a", w.job, w.companions)
    domain = _kubectl(sim, "nvl-a", "get", "computedomains.resource.nvidia.com", w.name, "-n", w.namespace)
    job_uid = _kubectl(sim, "nvl-a", "get", "jobs", w.name, "-n", w.namespace)["metadata"]["uid"]
    assert [(r["kind"], r["uid"]) for r in domain["metadata"]["ownerReferences"]] == [("Job", job_uid)]
    assert domain["spec"]["channel"]["resourceClaimTemplate"]["name"] == f"{w.name}-channel"

    # the ComputeDomain controller makes the channel template on its next tick, as NVIDIA's driver does
    def templates() -> list[dict[str, Any]]:
        items = _kubectl(sim, "nvl-a", "get", "resourceclaimtemplates.resource.k8s.io", "-n", w.namespace)
        return [t for t in items["items"] if t["metadata"]["name"] == f"{w.name}-channel"]

    wait_for(lambda: bool(templates()), timeout=30, what="the channel template made for the ComputeDomain")
    request = templates()[0]["spec"]["spec"]["devices"]["requests"][0]
    assert request["exactly"]["deviceClassName"] == "compute-domain-default-channel.nvidia.com"

    _kubectl_delete(sim, "nvl-a", "jobs", w.name, w.namespace)

    def gone() -> bool:
        items = _kubectl(sim, "nvl-a", "get", "computedomains.resource.nvidia.com", "-n", w.namespace)[
            "items"
        ]
        return not any(i["metadata"]["name"] == w.name for i in items)

    wait_for(gone, timeout=30, what="the ComputeDomain deleted with its Job")
    wait_for(lambda: _gone(sim, "nvl-a", "jcd"), timeout=30, what="its channel template deleted with it")


def _kubectl_delete(sim: Simulation, cluster: str, kind: str, name: str, namespace: str) -> None:
    env = {**os.environ, "KUBECONFIG": str(sim.kubeconfig_path(cluster))}
    out = subprocess.run(
        [str(KUBECTL), "delete", kind, name, "-n", namespace, "--wait=false"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


def _cancel(url: str, job_id: str) -> None:
    r = httpx.delete(f"{url}/v1/jobs/{job_id}", headers=AUTH)
    assert r.status_code == 200, r.text


def _job_id(url: str, name: str) -> str:
    items: list[dict[str, Any]] = httpx.get(f"{url}/v1/jobs", headers=AUTH).json()["items"]
    return str(next(j["id"] for j in items if j["name"] == name))


def test_a_cancelled_gang_takes_its_domain_along_and_the_waiting_gang_runs_in_one_rack(
    sim: Simulation, broker_url: str
) -> None:
    """After the first test: rack 1 holds `first` and `second` (2 nodes free), rack 2 `third` (6
    free) and `fourth` waits. Cancelling `second` deletes its ComputeDomain, channel template and
    Workload; `fourth` then runs whole in rack 1 (10 free), never over both racks."""
    second, fourth = _job_id(broker_url, "second"), _job_id(broker_url, "fourth")
    _cancel(broker_url, second)
    wait_for(
        lambda: _gone(sim, "nvl-a", second), timeout=30, what="second's domain, template and Workload gone"
    )
    assert _running_cliques(sim, broker_url, fourth, 8) == {RACK1}


def test_failover_from_a_lost_cluster_keeps_the_gang_in_one_clique(sim: Simulation, broker_url: str) -> None:
    """A GB200-or-GB300 gang of 8 runs on nvl-b (nvl-a has no clique with 8 free: 2 + 6). nvl-b is
    lost: the gang is requeued and waits rather than splitting over nvl-a's racks; once `third`
    leaves rack 2 it runs there, every pod in rack 2, with a new ComputeDomain."""
    mover = _submit(broker_url, "mover", 8, ("GB200", "GB300"))
    assert _running_cliques(sim, broker_url, mover, 8, cluster="nvl-b") == {GB300_RACK}
    sim.faults("nvl-b").set(down=True)
    try:
        wanted = f"no NVLink clique with 8 nodes of 4 free GB200 (best: 6 in {RACK2})"
        wait_for(
            lambda: (j := _job(broker_url, mover))["state"] == "QUEUED" and wanted in j["reason"],
            timeout=60,
            what="the gang requeued off nvl-b, waiting for a whole clique on nvl-a",
        )
        _cancel(broker_url, _job_id(broker_url, "third"))
        assert _running_cliques(sim, broker_url, mover, 8) == {RACK2}
        assert _job(broker_url, mover)["attempt"] == 2
    finally:
        sim.faults("nvl-b").clear()
