"""Each simulated cluster counts its requests as a real API server does, `apiserver_request_total{verb,
resource,code}` on its own `/metrics`, read here with the real kubectl (`kubectl get --raw /metrics`):
what one client's list, get and watch requests did to sim-000, and nothing of it on sim-001."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation

pytestmark = pytest.mark.integration

KUBECTL = Path(__file__).resolve().parents[2] / "tools" / "bin" / "kubectl"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing: expected an executable at {KUBECTL} (make setup installs it)")
    with Simulation(
        synthetic_fleet(2, 3), tmp_path_factory.mktemp("kubesim-metrics"), controllers=False
    ) as s:
        yield s


def _kubectl(sim: Simulation, cluster: str, home: Path, *args: str) -> str:
    env = {**os.environ, "KUBECONFIG": str(sim.kubeconfig_path(cluster)), "HOME": str(home)}
    proc = subprocess.run(
        [str(KUBECTL), "--cache-dir", str(home / "cache"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _requests(text: str) -> dict[tuple[str, str, str], float]:
    out: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "apiserver_request_total":
                out[(s.labels["verb"], s.labels["resource"], s.labels["code"])] = s.value
    return out


def test_each_cluster_counts_its_own_requests_by_verb_resource_and_code(
    sim: Simulation, tmp_path: Path
) -> None:
    before = _requests(_kubectl(sim, "sim-000", tmp_path, "get", "--raw", "/metrics"))
    _kubectl(sim, "sim-000", tmp_path, "get", "nodes")
    _kubectl(sim, "sim-000", tmp_path, "get", "jobs.batch", "-A")
    assert (
        subprocess.run(  # a node that is not there: 404, counted as such
            [str(KUBECTL), "get", "node", "no-such-node"],
            env={**os.environ, "KUBECONFIG": str(sim.kubeconfig_path("sim-000")), "HOME": str(tmp_path)},
            capture_output=True,
            timeout=30,
            check=False,
        ).returncode
        != 0
    )
    _kubectl(sim, "sim-000", tmp_path, "get", "pods", "-A", "--watch", "--request-timeout=1s")
    after = _requests(_kubectl(sim, "sim-000", tmp_path, "get", "--raw", "/metrics"))

    def grew(key: tuple[str, str, str]) -> float:
        return after.get(key, 0) - before.get(key, 0)

    assert grew(("list", "nodes", "200")) == 1
    assert grew(("list", "jobs", "200")) == 1
    assert grew(("get", "nodes", "404")) == 1
    assert grew(("watch", "pods", "200")) == 1
    other = _requests(_kubectl(sim, "sim-001", tmp_path, "get", "--raw", "/metrics"))
    assert not [k for k in other if k[1] in ("jobs", "pods") or k[2] == "404"]
