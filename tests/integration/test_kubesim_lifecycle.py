"""kubesim with its controllers on, through the official client and real kubectl: finalizers, graceful
deletion, the Job controller's failure handling, scheduler preemption and Kueue preemption."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kubesim.fleet import parse_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for

pytestmark = pytest.mark.integration

KUBECTL = Path(__file__).resolve().parents[2] / "tools" / "bin" / "kubectl"
SPEED = 20.0  # simulated seconds per real second
NS = "default"
POOL = {"name": "h", "count": 1, "cpu": "64", "memory": "512Gi", "gpu": {"product": "H100-80GB", "count": 8}}
FLEET = {
    "clusters": [
        {"name": "life", "region": "eu-west", "nodePools": [POOL]},
        {"name": "life-big", "region": "eu-west", "nodePools": [{**POOL, "count": 3}]},
        {
            "name": "queued",
            "region": "eu-west",
            "nodePools": [POOL],
            "kueue": {
                "flavors": [
                    {"name": "h100", "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
                ],
                "clusterQueues": [
                    {
                        "name": "gpu-cq",
                        "preemption": {"withinClusterQueue": "LowerPriority"},
                        "resourceGroups": [
                            {
                                "coveredResources": ["nvidia.com/gpu"],
                                "flavors": [
                                    {
                                        "name": "h100",
                                        "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}],
                                    }
                                ],
                            }
                        ],
                    }
                ],
                "localQueues": [{"name": "gpu", "namespace": NS, "clusterQueue": "gpu-cq"}],
            },
        },
    ]
}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    with Simulation(
        parse_fleet(FLEET, "lifecycle"), tmp_path_factory.mktemp("kubesim-life"), speed=SPEED
    ) as s:
        yield s


def _api(sim: Simulation, cluster: str) -> client.ApiClient:
    cfg = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        str(sim.kubeconfig_path(cluster)), client_configuration=cfg, persist_config=False
    )
    return client.ApiClient(cfg)


@pytest.fixture(scope="module")
def api(sim: Simulation) -> Iterator[client.ApiClient]:
    c = _api(sim, "life")
    yield c
    c.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def batch(api: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api)


@pytest.fixture(scope="module")
def kubectl(sim: Simulation, tmp_path_factory: pytest.TempPathFactory) -> Any:
    if not KUBECTL.is_file() or not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"kubectl is missing at {KUBECTL}: run `make setup`; these tests do not skip")
    home = tmp_path_factory.mktemp("kubectl-home")

    def run(cluster: str, *args: str, stdin: str | None = None, check: bool = True) -> str:
        env = {**os.environ, "KUBECONFIG": str(sim.kubeconfig_path(cluster)), "HOME": str(home)}
        proc = subprocess.run(
            [str(KUBECTL), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"kubectl {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
            )
        return proc.stdout + proc.stderr

    return run


def _gone(read: Any) -> bool:
    try:
        read()
    except ApiException as e:
        return e.status == 404
    return False


def _pod(name: str, gpus: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"sim.gpufed.io/duration-seconds": "100000"}},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
            **spec,
        },
    }


def _job(
    name: str, *, annotations: dict[str, str] | None = None, pod: dict[str, Any] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            **spec,
            "template": {
                "metadata": {"annotations": {"sim.gpufed.io/duration-seconds": "4", **(annotations or {})}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {
                            "name": "main",
                            "image": "trainer:1",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                    **(pod or {}),
                },
            },
        },
    }


def _condition(obj: Any, ctype: str) -> Any:
    for c in obj.status.conditions or ():
        if c.type == ctype and c.status == "True":
            return c
    return None


def _job_condition(batch: client.BatchV1Api, name: str, ctype: str) -> Any:
    return _condition(batch.read_namespaced_job_status(name, NS), ctype)


# ---------------------------------------------------------------------------------------- finalizers


def test_a_pod_with_a_finalizer_terminates_after_its_grace_period_and_stays_until_released(
    core: client.CoreV1Api,
) -> None:
    manifest = _pod("held")
    manifest["metadata"]["finalizers"] = ["example.com/hold"]
    core.create_namespaced_pod(NS, manifest)
    wait_for(lambda: core.read_namespaced_pod("held", NS).status.phase == "Running", 30, what="held running")
    marked = core.delete_namespaced_pod("held", NS)
    assert (
        marked.metadata.deletion_timestamp is not None and marked.metadata.deletion_grace_period_seconds == 5
    )
    wait_for(
        lambda: core.read_namespaced_pod("held", NS).status.phase == "Failed",
        30,
        what="the kubelet to stop it",
    )
    stopped = core.read_namespaced_pod("held", NS)
    assert stopped.metadata.finalizers == ["example.com/hold"]
    assert stopped.status.container_statuses[0].state.terminated.exit_code == 137
    core.patch_namespaced_pod("held", NS, {"metadata": {"finalizers": None}})
    assert _gone(lambda: core.read_namespaced_pod("held", NS))


def test_kubectl_deleting_a_job_with_a_finalizer_leaves_it_until_the_finalizer_goes(kubectl: Any) -> None:
    manifest = _job("kept")
    manifest["metadata"]["finalizers"] = ["example.com/hold"]
    kubectl("life", "create", "-f", "-", stdin=json.dumps(manifest))
    kubectl("life", "delete", "job", "kept", "--wait=false")
    out = kubectl("life", "get", "job", "kept", "-o", "jsonpath={.metadata.deletionTimestamp}")
    assert out.strip()
    kubectl("life", "patch", "job", "kept", "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    missing = kubectl("life", "get", "job", "kept", check=False)
    assert 'jobs.batch "kept" not found' in missing


def test_a_terminating_namespace_refuses_new_content_and_goes_when_emptied(core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "scratch"}})
    manifest = _pod("stuck")
    manifest["metadata"]["finalizers"] = ["example.com/hold"]
    core.create_namespaced_pod("scratch", manifest)
    core.delete_namespace("scratch")
    assert core.read_namespace("scratch").status.phase == "Terminating"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("scratch", _pod("late"))
    assert err.value.status == 403 and "because it is being terminated" in str(err.value.body)
    wait_for(
        lambda: core.read_namespaced_pod("stuck", "scratch").metadata.deletion_timestamp,
        30,
        what="content deleted",
    )
    core.patch_namespaced_pod("stuck", "scratch", {"metadata": {"finalizers": None}})
    wait_for(lambda: _gone(lambda: core.read_namespace("scratch")), 30, what="the namespace to go")


# ---------------------------------------------------------------------------------------- Jobs


def test_job_counters_never_go_down_when_its_pods_are_deleted(
    core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    batch.create_namespaced_job(NS, _job("counted", completions=2, parallelism=2))
    wait_for(lambda: _job_condition(batch, "counted", "Complete"), 30, what="counted complete")
    assert batch.read_namespaced_job_status("counted", NS).status.succeeded == 2
    pods = core.list_namespaced_pod(NS, label_selector="job-name=counted").items
    assert len(pods) == 2 and all(not p.metadata.finalizers for p in pods)  # tracked, then released
    core.delete_collection_namespaced_pod(NS, label_selector="job-name=counted", grace_period_seconds=0)
    wait_for(
        lambda: not core.list_namespaced_pod(NS, label_selector="job-name=counted").items,
        30,
        what="pods gone",
    )
    assert batch.read_namespaced_job_status("counted", NS).status.succeeded == 2


def test_on_failure_restarts_the_container_and_counts_restarts(
    core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    job = _job(
        "restarts", annotations={"sim.gpufed.io/exit-codes": "3,0"}, pod={"restartPolicy": "OnFailure"}
    )
    batch.create_namespaced_job(NS, job)
    wait_for(lambda: _job_condition(batch, "restarts", "Complete"), 60, what="restarts complete")
    (pod,) = core.list_namespaced_pod(NS, label_selector="job-name=restarts").items
    status = pod.status.container_statuses[0]
    assert status.restart_count == 1 and status.last_state.terminated.exit_code == 3
    assert batch.read_namespaced_job_status("restarts", NS).status.failed is None


def test_pod_failure_policy_fail_job_with_kubectl(kubectl: Any) -> None:
    manifest = """\
