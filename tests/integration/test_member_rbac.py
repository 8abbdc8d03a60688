"""The broker with only the permissions `gpufed rbac` grants, in a kubesim cluster that enforces RBAC.

An operator applies `gpufed rbac --cluster NAME` with real kubectl, points the broker at a kubeconfig
whose token is the printed ServiceAccount's, and expects the whole job path to work: capacity observed,
the job placed, its Job created, followed to SUCCEEDED. Then one grant is taken away (the read-only
ClusterRoleBinding): the cluster must read `forbidden`, with the refused verb and resource named.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from broker.app import main as composition
from broker.config.settings import load_fleet_config
from broker.tenancy.rbac import member_rbac
from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import free_port, poll_for, wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
KUBECTL = REPO / "tools" / "bin" / "kubectl"
SA = "system:serviceaccount:gpufed-system:gpufed-broker"


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    out = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    with Simulation(synthetic_fleet(1, 2), tmp_path_factory.mktemp("kubeconfigs"), speed=50.0) as s:
        yield s


def test_the_broker_runs_the_job_path_with_only_the_printed_permissions(
    sim: Simulation, redis_url: str, ray_session: None, tmp_path: Path
) -> None:
    [cluster] = sim.cluster_names()
    admin = sim.kubeconfig_path(cluster)
    manifests = member_rbac(cluster)
    kubectl(admin, "apply", "-f", "-", stdin=yaml.safe_dump_all(manifests))
    sim.add_user(cluster, SA, ["system:serviceaccounts", "system:serviceaccounts:gpufed-system"])
    # the kubernetes client reads a kubeconfig path with ':' as a list of paths: keep the name plain
    broker_kubeconfig = tmp_path / "gpufed-broker.kubeconfig"
    broker_kubeconfig.write_text(sim.user_kubeconfig_path(cluster, SA).read_text())
    # what the printed permissions allow, as kubectl auth can-i answers it for the broker's identity
    assert kubectl(broker_kubeconfig, "auth", "can-i", "create", "jobs.batch").strip() == "yes"
    denied = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(broker_kubeconfig), "auth", "can-i", "get", "secrets"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert denied.stdout.strip() == "no"

    config = {
        "clusters": [{"name": cluster, "kubeconfig": str(broker_kubeconfig), "tier": "on-prem"}],
        "settings": {
            "redisUrl": redis_url,
            "redisPrefix": "rbac" + str(free_port()),
            "clusterLostSeconds": 6,
        },
    }
    path = tmp_path / "clusters.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    with composition.running_broker(load_fleet_config(path), port=port, insecure_no_auth=True):
        url = f"http://127.0.0.1:{port}"

        def health() -> dict[str, Any]:
            item: dict[str, Any] = httpx.get(f"{url}/v1/clusters", timeout=10).json()["items"][0]
            return item

        wait_for(lambda: health()["health"] == "healthy", timeout=60, what="the cluster healthy")
        r = httpx.post(f"{url}/v1/jobs", json={"name": "least", "gpus": 1, "durationSeconds": 20}, timeout=10)
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        wait_for(
            lambda: httpx.get(f"{url}/v1/jobs/{job_id}", timeout=10).json()["state"] == "SUCCEEDED",
            timeout=90,
            what="the job SUCCEEDED with least privilege",
        )

        # take the read-only grant away: the pollers' lists and watches are refused
        kubectl(admin, "delete", "clusterrolebinding", "gpufed-broker-observer")
        # forbidden at the first refusal; each informer is refused when its open watch ends and it asks
        # again (an API server does not cut a watch when a grant goes), so the reason names more in time
        wait_for(lambda: health()["health"] == "forbidden", timeout=90, what="the cluster forbidden")

        def nodes_refused() -> str | None:
            reason = str(health()["healthReason"])
            return reason if "list/watch nodes" in reason else None

        reason = poll_for("the nodes' informer refused too", nodes_refused, 90, interval=0.25)
        assert "list/watch nodes: forbidden (403)" in reason, reason  # the verbs and the resource
