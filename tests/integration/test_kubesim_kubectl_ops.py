"""kubectl drain (eviction + PodDisruptionBudgets) and kubectl logs (-f bounded) against kubesim with its
controllers running, with the real kubectl binary."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import Any

import pytest

from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for
from tests.kubectl_cli import KUBECTL, run_kubectl

pytestmark = pytest.mark.integration

CLUSTER = "sim-000"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing at {KUBECTL}: run `make setup`; these tests do not skip")
    with Simulation(synthetic_fleet(1, 3), tmp_path_factory.mktemp("kubesim-ops"), controllers=True) as s:
        yield s


@pytest.fixture(scope="module")
def kubectl(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Any:
    cache = tmp_path_factory.mktemp("kubectl-cache")
    return functools.partial(run_kubectl, kubeconfig=sim.kubeconfig_path(CLUSTER), cache=cache)


def pods_on(sim: Simulation, node: str) -> set[str]:
    pods, _ = sim.call(lambda: sim.store(CLUSTER).list("pods", "default"))
    return {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") == node}


PDB = """\
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
"""


def test_drain_evicts_within_the_disruption_budget(sim: Simulation, kubectl: Any) -> None:
    node = f"{CLUSTER}-gpu-2"
    for i in range(3):
        kubectl(
            "run", f"web-{i}", "--image=busybox", "--restart=Never", "--labels=app=web",
            "--annotations=sim.gpufed.io/duration-seconds=3600",
            f'--overrides={{"spec": {{"nodeName": "{node}"}}}}',
        )  # fmt: skip
    kubectl("apply", "-f", "-", stdin=PDB)
    wait_for(
        lambda: kubectl("get", "pdb", "web", "-o", "jsonpath={.status.disruptionsAllowed}") == "1",
        30,
        what="the PDB to allow one disruption (3 running, 2 needed)",
    )
    assert kubectl("get", "pdb", "web").splitlines()[1].split()[:4] == ["web", "2", "N/A", "1"]

    # the budget lets one pod go; the other two are refused with 429 until the drain times out
    out = kubectl("drain", node, "--force", "--grace-period=1", "--timeout=6s", ok=(1,), timeout=90)
    assert "Cannot evict pod as it would violate the pod's disruption budget" in out
    assert len(pods_on(sim, node)) == 2
    assert "SchedulingDisabled" in kubectl("get", "node", node)

    # with a budget that tolerates one missing pod at a time the drain finishes
    kubectl(
        "patch", "pdb", "web", "--type=merge", "-p", '{"spec": {"minAvailable": null, "maxUnavailable": 1}}'
    )
    out = kubectl("drain", node, "--force", "--grace-period=1", "--timeout=60s", timeout=90)
    assert f"node/{node} drained" in out
    assert pods_on(sim, node) == set()
    kubectl("uncordon", node)


def test_eviction_without_a_budget_and_protobuf_delete(sim: Simulation, kubectl: Any) -> None:
    kubectl(
        "run",
        "lonely",
        "--image=busybox",
        "--restart=Never",
        "--annotations=sim.gpufed.io/duration-seconds=3600",
    )
    wait_for(
        lambda: pods_on(sim, "") == set() and "Running" in kubectl("get", "pod", "lonely"),
        30,
        what="lonely running",
    )
    # kubectl sends DeleteOptions as protobuf: kubesim decodes it (gracePeriodSeconds=0 deletes at once)
    assert 'pod "lonely" force deleted' in kubectl("delete", "pod", "lonely", "--grace-period=0", "--force")
    assert "NotFound" in kubectl("get", "pod", "lonely", ok=(1,))


def test_logs_and_follow_end_when_the_container_exits(kubectl: Any) -> None:
    kubectl(
        "run",
        "talker",
        "--image=busybox:1.36",
        "--restart=Never",
        "--annotations=sim.gpufed.io/duration-seconds=12",
    )
    followed = kubectl("logs", "-f", "talker", timeout=60)  # returns when the container exits
    lines = followed.strip().splitlines()
    assert lines[0].startswith('kubesim: container "talker" started (image busybox:1.36) on node ')
    assert lines[1] == 'kubesim: container "talker" running, 10s elapsed'
    assert lines[-1] == 'kubesim: container "talker" exited with code 0 (Completed)'
    assert kubectl("logs", "talker") == followed
    assert kubectl("logs", "talker", "--tail=1").strip() == lines[-1]
    stamped = kubectl("logs", "talker", "--timestamps").splitlines()
    assert stamped[0].split(" ", 1)[0].endswith("Z") and stamped[0].split(" ", 1)[1] == lines[0]
    out = kubectl("logs", "talker", "--previous", ok=(1,))
    assert 'previous terminated container "talker" in pod "talker" not found' in out
    # sinceTime / sinceSeconds: the lines written from then on
    second_line_at = stamped[1].split(" ", 1)[0]
    assert kubectl("logs", "talker", f"--since-time={second_line_at}").strip().splitlines() == lines[1:]
    assert kubectl("logs", "talker", "--since=1h") == followed
