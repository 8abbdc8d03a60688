"""Issue 44's acceptance on real parts: kubesim's demo fleet over HTTPS (its dcgm-exporter pods, XID faults
with the device plugin's and the workload's reactions), the broker as `gpufed serve` runs it (Ray pollers,
Redis, auth on), the GPU health read through the API server's pod proxy, or through a REAL Prometheus
(/usr/bin/prometheus) scraping kubesim, and a node condition written with real kubectl.

`kubesim fault onprem-a --xid NODE:3:79` on the node where a checkpointing 8-GPU job runs (the demo's
onprem-a has three whole-GPU A100 nodes): the fleet view shows GPU 3 of that node unhealthy with XID 79,
the cluster's allocatable and free A100s drop by one, the job runs again on another node from its
checkpoint and its events name the XID, and a new 8-GPU job is never placed on that node while the fault
lasts. On onprem-b (24 H100s): XID 13 quarantines nothing, and XID 79 on five GPUs stops at the circuit
breaker's cap (20%: 4 of 24) and raises its alert (fleet view, metric, cluster event).
Deadlines are generous polls (a loaded 2-core host); the times are measured in benchmarks/, not here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from broker.app import main as composition
from broker.config.settings import load_fleet_config
from broker.workload.manifest import JOB_ID_LABEL, job_id_label_value
from kubesim.controllers.checkpoints import ANN_CHECKPOINT_EVERY, ANN_CHECKPOINT_SECONDS
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import free_port, wait_for
from tests.demo_broker import demo_config, every_cluster_healthy
from tests.kubectl_cli import run_kubectl

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS = Path("/usr/bin/prometheus")
SPEED = 10.0
MOVES = "onprem-a"  # 3 whole-GPU DGX-A100 nodes (and a MIG one): an 8-GPU job has somewhere to go
CLUSTER = "onprem-b"  # 3 DGX-H100 nodes: 24 H100s, the breaker's default 20% caps quarantine at 4
XID79 = "XID 79 (GPU has fallen off the bus)"
HEALTH = {"intervalSeconds": 1, "recoverAfterSeconds": 5}


def _prometheus(sim: Simulation, work: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A real Prometheus scraping every cluster's DCGM series (kubesim's federation endpoint)."""
    jobs = []
    for name in sim.cluster_names():
        jobs.append(
            {
                "job_name": f"dcgm-{name}",
                "scheme": "https",
                "honor_labels": True,
                "metrics_path": "/prometheus/federate",
                "params": {"match[]": ['{__name__=~"DCGM_.+"}']},
                "authorization": {"credentials": sim.token(name)},
                "tls_config": {"ca_file": str(sim.ca_path(name))},
                "static_configs": [
                    {
                        "targets": [urllib.parse.urlsplit(sim.server_url(name)).netloc],
                        "labels": {"cluster": name},
                    }
                ],
            }
        )
    config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": jobs}
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    proc = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(work / "prometheus.log").open("wb"),
    )
    return proc, f"http://127.0.0.1:{port}"


