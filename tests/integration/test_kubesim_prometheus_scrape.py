"""The real Prometheus (Debian's /usr/bin/prometheus, `make prometheus`) scrapes kubesim: once through the
cluster's federation endpoint (`/prometheus/federate`) and once through the API server's pod proxy to a
dcgm-exporter pod, with the cluster's bearer token and CA. A PromQL query against that Prometheus then
returns kubesim's DCGM series with dcgm-exporter's labels: the formats are the real ones."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubesim.fleet import parse_fleet
from kubesim.sim import Simulation
from tests.conftest import free_port, wait_for

pytestmark = pytest.mark.integration

PROMETHEUS = Path("/usr/bin/prometheus")
CLUSTER = "scraped"
NODE = "scraped-h100-0"
FLEET = {
    "clusters": [
        {
            "name": CLUSTER,
            "region": "eu-west",
            "dcgmExporter": {"enabled": True},
            "nodePools": [{"name": "h100", "count": 1, "gpu": {"product": "H100-80GB"}}],
        }
    ]
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    with Simulation(parse_fleet(FLEET), tmp_path_factory.mktemp("kubesim-scraped")) as s:
        yield s


def exporter_pod(sim: Simulation) -> str:
    def find() -> str | None:
        pods = sim.call(lambda: sim.store(CLUSTER).list("pods", "gpu-operator")[0])
        running = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]
        return running[0] if running else None

    return str(wait_for(find, 30, what="the dcgm-exporter pod to run"))


@pytest.fixture(scope="module")
def prometheus(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not PROMETHEUS.is_file():
        pytest.fail(f"{PROMETHEUS} is missing: run `make prometheus`; this test does not skip")
    work = tmp_path_factory.mktemp("prometheus")
    server = urllib.parse.urlsplit(sim.server_url(CLUSTER)).netloc
    common: dict[str, Any] = {
        "scheme": "https",
        "honor_labels": True,
        "authorization": {"credentials": sim.token(CLUSTER)},
        "tls_config": {"ca_file": str(sim.ca_path(CLUSTER))},
        "static_configs": [{"targets": [server]}],
    }
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "kubesim-federate",
                "metrics_path": "/prometheus/federate",
                "params": {"match[]": ['{__name__=~"DCGM_.+"}']},
                **common,
            },
            {
                "job_name": "dcgm-via-pod-proxy",
                "metrics_path": f"/api/v1/namespaces/gpu-operator/pods/{exporter_pod(sim)}:9400/proxy/metrics",
                **{**common, "honor_labels": False},
            },
        ],
    }
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
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        shutil.rmtree(work / "data", ignore_errors=True)


def query(base: str, promql: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
    except OSError:
        return []  # not up yet
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def test_real_prometheus_scrapes_kubesim_dcgm_series_with_their_real_labels(
    sim: Simulation, prometheus: str
) -> None:
    sim.gpu_xid(CLUSTER, NODE, 3, 79)
    federated = wait_for(
        lambda: query(prometheus, 'DCGM_FI_DEV_XID_ERRORS{job="nvidia-dcgm-exporter", gpu="3"} == 79'),
        60,
        what="Prometheus to have scraped the federated XID 79",
    )
    metric = federated[0]["metric"]  # type: ignore[index]
    assert metric["Hostname"] == NODE and metric["modelName"] == "NVIDIA H100 80GB HBM3"
    assert metric["UUID"].startswith("GPU-") and metric["device"] == "nvidia3"
    assert metric["pci_bus_id"] == "00000000:5D:00.0" and metric["DCGM_FI_DRIVER_VERSION"]
    assert metric["instance"].endswith(":9400"), "honor_labels keeps the exporter's instance"
    total = wait_for(
        lambda: query(prometheus, 'DCGM_EXP_XID_ERRORS_TOTAL{xid="79"}'), 60, what="the XID counter"
    )
    assert total[0]["value"][1] == "1"  # type: ignore[index]
    proxied = wait_for(
        lambda: query(prometheus, 'DCGM_FI_DEV_XID_ERRORS{job="dcgm-via-pod-proxy", gpu="3"} == 79'),
        60,
        what="Prometheus to have scraped the exporter through the pod proxy",
    )
    assert proxied[0]["metric"]["UUID"] == metric["UUID"]  # type: ignore[index]
    temps = query(prometheus, 'count(DCGM_FI_DEV_GPU_TEMP{job="dcgm-via-pod-proxy"})')
    assert temps and temps[0]["value"][1] == "8"