apiVersion: batch/v1
kind: Job
metadata: {name: pfp}
spec:
  backoffLimit: 6
  podFailurePolicy:
    rules:
    - action: FailJob
      onExitCodes: {containerName: main, operator: In, values: [42]}
    - action: Ignore
      onPodConditions: [{type: DisruptionTarget}]
  template:
    metadata:
      annotations: {sim.gpufed.io/duration-seconds: "2", sim.gpufed.io/exit-code: "42"}
    spec:
      restartPolicy: Never
      containers: [{name: main, image: trainer:1}]
"""
    kubectl("life", "create", "-f", "-", stdin=manifest)
    path = '{.status.conditions[?(@.type=="Failed")].reason}'
    wait_for(
        lambda: kubectl("life", "get", "job", "pfp", "-o", f"jsonpath={path}").strip() == "PodFailurePolicy",
        30,
        what="the FailJob rule",
    )
    message = kubectl(
        "life", "get", "job", "pfp", "-o", 'jsonpath={.status.conditions[?(@.type=="Failed")].message}'
    )
    assert "failed with exit code 42 matching FailJob rule at index 0" in message


def test_backoff_limit_per_index_marks_the_failing_index(batch: client.BatchV1Api) -> None:
    job = _job(
        "per-index",
        annotations={"sim.gpufed.io/index-exit-codes": "1:7"},
        completions=3,
        parallelism=3,
        completionMode="Indexed",
        backoffLimitPerIndex=1,
    )
    batch.create_namespaced_job(NS, job)
    wait_for(lambda: _job_condition(batch, "per-index", "Failed"), 60, what="per-index failed")
    status = batch.read_namespaced_job_status("per-index", NS).status
    assert status.failed_indexes == "1" and status.completed_indexes == "0,2"
    assert _condition(batch.read_namespaced_job_status("per-index", NS), "Failed").reason == "FailedIndexes"


def test_active_deadline_and_ttl_after_finished(batch: client.BatchV1Api) -> None:
    batch.create_namespaced_job(
        NS,
        _job(
            "deadline",
            annotations={"sim.gpufed.io/duration-seconds": "100000"},
            activeDeadlineSeconds=10,
            ttlSecondsAfterFinished=30,
        ),
    )
    wait_for(lambda: _job_condition(batch, "deadline", "Failed"), 30, what="the deadline")
    failed = _job_condition(batch, "deadline", "Failed")
    assert (
        failed.reason == "DeadlineExceeded"
        and failed.message == "Job was active longer than specified deadline"
    )
    wait_for(
        lambda: _gone(lambda: batch.read_namespaced_job("deadline", NS)), 30, what="the TTL to delete it"
    )


# ---------------------------------------------------------------------------------------- preemption


def test_scheduler_preemption_evicts_the_lower_priority_pod(sim: Simulation) -> None:
    api = _api(sim, "life-big")
    core, sched = client.CoreV1Api(api), client.SchedulingV1Api(api)
    for name, value in (("batch-low", 100), ("batch-high", 10000)):
        sched.create_priority_class({"metadata": {"name": name}, "value": value})
    for name, pc in (("bulk-a", "batch-low"), ("bulk-b", "batch-high"), ("bulk-c", "batch-high")):
        core.create_namespaced_pod(NS, _pod(name, gpus=8, priorityClassName=pc))
        wait_for(
            lambda n=name: core.read_namespaced_pod(n, NS).status.phase == "Running",
            30,
            what=f"{name} running",
        )
    victim_node = core.read_namespaced_pod("bulk-a", NS).spec.node_name
    core.create_namespaced_pod(NS, _pod("vip", gpus=8, priorityClassName="batch-high"))
    assert core.read_namespaced_pod("vip", NS).spec.priority == 10000  # the Priority admission plugin
    wait_for(
        lambda: core.read_namespaced_pod("vip", NS).status.nominated_node_name == victim_node,
        30,
        what="nomination",
    )
    victim = core.read_namespaced_pod("bulk-a", NS)
    disruption = _condition(victim, "DisruptionTarget")
    assert disruption.reason == "PreemptionByScheduler"
    wait_for(lambda: core.read_namespaced_pod("vip", NS).status.phase == "Running", 30, what="vip running")
    assert core.read_namespaced_pod("vip", NS).spec.node_name == victim_node
    assert _gone(lambda: core.read_namespaced_pod("bulk-a", NS))
    for name in ("bulk-b", "bulk-c"):
        assert core.read_namespaced_pod(name, NS).metadata.deletion_timestamp is None
    api.close()  # type: ignore[no-untyped-call]


def test_kueue_preempts_a_lower_priority_workload(sim: Simulation) -> None:
    api = _api(sim, "queued")
    batch, sched = client.BatchV1Api(api), client.SchedulingV1Api(api)
    custom = client.CustomObjectsApi(api)
    for name, value in (("q-low", 10), ("q-high", 1000)):
        sched.create_priority_class({"metadata": {"name": name}, "value": value})
    for name, pc in (("cheap", "q-low"), ("urgent", "q-high")):
        job = _job(
            name, annotations={"sim.gpufed.io/duration-seconds": "100000"}, pod={"priorityClassName": pc}
        )
        job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "gpu"}
        job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "8"
        batch.create_namespaced_job(NS, job)
        if name == "cheap":
            wait_for(
                lambda: (batch.read_namespaced_job_status("cheap", NS).status.active or 0) == 1,
                30,
                what="cheap admitted and running",
            )

    def evicted() -> dict[str, Any] | None:
        items = custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", NS, "workloads")["items"]
        uid = batch.read_namespaced_job("cheap", NS).metadata.uid
        for w in items:
            if w["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == uid:
                conditions = {c["type"]: c for c in w["status"].get("conditions") or ()}
                if "Evicted" in conditions:
                    return conditions
        return None

    conditions = wait_for(evicted, 30, what="the cheap workload evicted")
    assert isinstance(conditions, dict)
    wait_for(
        lambda: batch.read_namespaced_job("cheap", NS).spec.suspend is True, 30, what="cheap suspended again"
    )
    assert conditions["Evicted"]["reason"] == "Preempted"
    assert conditions["Preempted"]["reason"] == "InClusterQueue"
    assert "due to prioritization in the ClusterQueue" in conditions["Preempted"]["message"]
    wait_for(
        lambda: batch.read_namespaced_job("urgent", NS).spec.suspend is False, 30, what="urgent admitted"
    )
    wait_for(
        lambda: (batch.read_namespaced_job_status("urgent", NS).status.active or 0) == 1,
        30,
        what="urgent runs",
    )
    api.close()  # type: ignore[no-untyped-call]
