"""kubesim with the real kubectl binary (tools/bin/kubectl), pointed at a cluster by its kubeconfig."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for

pytestmark = pytest.mark.integration

KUBECTL = Path(__file__).resolve().parents[2] / "tools" / "bin" / "kubectl"
CLUSTER = "sim-000"
NODES = 4

JOB_YAML = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: kubectl-job
  namespace: default
  labels: {app: demo}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: busybox:1.36
        resources:
          limits: {nvidia.com/gpu: 2}
"""


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(
            f"kubectl is missing: expected an executable at {KUBECTL} (the project's tool install puts "
            "kubectl there); these tests need the real binary and do not skip"
        )
    with Simulation(
        synthetic_fleet(1, NODES), tmp_path_factory.mktemp("kubesim-kubectl"), controllers=False
    ) as s:
        yield s


@pytest.fixture(scope="module")
def kubectl(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Any:
    cache = tmp_path_factory.mktemp("kubectl-cache")
    env = {**os.environ, "KUBECONFIG": str(sim.kubeconfig_path(CLUSTER)), "HOME": str(cache)}

    def run(*args: str, stdin: str | None = None, timeout: float = 30, check: bool = True) -> str:
        proc = subprocess.run(
            [str(KUBECTL), "--cache-dir", str(cache), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
            )
        return proc.stdout + proc.stderr

    return run


def store_get(sim: Simulation, key: str, ns: str, name: str) -> dict[str, Any] | None:
    return sim.call(lambda: sim.store(CLUSTER).find(key, ns, name))  # type: ignore[no-any-return]


def test_get_nodes(kubectl: Any) -> None:
    out = kubectl("get", "nodes")
    lines = out.strip().splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert len(lines) == NODES + 1
    assert all(line.split()[1] == "Ready" for line in lines[1:])
    assert "nvidia.com/gpu.product=" in kubectl("get", "nodes", "--show-labels")
    wide = kubectl("get", "nodes", "-o", "wide")
    assert "INTERNAL-IP" in wide.splitlines()[0]


def test_describe_node(sim: Simulation, kubectl: Any) -> None:
    node = kubectl("get", "nodes", "-o", "name").splitlines()[0].removeprefix("node/")
    out = kubectl("describe", "node", node)
    assert f"Name:               {node}" in out
    assert "nvidia.com/gpu.product=" in out
    assert "Allocated resources:" in out and "nvidia.com/gpu" in out
    assert "Kubelet Version:" in out


def test_create_get_jobs_label_and_delete(sim: Simulation, kubectl: Any, tmp_path: Path) -> None:
    manifest = tmp_path / "job.yaml"
    manifest.write_text(JOB_YAML)
    assert "job.batch/kubectl-job created" in kubectl("create", "-f", str(manifest))
    job = store_get(sim, "jobs.batch", "default", "kubectl-job")
    assert job is not None and job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] == {
        "nvidia.com/gpu": "2"
    }

    out = kubectl("get", "jobs", "-A")
    header, *rows = out.strip().splitlines()
    assert header.split()[:3] == ["NAMESPACE", "NAME", "STATUS"]
    assert any(r.split()[:2] == ["default", "kubectl-job"] for r in rows)

    assert "labeled" in kubectl("label", "job", "kubectl-job", "team=vision")
    assert store_get(sim, "jobs.batch", "default", "kubectl-job")["metadata"]["labels"]["team"] == "vision"  # type: ignore[index]
    assert "kubectl-job" in kubectl("get", "jobs", "-l", "team=vision")

    already = kubectl("create", "-f", str(manifest), check=False)
    assert "AlreadyExists" in already or "already exists" in already

    assert 'job.batch "kubectl-job" deleted' in kubectl("delete", "job", "kubectl-job")
    assert store_get(sim, "jobs.batch", "default", "kubectl-job") is None
    assert "NotFound" in kubectl("get", "job", "kubectl-job", check=False)


def test_label_and_cordon_node(sim: Simulation, kubectl: Any) -> None:
    node = kubectl("get", "nodes", "-o", "name").splitlines()[-1].removeprefix("node/")
    assert "labeled" in kubectl("label", "node", node, "gpufed.io/maintenance=true")
    assert "cordoned" in kubectl("cordon", node)
    stored = store_get(sim, "nodes", "", node)
    assert stored is not None
    assert stored["metadata"]["labels"]["gpufed.io/maintenance"] == "true"
    assert stored["spec"]["unschedulable"] is True
    assert stored["status"]["allocatable"]  # a main-resource patch keeps the node's status
    row = next(r for r in kubectl("get", "nodes").splitlines() if r.startswith(node))
    assert row.split()[1] == "Ready,SchedulingDisabled"
    kubectl("uncordon", node)
    kubectl("label", "node", node, "gpufed.io/maintenance-")
    stored = store_get(sim, "nodes", "", node)
    assert stored is not None and not stored["spec"].get("unschedulable")
    assert "gpufed.io/maintenance" not in stored["metadata"]["labels"]


def test_get_pods_watch_sees_an_event(sim: Simulation, kubectl: Any) -> None:
    result: dict[str, str] = {}

    def watch() -> None:
        result["out"] = kubectl(
            "get", "pods", "-n", "default", "-w", "--request-timeout=5s", check=False, timeout=20
        )

    api = sim.api(CLUSTER)
    t = threading.Thread(target=watch)
    t.start()
    # kubectl lists, then watches from the list's resourceVersion: once a watch is open the pod comes as
    # its events (were it made sooner, the list would show it Pending all the same)
    wait_for(lambda: api.watch_count > 0, timeout=60, what="kubectl's watch open")
    kubectl("run", "watched-pod", "--image=busybox", "--restart=Never")
    kubectl("label", "pod", "watched-pod", "seen=yes")
    t.join(25)
    rows = [r.split() for r in result["out"].splitlines() if r.startswith("watched-pod")]
    assert len(rows) >= 2, result["out"]
    assert rows[0][:3] == ["watched-pod", "0/1", "Pending"]
    kubectl("delete", "pod", "watched-pod")