class Fleet:
    def __init__(self, sim: Simulation, url: str, auth: dict[str, str], kubectl_cache: Path) -> None:
        self.sim, self.url, self.auth, self.kcache = sim, url, auth, kubectl_cache

    def get(self, path: str) -> Any:
        r = httpx.get(f"{self.url}{path}", timeout=10, headers=self.auth)
        assert r.status_code == 200, r.text
        return r.json()

    def cluster(self, name: str = CLUSTER, nodes: bool = False) -> dict[str, Any]:
        body = self.get("/v1/fleet" + ("?nodes=true" if nodes else ""))
        return next(c for c in body["clusters"] if c["cluster"] == name)

    def gpus(self, cluster: str = MOVES, product: str = "A100-80GB") -> tuple[int, int]:
        """(free, allocatable) whole GPUs of the product in the cluster, as the fleet view says."""
        p = next(p for p in self.cluster(cluster)["products"] if p["product"] == product)
        return p["free"], p["allocatable"]

    def node(self, name: str, cluster: str = CLUSTER) -> dict[str, Any] | None:
        detail = self.cluster(cluster, nodes=True).get("nodeDetail") or {"items": []}
        return next((n for n in detail["items"] if n["name"] == name), None)

    def faults(self, node: str, cluster: str = CLUSTER) -> dict[int | None, dict[str, Any]]:
        row = self.node(node, cluster)
        return {f["gpu"]: f for f in (row or {}).get("gpuFaults", [])}

    def submit(self, name: str, checkpoint: bool = True) -> str:
        body: dict[str, Any] = {
            "name": name,
            "gpus": 8,
            "gpuProducts": ["A100-80GB"],
            "durationSeconds": 6000,
        }
        if checkpoint:
            body["checkpoint"] = {"gracePeriodSeconds": 30}
            body["podAnnotations"] = {ANN_CHECKPOINT_SECONDS: "5", ANN_CHECKPOINT_EVERY: "20"}
        r = httpx.post(f"{self.url}/v1/jobs", json=body, timeout=10, headers=self.auth)
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def cluster_events(self, cluster: str) -> list[dict[str, Any]]:
        items = self.get("/v1/clusters?events=20")["items"]
        return list(next(c for c in items if c["name"] == cluster)["events"])

    def job(self, job_id: str) -> dict[str, Any]:
        body: dict[str, Any] = self.get(f"/v1/jobs/{job_id}")
        return body

    def events(self, job_id: str) -> list[str]:
        return [e["reason"] for e in self.get(f"/v1/jobs/{job_id}/events")["items"]]

    def cancel(self, *job_ids: str) -> None:
        for j in job_ids:
            httpx.delete(f"{self.url}/v1/jobs/{j}", timeout=10, headers=self.auth)

    def pod(self, job_id: str, attempt: int) -> dict[str, Any] | None:
        """The attempt's pod, as kubesim holds it (any cluster)."""
        for c in self.sim.cluster_names():
            for pod in self.sim.call(lambda c=c: self.sim.store(c).list("pods")[0]):
                labels = pod["metadata"].get("labels") or {}
                if labels.get(JOB_ID_LABEL) == job_id_label_value(job_id) and labels.get(
                    "gpufed.io/attempt"
                ) == str(attempt):
                    return dict(pod)
        return None

    def running_on(self, job_id: str, attempt: int) -> str:
        def node() -> str | None:
            j = self.job(job_id)
            pod = self.pod(job_id, attempt) if j["state"] == "RUNNING" and j["attempt"] == attempt else None
            name = (pod or {}).get("spec", {}).get("nodeName")
            return str(name) if name else None

        try:
            return str(wait_for(node, 120, interval=0.5, what=f"{job_id} attempt {attempt} running"))
        except BaseException:
            print(
                "job:", self.job(job_id), "\nevents:", "\n".join(self.events(job_id))
            )  # the why, in the report
            raise

    def xid(self, node: str, gpu: int, code: int, cluster: str = MOVES) -> None:
        """`kubesim fault CLUSTER --xid NODE:GPU:CODE`, the CLI an operator types."""
        out = subprocess.run(
            [str(Path(sys.executable).parent / "kubesim"), "fault", cluster, "--xid", f"{node}:{gpu}:{code}",
             "--admin", self.sim.admin_url],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr + out.stdout


def _fleet(path_kind: str, tmp: pytest.TempPathFactory, redis_url: str) -> Iterator[Fleet]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    work = tmp.mktemp(f"gpu-faults-{path_kind}")
    with Simulation(fleet, work / "sim", speed=SPEED) as sim:
        cfg_path, auth = demo_config(
            sim, work, redis_url, f"gpufed-gpu-{path_kind}", {"clusterLostSeconds": 10}
        )
        doc = yaml.safe_load(cfg_path.read_text())
        prom: subprocess.Popen[bytes] | None = None
        if path_kind == "prometheus":
            if not PROMETHEUS.is_file():
                pytest.fail(f"{PROMETHEUS} is missing: run `make setup`; this test does not skip")
            prom, prom_url = _prometheus(sim, work)
        for c in doc["clusters"]:
            c["gpuHealth"] = {**HEALTH, "breaker": {"share": 0.5}} if c["name"] == MOVES else dict(HEALTH)
            if prom is not None:
                c["metrics"] = {"prometheusUrl": prom_url, "match": f'cluster="{c["name"]}"'}
        cfg_path.write_text(yaml.safe_dump(doc, sort_keys=False))
        port = free_port()
        try:
            with composition.running_broker(load_fleet_config(cfg_path), port=port):
                url = f"http://127.0.0.1:{port}"
                wait_for(lambda: every_cluster_healthy(url, auth, 3), 120, what="every cluster healthy")
                ready = Fleet(sim, url, auth, work / "kcache")
                # ready when the broker has read each cluster's DCGM series (through Prometheus: after its
                # first scrape): before that a pod's death by a GPU fault cannot be told from its own
                wait_for(
                    lambda: all(ready.cluster(c)["gpuHealth"]["observed"] for c in (MOVES, CLUSTER)),
                    60,
                    what="the GPU health of both on-prem clusters read",
                )
                yield ready
        finally:
            if prom is not None:
                prom.terminate()
                prom.wait(timeout=30)
                shutil.rmtree(work / "data", ignore_errors=True)


@pytest.fixture(scope="module", params=["pod-proxy", "prometheus"])
def fleet(
    request: pytest.FixtureRequest,
    redis_url: str,
    ray_session: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Fleet]:
    yield from _fleet(str(request.param), tmp_path_factory, redis_url)


def test_a_fatal_xid_moves_the_job_off_and_keeps_new_jobs_off_the_node(fleet: Fleet) -> None:
    free0, alloc0 = fleet.gpus()
    a = fleet.submit("train-a")
    node = fleet.running_on(a, 1)
    wait_for(lambda: fleet.gpus()[0] == free0 - 8, 60, what="the job's 8 GPUs counted")
    wait_for(
        lambda: (
            "gpufed.io/checkpoint" in ((fleet.pod(a, 1) or {}).get("metadata", {}).get("annotations") or {})
        ),
        60,
        what="the job's first periodic checkpoint",
    )

    fleet.xid(node, 3, 79)
    gpu3: dict[str, Any] = wait_for(lambda: fleet.faults(node, MOVES).get(3), 60, what="GPU 3 in the view")  # type: ignore[assignment]
    assert gpu3["state"] in ("unhealthy", "recovering") and gpu3["xid"] == 79 and gpu3["reason"] == XID79
    assert gpu3["quarantined"] and gpu3["since"] > 0
    wait_for(lambda: fleet.gpus()[1] == alloc0 - 1, 60, what="allocatable A100 down by exactly one")

    # the job runs again on another node, from its checkpoint, and says why it moved
    moved_to = fleet.running_on(a, 2)
    assert moved_to != node
    job = fleet.job(a)
    assert job["resumeFrom"], job
    env = {e["name"]: e.get("value") for e in fleet.pod(a, 2)["spec"]["containers"][0].get("env", [])}  # type: ignore[index]
    assert env.get("GPUFED_RESUME_FROM") == job["resumeFrom"]
    assert any(f"GPU 3 of node {node}: {XID79}" in e for e in fleet.events(a)), fleet.events(a)
    wait_for(lambda: fleet.gpus()[0] == free0 - 8 - 1, 60, what="free A100 down by one (and the job's 8)")

    # new 8-GPU jobs: the one full node left takes one; the next does not go to the faulted node's 7
    b = fleet.submit("train-b", checkpoint=False)
    assert fleet.running_on(b, 1) not in (node, moved_to)
    c = fleet.submit("train-c", checkpoint=False)
    wait_for(lambda: f"best: 7 on {MOVES}" in fleet.job(c)["reason"], 60, what="train-c waiting: 7 at most")
    assert fleet.job(c)["state"] == "QUEUED" and fleet.pod(c, 1) is None
    fleet.cancel(a, b, c)


def test_application_xids_quarantine_nothing_and_five_faults_stop_at_the_breaker(fleet: Fleet) -> None:
    nodes = sorted(n["name"] for n in fleet.cluster(CLUSTER, nodes=True)["nodeDetail"]["items"])
    fleet.xid(nodes[0], 1, 13, CLUSTER)
    for node, gpu in [(nodes[0], 0), (nodes[0], 4), (nodes[1], 0), (nodes[1], 4), (nodes[2], 0)]:
        fleet.xid(node, gpu, 79, CLUSTER)
    wait_for(lambda: len(fleet.faults(nodes[2])) == 1, 60, what="the last fatal XID in the fleet view")
    assert 1 not in fleet.faults(nodes[0]), "XID 13 is the application's, not the GPU's"
    health: dict[str, Any] = wait_for(  # type: ignore[assignment]
        lambda: (h := fleet.cluster()["gpuHealth"])["breakerOpen"] and h, 60, what="the circuit breaker open"
    )
    per_gpu = [f for f in health["faults"] if f["gpu"] is not None]
    assert len(per_gpu) == 5 and sum(f["quarantined"] for f in per_gpu) == 4
    assert "cap 4" in health["breakerReason"]
    metrics = httpx.get(f"{fleet.url}/metrics", timeout=10, headers=fleet.auth).text
    assert 'gpufed_gpu_breaker_open{cluster="onprem-b"} 1.0' in metrics
    wait_for(
        lambda: any("circuit breaker open" in e["reason"] for e in fleet.cluster_events(CLUSTER)),
        60,
        what="the breaker's cluster event",
    )


def test_a_node_condition_set_with_kubectl_takes_the_node_out(fleet: Fleet) -> None:
    items = fleet.cluster(MOVES, nodes=True)["nodeDetail"]["items"]
    node = next(n["name"] for n in items if n["wholeAllocatable"] and not n["gpuFaults"])
    patch = {"status": {"conditions": [{"type": "GpuXidError", "status": "True", "reason": "XID48",
                                         "message": "XID 48 on GPU 2"}]}}  # fmt: skip
    run_kubectl(
        "patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(patch),
        kubeconfig=fleet.sim.kubeconfig_path(MOVES), cache=fleet.kcache,
    )  # fmt: skip
    row = wait_for(
        lambda: (
            (r := fleet.node(node, MOVES))
            and r["offersNothing"]
            and r["offersNothing"].startswith("GPU health")
            and r
        ),
        60,
        what="the node out of the fleet for its condition",
    )
    assert row["offersNothing"] == "GPU health quarantine: node condition GpuXidError=True (XID 48 on GPU 2)"  # type: ignore[index]
    assert fleet.faults(node, MOVES)[None]["reason"].startswith("node condition GpuXidError=True")
