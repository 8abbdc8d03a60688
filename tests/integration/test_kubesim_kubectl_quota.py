"""ResourceQuota and LimitRange admission in kubesim, set and exercised with the real kubectl: quota usage
kept in status, 403 "exceeded quota" with the real message, LimitRange defaults applied, and min, max and
maxLimitRequestRatio refused with the real messages."""

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
NS = "tenant-ml"
LIMITS = f"""\
apiVersion: v1
kind: LimitRange
metadata: {{name: defaults, namespace: {NS}}}
spec:
  limits:
  - type: Container
    default: {{cpu: 500m, memory: 1Gi}}
    defaultRequest: {{cpu: 250m, memory: 512Mi}}
    max: {{cpu: 2, memory: 4Gi}}
    min: {{cpu: 100m}}
"""


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing at {KUBECTL}: run `make setup`; these tests do not skip")
    with Simulation(synthetic_fleet(1, 2), tmp_path_factory.mktemp("kubesim-quota"), controllers=False) as s:
        yield s


@pytest.fixture(scope="module")
def kubectl(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Any:
    cache = tmp_path_factory.mktemp("kubectl-cache")
    run = functools.partial(run_kubectl, kubeconfig=sim.kubeconfig_path(CLUSTER), cache=cache)

    run("create", "namespace", NS)  # a protobuf body: decoded
    return run


def run_pod(kubectl: Any, name: str, resources: str, ok: tuple[int, ...] = (0,)) -> str:
    overrides = (
        f'{{"spec": {{"containers": [{{"name": "{name}", "image": "busybox", "resources": {resources}}}]}}}}'
    )
    out: str = kubectl(
        "run", name, "-n", NS, "--image=busybox", "--restart=Never", f"--overrides={overrides}", ok=ok
    )
    return out


def test_quota_usage_and_exceeded_quota(kubectl: Any) -> None:
    kubectl(
        "create", "quota", "gpu-quota", "-n", NS, "--hard=requests.nvidia.com/gpu=4,pods=3,count/jobs.batch=1"
    )
    assert kubectl("get", "quota", "gpu-quota", "-n", NS).splitlines()[1].split(None, 2)[2].strip() == (
        "count/jobs.batch: 0/1, pods: 0/3, requests.nvidia.com/gpu: 0/4"
    )
    run_pod(kubectl, "train-a", '{"limits": {"nvidia.com/gpu": "3"}}')
    used = kubectl("get", "quota", "gpu-quota", "-n", NS, "-o", "jsonpath={.status.used}")
    assert '"requests.nvidia.com/gpu":"3"' in used and '"pods":"1"' in used

    out = run_pod(kubectl, "train-b", '{"limits": {"nvidia.com/gpu": "2"}}', ok=(1,))
    assert (
        'Error from server (Forbidden): pods "train-b" is forbidden: exceeded quota: gpu-quota, requested: '
        "requests.nvidia.com/gpu=2, used: requests.nvidia.com/gpu=3, limited: requests.nvidia.com/gpu=4"
    ) in out
    assert "NotFound" in kubectl("get", "pod", "train-b", "-n", NS, ok=(1,))

    # object counts: the second Job is refused
    job = f"""\
apiVersion: batch/v1
kind: Job
metadata: {{name: NAME, namespace: {NS}}}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: main, image: busybox, resources: {{limits: {{cpu: 1, memory: 1Gi}}}}}}]
"""
    kubectl("apply", "-f", "-", stdin=job.replace("NAME", "job-1"))
    out = kubectl("apply", "-f", "-", stdin=job.replace("NAME", "job-2"), ok=(1,))
    assert (
        "exceeded quota: gpu-quota, requested: count/jobs.batch=1, used: count/jobs.batch=1, limited: count/jobs.batch=1"
        in out
    )

    # deleting frees the quota at once
    kubectl("delete", "pod", "train-a", "-n", NS)
    used = kubectl("get", "quota", "gpu-quota", "-n", NS, "-o", "jsonpath={.status.used}")
    assert '"requests.nvidia.com/gpu":"0"' in used and '"pods":"0"' in used
    run_pod(kubectl, "train-b", '{"limits": {"nvidia.com/gpu": "2"}}')
    kubectl("delete", "pod", "train-b", "-n", NS)


def test_limit_range_defaults_and_bounds(kubectl: Any) -> None:
    kubectl("apply", "-f", "-", stdin=LIMITS)
    described = kubectl("describe", "limitrange", "defaults", "-n", NS)
    assert "Container   cpu       100m  2    250m             500m" in described

    run_pod(kubectl, "plain", "{}")
    res = kubectl("get", "pod", "plain", "-n", NS, "-o", "jsonpath={.spec.containers[0].resources}")
    assert res == '{"limits":{"cpu":"500m","memory":"1Gi"},"requests":{"cpu":"250m","memory":"512Mi"}}'
    note = kubectl(
        "get", "pod", "plain", "-n", NS, "-o", "jsonpath={.metadata.annotations.kubernetes\\.io/limit-ranger}"
    )
    assert (
        note
        == "LimitRanger plugin set: cpu, memory request for container plain; cpu, memory limit for container plain"
    )
    # a limit without a request keeps the limit as its request
    run_pod(kubectl, "limited", '{"limits": {"cpu": "1"}}')
    res = kubectl(
        "get", "pod", "limited", "-n", NS, "-o", "jsonpath={.spec.containers[0].resources.requests.cpu}"
    )
    assert res == "1"

    out = run_pod(kubectl, "too-big", '{"limits": {"cpu": "4"}}', ok=(1,))
    assert 'pods "too-big" is forbidden: maximum cpu usage per Container is 2, but limit is 4' in out
    out = run_pod(kubectl, "too-small", '{"requests": {"cpu": "50m"}}', ok=(1,))
    assert 'pods "too-small" is forbidden: minimum cpu usage per Container is 100m, but request is 50m' in out
    out = run_pod(
        kubectl, "both", '{"requests": {"cpu": "50m"}, "limits": {"cpu": "3", "memory": "8Gi"}}', ok=(1,)
    )
    assert (
        'pods "both" is forbidden: [minimum cpu usage per Container is 100m, but request is 50m, maximum cpu '
        "usage per Container is 2, but limit is 3, maximum memory usage per Container is 4Gi, but limit is 8Gi]"
    ) in out


def test_limit_range_max_limit_to_request_ratio(kubectl: Any) -> None:
    ns = "tenant-ratio"
    kubectl("create", "namespace", ns)
    ratio = f"""\
apiVersion: v1
kind: LimitRange
metadata: {{name: ratio, namespace: {ns}}}
spec:
  limits:
  - type: Container
    maxLimitRequestRatio: {{memory: 2}}
"""
    kubectl("apply", "-f", "-", stdin=ratio)

    def run(name: str, resources: str, ok: tuple[int, ...] = (0,)) -> str:
        overrides = f'{{"spec": {{"containers": [{{"name": "{name}", "image": "busybox", "resources": {resources}}}]}}}}'
        out: str = kubectl(
            "run", name, "-n", ns, "--image=busybox", "--restart=Never", f"--overrides={overrides}", ok=ok
        )
        return out

    out = run("greedy", '{"requests": {"memory": "1Gi"}, "limits": {"memory": "4Gi"}}', ok=(1,))
    assert (
        'pods "greedy" is forbidden: memory max limit to request ratio per Container is 2, but provided ratio is '
        "4.000000"
    ) in out
    assert "NotFound" in kubectl("get", "pod", "greedy", "-n", ns, ok=(1,))
    out = run("unbounded", '{"requests": {"memory": "1Gi"}}', ok=(1,))
    assert (
        "memory max limit to request ratio per Container is 2, but no limit is specified or limit is 0" in out
    )
    run("modest", '{"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}')
    assert kubectl("get", "pod", "modest", "-n", ns, "-o", "jsonpath={.metadata.name}") == "modest"
