"""Member-side failures as an operator sees them with the real kubectl against kubesim: an image that can't
be pulled (ErrImagePull, then ImagePullBackOff), a PriorityClass the member lacks (the Job controller's
FailedCreate with the Priority plugin's refusal), a crash loop (CrashLoopBackOff), an unschedulable pod
(kube-scheduler's message with the preemption verdict)."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

from kubesim.fleet import synthetic_fleet
from kubesim.sim import Simulation
from tests.conftest import poll_for
from tests.kubectl_cli import KUBECTL, run_kubectl

pytestmark = pytest.mark.integration

CLUSTER = "sim-000"
BAD = "registry.invalid/team/train:1"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing at {KUBECTL}: run `make setup`; these tests do not skip")
    # 20x simulated time: the kubelet's 10 s back-offs pass in half a second
    with Simulation(synthetic_fleet(1, 2), tmp_path_factory.mktemp("kubesim-fail"), speed=20.0) as s:
        yield s


@pytest.fixture(scope="module")
def kubectl(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Any:
    cache = tmp_path_factory.mktemp("kubectl-cache")
    return functools.partial(run_kubectl, kubeconfig=sim.kubeconfig_path(CLUSTER), cache=cache)


def job_yaml(name: str, *, image: str = "busybox:1.36", gpus: int = 1, extra: str = "", ann: str = "") -> str:
    return f"""\
apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: default}}
spec:
  backoffLimit: 100
  template:
    metadata:
      annotations: {{sim.gpufed.io/duration-seconds: "3600"{ann}}}
    spec:
      restartPolicy: Never
{extra}      containers:
      - name: main
        image: {image}
        resources:
          limits: {{nvidia.com/gpu: {gpus}}}
"""


def pod_line(kubectl: Any, job: str, status: str) -> str | None:
    out = kubectl("get", "pods", "-l", f"job-name={job}", "--no-headers")
    return next((line for line in out.splitlines() if status in line.split()), None)


def test_an_unpullable_image_shows_err_image_pull_then_image_pull_backoff(kubectl: Any) -> None:
    kubectl("apply", "-f", "-", stdin=job_yaml("pull", image=BAD))
    line = poll_for(
        "ImagePullBackOff in kubectl get pods", lambda: pod_line(kubectl, "pull", "ImagePullBackOff"), 30
    )
    assert re.search(r"0/1\s+ImagePullBackOff\s+0", line), line
    pod = line.split()[0]
    described = " ".join(kubectl("describe", "pod", pod).split())
    assert "Status: Pending" in described
    assert "State: Waiting Reason: ImagePullBackOff" in described
    assert (
        f'Failed to pull image "{BAD}": rpc error: code = Unknown desc = failed to pull and unpack image'
        in described
    )
    assert "lookup registry.invalid: no such host" in described
    assert f'Back-off pulling image "{BAD}"' in described
    assert "Error: ImagePullBackOff" in described and "Error: ErrImagePull" in described
    # the kubelet pulls again after its back-off (10 s, 20 s, ... simulated): the pull events repeat

    def pulled_again() -> str | None:
        out = " ".join(kubectl("describe", "pod", pod).split())
        return out if re.search(r"Normal Pulling \S+ \(x[2-9]", out) else None

    poll_for("the pull tried again after the back-off", pulled_again, 30)
    assert pod_line(kubectl, "pull", "Running") is None


def test_a_missing_priority_class_is_a_failed_create_of_the_job(kubectl: Any) -> None:
    kubectl("apply", "-f", "-", stdin=job_yaml("prio", extra="      priorityClassName: production\n"))

    def refused() -> str | None:
        out = kubectl("describe", "job", "prio")
        return out if "FailedCreate" in out else None

    described = " ".join(poll_for("FailedCreate on the Job", refused, 30).split())
    assert (
        "Warning FailedCreate" in described
        and 'job-controller Error creating: pods "prio-" is forbidden: no PriorityClass with name production '
        "was found"
        in described
    ), described
    assert kubectl("get", "pods", "-l", "job-name=prio", "--no-headers").strip() in (
        "",
        "No resources found in default namespace.",
    )


def test_a_crash_looping_container_is_in_crash_loop_backoff(kubectl: Any) -> None:
    crash = (
        job_yaml(
            "crash",
            extra="",
            ann=', sim.gpufed.io/exit-code: "2"',
        )
        .replace('duration-seconds: "3600"', 'duration-seconds: "20"')
        .replace("restartPolicy: Never", "restartPolicy: OnFailure")
    )
    kubectl("apply", "-f", "-", stdin=crash)
    line = poll_for("CrashLoopBackOff", lambda: pod_line(kubectl, "crash", "CrashLoopBackOff"), 30)
    assert re.search(r"0/1\s+CrashLoopBackOff\s+[1-9]", line), line

    def waiting() -> str | None:  # the back-off doubles: describe catches the pod in one soon
        out = " ".join(kubectl("describe", "pod", line.split()[0]).split())
        return out if "State: Waiting Reason: CrashLoopBackOff" in out else None

    described = poll_for("CrashLoopBackOff in kubectl describe", waiting, 30)
    assert "Last State: Terminated Reason: Error Exit Code: 2" in described
    assert "Back-off restarting failed container main in pod" in described


def test_an_unschedulable_pod_carries_the_schedulers_message(kubectl: Any) -> None:
    kubectl("apply", "-f", "-", stdin=job_yaml("huge", gpus=16))
    line = poll_for("a Pending pod", lambda: pod_line(kubectl, "huge", "Pending"), 30)

    def failed_scheduling() -> str | None:
        out = " ".join(kubectl("describe", "pod", line.split()[0]).split())
        return out if "FailedScheduling" in out else None

    described = poll_for("FailedScheduling", failed_scheduling, 30)
    assert (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: "
        "2 No preemption victims found for incoming pod." in described
    ), described
    assert "PodScheduled False" in described
