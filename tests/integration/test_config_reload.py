"""clusters.yaml changed under a running broker, on real parts (kubesim's demo fleet over HTTPS, Redis,
Ray pollers, `gpufed serve`'s composition with its config reload): a cluster added to the file is polled
and placed on, re-declared traits show, a removed cluster is no longer offered, and a file that does not
load changes nothing. No restart in between.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from broker.app import main as composition
from broker.app.demo import write_demo_config
from broker.config.settings import load_fleet_config
from kubesim.fleet import load_fleet
from kubesim.sim import Simulation
from tests.conftest import free_port, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    fleet = load_fleet(REPO / "kubesim" / "fleets" / "demo.yaml")
    with Simulation(fleet, tmp_path_factory.mktemp("kubeconfigs"), speed=20.0) as s:
        yield s


def _clusters(url: str) -> dict[str, dict[str, Any]]:
    r = httpx.get(f"{url}/v1/clusters", timeout=10)
    return {c["name"]: c for c in r.json()["items"]} if r.status_code == 200 else {}


def _healthy(url: str, names: set[str]) -> bool:
    listed = _clusters(url)
    return set(listed) == names and all(c["health"] == "healthy" for c in listed.values())


@contextlib.contextmanager
def _reloading_broker(path: Path) -> Iterator[tuple[composition.Broker, str]]:
    """`gpufed serve`'s composition on clusters.yaml at `path`, reading it again as it changes."""
    port = free_port()
    with composition.running_broker(
        load_fleet_config(path),
        port=port,
        insecure_no_auth=True,
        reload_from=(path, lambda: load_fleet_config(path)),
    ) as broker:
        yield broker, f"http://127.0.0.1:{port}"


def test_clusters_added_redeclared_and_removed_in_the_file_apply_without_a_restart(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path: Path
) -> None:
    kubeconfigs = {name: sim.kubeconfig_path(name) for name in sim.cluster_names()}
    path = write_demo_config(
        tmp_path, kubeconfigs, redis_url, "reload-int", {"configReloadSeconds": 0.2}, auth=False
    )
    full = yaml.safe_load(path.read_text())
    cloud = next(c for c in full["clusters"] if c["name"] == "cloud-burst")

    def write(clusters: list[dict[str, Any]]) -> None:
        path.write_text(yaml.safe_dump({**full, "clusters": clusters}, sort_keys=False))

    onprem = [c for c in full["clusters"] if c["name"] != "cloud-burst"]
    write(onprem)
    with _reloading_broker(path) as (broker, url):
        wait_for(lambda: _healthy(url, {"onprem-a", "onprem-b"}), timeout=90, what="the two on-prem clusters")

        # added: polled, healthy, and a job that only it can take runs there
        write([*onprem, cloud])
        wait_for(
            lambda: _healthy(url, {"onprem-a", "onprem-b", "cloud-burst"}),
            timeout=60,
            what="cloud-burst added from the file, healthy",
        )
        r = httpx.post(
            f"{url}/v1/jobs",
            json={"name": "h200", "gpus": 1, "gpuProducts": ["H200-141GB"], "allowBurst": True},
            timeout=10,
        )
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        wait_for(
            lambda: httpx.get(f"{url}/v1/jobs/{job_id}", timeout=10).json().get("cluster") == "cloud-burst",
            timeout=60,
            what="the H200 job placed on the added cluster",
        )

        # re-declared: the new labels show, nothing restarted
        relabelled = [{**onprem[0], "labels": {"site": "ams-9"}}, onprem[1], cloud]
        write(relabelled)
        wait_for(
            lambda: _clusters(url).get("onprem-a", {}).get("labels") == {"site": "ams-9"},
            timeout=30,
            what="onprem-a's new labels",
        )

        # removed: no longer listed, its capacity no longer in the fleet view
        write([relabelled[0], cloud])
        wait_for(
            lambda: set(_clusters(url)) == {"onprem-a", "cloud-burst"}, timeout=30, what="onprem-b removed"
        )
        wait_for(
            lambda: (
                "onprem-b"
                not in {c["cluster"] for c in httpx.get(f"{url}/v1/fleet", timeout=10).json()["clusters"]}
            ),
            timeout=30,
            what="onprem-b's summary gone from the fleet view",
        )

        # a file that does not load: the running members stay, the error is kept for the operator
        path.write_text("clusters: [unclosed")
        assert broker.reloader is not None
        wait_for(
            lambda: broker.reloader is not None and broker.reloader.last_error, timeout=30, what="the error"
        )
        assert set(_clusters(url)) == {"onprem-a", "cloud-burst"}


def test_a_cluster_pointed_at_a_new_kubeconfig_is_reconnected_without_a_restart(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path: Path
) -> None:
    """A rotated credential: onprem-a's kubeconfig holds a token the cluster rejects (forbidden); the file
    is pointed at a kubeconfig with a good one, and the running broker re-connects (new client, Job
    watch and poller) and places there again."""
    kubeconfigs = {name: sim.kubeconfig_path(name) for name in sim.cluster_names()}
    stale = yaml.safe_load(kubeconfigs["onprem-a"].read_text())
    for user in stale["users"]:
        user["user"]["token"] = "revoked-" + user["user"]["token"][:8]
    stale_path = tmp_path / "onprem-a-stale.kubeconfig"
    stale_path.write_text(yaml.safe_dump(stale))
    path = write_demo_config(
        tmp_path,
        {**kubeconfigs, "onprem-a": stale_path},
        redis_url,
        "reconnect-int",
        {"configReloadSeconds": 0.2},
        auth=False,
    )
    with _reloading_broker(path) as (_, url):
        wait_for(
            lambda: _clusters(url).get("onprem-a", {}).get("health") == "forbidden",
            timeout=90,
            what="onprem-a forbidden with the revoked token",
        )

        good = yaml.safe_load(path.read_text())
        for c in good["clusters"]:
            if c["name"] == "onprem-a":
                c["kubeconfig"] = str(kubeconfigs["onprem-a"])
        path.write_text(yaml.safe_dump(good, sort_keys=False))
        wait_for(
            lambda: _healthy(url, set(kubeconfigs)), timeout=90, what="onprem-a healthy on the new kubeconfig"
        )

        # creates and status reads go through the new client: a job only onprem-a can take runs there
        r = httpx.post(
            f"{url}/v1/jobs",
            json={"name": "a100", "gpus": 1, "gpuProducts": ["A100-80GB"], "clusters": ["onprem-a"]},
            timeout=10,
        )
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        wait_for(
            lambda: (
                httpx.get(f"{url}/v1/jobs/{job_id}", timeout=10).json()["state"] in ("RUNNING", "SUCCEEDED")
            ),
            timeout=90,
            what="the job RUNNING on the re-connected cluster",
        )
        assert httpx.get(f"{url}/v1/jobs/{job_id}", timeout=10).json()["cluster"] == "onprem-a"
