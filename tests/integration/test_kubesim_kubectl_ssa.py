"""Server-side apply against kubesim with the real kubectl: re-apply is a no-op, changes and removals of
labels work, conflicts name the manager, --force-conflicts takes over, diff --server-side shows the change."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from typing import Any

import pytest

from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.kubectl_cli import KUBECTL, run_kubectl

pytestmark = pytest.mark.integration

CLUSTER = "sim-000"

JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: ssa-job
  namespace: default
  labels: {app: demo, tier: gold}
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

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: ssa-pod
  namespace: default
  labels: {app: demo}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox:1.36
    resources:
      limits: {cpu: 1, memory: 1Gi}
"""


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing at {KUBECTL}: run `make setup`; these tests do not skip")
    with Simulation(synthetic_fleet(1, 2), tmp_path_factory.mktemp("kubesim-ssa"), controllers=False) as s:
        yield s


@pytest.fixture(scope="module")
def kubectl(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Any:
    cache = tmp_path_factory.mktemp("kubectl-cache")
    return functools.partial(run_kubectl, kubeconfig=sim.kubeconfig_path(CLUSTER), cache=cache)


def stored(sim: Simulation, key: str, name: str) -> dict[str, Any]:
    obj = sim.call(lambda: sim.store(CLUSTER).find(key, "default", name))
    assert obj is not None, f"{key} {name} is not stored"
    return obj  # type: ignore[no-any-return]


def test_apply_twice_is_a_no_op_for_a_job_and_a_pod(sim: Simulation, kubectl: Any) -> None:
    for manifest, key, name in ((JOB, "jobs.batch", "ssa-job"), (POD, "pods", "ssa-pod")):
        assert "serverside-applied" in kubectl("apply", "--server-side", "-f", "-", stdin=manifest)
        first = stored(sim, key, name)
        out = kubectl("apply", "--server-side", "-f", "-", stdin=manifest)
        assert "serverside-applied" in out and "immutable" not in out
        again = stored(sim, key, name)
        assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        managers = [(e["manager"], e["operation"]) for e in again["metadata"]["managedFields"]]
        assert managers == [("kubectl", "Apply")]
        # nothing to show either
        assert kubectl("diff", "--server-side", "-f", "-", stdin=manifest) == ""


def test_apply_changes_and_removes_labels_and_diff_shows_it(sim: Simulation, kubectl: Any) -> None:
    kubectl("apply", "--server-side", "-f", "-", stdin=JOB)
    changed = JOB.replace("tier: gold", "tier: silver")
    diff = kubectl("diff", "--server-side", "-f", "-", stdin=changed, ok=(1,))
    assert "-    tier: gold" in diff and "+    tier: silver" in diff
    changed_lines = [ln for ln in diff.splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")]
    assert len(changed_lines) == 2, diff  # only the label: a dry run answers the live resourceVersion
    assert stored(sim, "jobs.batch", "ssa-job")["metadata"]["labels"]["tier"] == "gold"  # dry run only

    kubectl("apply", "--server-side", "-f", "-", stdin=changed)
    assert stored(sim, "jobs.batch", "ssa-job")["metadata"]["labels"] == {"app": "demo", "tier": "silver"}
    # a label this manager applied before and applies no more is removed
    kubectl("apply", "--server-side", "-f", "-", stdin=changed.replace(", tier: silver", ""))
    assert stored(sim, "jobs.batch", "ssa-job")["metadata"]["labels"] == {"app": "demo"}
    # annotations too
    annotated = JOB.replace("  labels:", "  annotations: {note: hello}\n  labels:")
    kubectl("apply", "--server-side", "-f", "-", stdin=annotated)
    assert stored(sim, "jobs.batch", "ssa-job")["metadata"]["annotations"] == {"note": "hello"}


def test_conflict_names_the_manager_and_force_takes_over(sim: Simulation, kubectl: Any) -> None:
    kubectl("apply", "--server-side", "-f", "-", stdin=JOB)
    rival = JOB.replace("tier: gold", "tier: bronze")
    out = kubectl("apply", "--server-side", "--field-manager=rival", "-f", "-", stdin=rival, ok=(1,))
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .metadata.labels.tier' in out
    assert stored(sim, "jobs.batch", "ssa-job")["metadata"]["labels"]["tier"] == "gold"

    kubectl("apply", "--server-side", "--field-manager=rival", "--force-conflicts", "-f", "-", stdin=rival)
    job = stored(sim, "jobs.batch", "ssa-job")
    assert job["metadata"]["labels"]["tier"] == "bronze"
    owners = {e["manager"]: e["fieldsV1"] for e in job["metadata"]["managedFields"]}
    assert "f:tier" in owners["rival"]["f:metadata"]["f:labels"]
    assert "f:tier" not in owners["kubectl"]["f:metadata"]["f:labels"]

    # an imperative change (operation Update) is owned too: applying over it conflicts, naming it
    kubectl("label", "job", "ssa-job", "app=other", "--overwrite")
    out = kubectl("apply", "--server-side", "-f", "-", stdin=JOB, ok=(1,))
    assert "Apply failed with 2 conflicts: " in out
    assert 'conflicts with "kubectl-label" using batch/v1 at ' in out and "- .metadata.labels.app" in out
    assert 'conflicts with "rival":\n- .metadata.labels.tier' in out
    kubectl("delete", "job", "ssa-job")
