"""kubesim with its controllers on, through the official client and real kubectl: finalizers, graceful
deletion, the Job controller's failure handling, scheduler preemption and Kueue preemption."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from kubesim.fleet import parse_fleet
from kubesim.sim import Simulation
from tests.conftest import wait_for
from tests.k8s_fields import as_dict, sent_as

pytestmark = pytest.mark.integration

KUBECTL = Path(__file__).resolve().parents[2] / "tools" / "bin" / "kubectl"
SPEED = 20.0  # simulated seconds per real second
NS = "default"
POOL = {"name": "h", "count": 1, "cpu": "64", "memory": "512Gi", "gpu": {"product": "H100-80GB", "count": 8}}
H100_FLAVOR = {"name": "h100", "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}


def _gpu_queue(name: str, gpus: int, **extra: Any) -> dict[str, Any]:
    """A Kueue ClusterQueue of `gpus` nominal nvidia.com/gpu on the h100 flavor."""
    flavor = {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]}
    return {
        "name": name,
        "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [flavor]}],
    } | extra


FLEET = {
    "clusters": [
        {"name": "life", "region": "eu-west", "nodePools": [POOL]},
        {"name": "life-big", "region": "eu-west", "nodePools": [{**POOL, "count": 3}]},
        {
            "name": "spotty",
            "region": "eu-west",
            "tier": "cloud",
            "cloudPools": [
                {
                    "name": "spot-l4",
                    "min": 2,
                    "max": 2,
                    "spot": True,
                    "spotNoticeSeconds": 60,
                    "gpu": {"product": "L4", "count": 8},
                }
            ],
        },
        {
            "name": "queued",
            "region": "eu-west",
            "nodePools": [POOL],
            "kueue": {
                "flavors": [H100_FLAVOR],
                "clusterQueues": [
                    _gpu_queue("gpu-cq", 8, preemption={"withinClusterQueue": "LowerPriority"})
                ],
                "localQueues": [{"name": "gpu", "namespace": NS, "clusterQueue": "gpu-cq"}],
            },
        },
        {
            # two teams of 4 GPUs in one cohort on one 8-GPU node: team-a may borrow team-b's idle 4,
            # and team-b takes them back (reclaimWithinCohort)
            "name": "cohort",
            "region": "eu-west",
            "nodePools": [POOL],
            "kueue": {
                "flavors": [H100_FLAVOR],
                "clusterQueues": [
                    _gpu_queue(team, 4, cohort="research", preemption={"reclaimWithinCohort": "Any"})
                    for team in ("team-a", "team-b")
                ],
                "localQueues": [
                    {"name": "a", "namespace": NS, "clusterQueue": "team-a"},
                    {"name": "b", "namespace": NS, "clusterQueue": "team-b"},
                ],
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
def kube(sim: Simulation) -> Iterator[Kube]:
    c = _api(sim, "life")
    yield Kube(c)
    c.close()  # type: ignore[no-untyped-call]


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


def _gone(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as e:
        return bool(e.status == 404)
    return False


def plain(obj: object) -> dict[str, Any]:
    """A client model as the JSON the server sent (camelCase keys), for typed reads in tests."""
    return as_dict(client.ApiClient().sanitize_for_serialization(obj))  # type: ignore[no-untyped-call]


def cond(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for c in obj.get("status", {}).get("conditions") or ():
        if c["type"] == ctype and c["status"] == "True":
            return dict(c)
    return None


def _running(kube: Kube, name: str) -> bool:
    return bool(kube.pod(name)["status"]["phase"] == "Running")


class Kube:
    """Reads of one cluster as plain dicts."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core, self.batch = client.CoreV1Api(api), client.BatchV1Api(api)
        self.sched, self.custom = client.SchedulingV1Api(api), client.CustomObjectsApi(api)

    def pod(self, name: str, ns: str = NS) -> dict[str, Any]:
        return plain(self.core.read_namespaced_pod(name, ns))

    def job(self, name: str) -> dict[str, Any]:
        return plain(self.batch.read_namespaced_job(name, NS))

    def pods_of(self, job: str) -> list[dict[str, Any]]:
        return [plain(p) for p in self.core.list_namespaced_pod(NS, label_selector=f"job-name={job}").items]

    def create_pod(self, manifest: dict[str, Any], ns: str = NS) -> None:
        self.core.create_namespaced_pod(ns, sent_as(client.V1Pod, manifest))

    def create_job(self, manifest: dict[str, Any]) -> None:
        self.batch.create_namespaced_job(NS, sent_as(client.V1Job, manifest))

    def priority_class(self, name: str, value: int) -> None:
        self.sched.create_priority_class(
            sent_as(client.V1PriorityClass, {"metadata": {"name": name}, "value": value})
        )

    def job_condition(self, name: str, ctype: str) -> dict[str, Any] | None:
        return cond(self.job(name), ctype)


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


# ---------------------------------------------------------------------------------------- finalizers


def test_a_pod_with_a_finalizer_terminates_after_its_grace_period_and_stays_until_released(
    kube: Kube,
) -> None:
    manifest = _pod("held")
    manifest["metadata"]["finalizers"] = ["example.com/hold"]
    kube.create_pod(manifest)
    wait_for(lambda: kube.pod("held")["status"]["phase"] == "Running", 30, what="held running")
    marked = plain(kube.core.delete_namespaced_pod("held", NS))
    assert marked["metadata"]["deletionTimestamp"] and marked["metadata"]["deletionGracePeriodSeconds"] == 5
    wait_for(lambda: kube.pod("held")["status"]["phase"] == "Failed", 30, what="the kubelet to stop it")
    stopped = kube.pod("held")
    assert stopped["metadata"]["finalizers"] == ["example.com/hold"]
    assert stopped["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    kube.core.patch_namespaced_pod("held", NS, {"metadata": {"finalizers": None}})
    assert _gone(lambda: kube.core.read_namespaced_pod("held", NS))


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


def test_a_terminating_namespace_refuses_new_content_and_goes_when_emptied(kube: Kube) -> None:
    kube.core.create_namespace(sent_as(client.V1Namespace, {"metadata": {"name": "scratch"}}))
    manifest = _pod("stuck")
    manifest["metadata"]["finalizers"] = ["example.com/hold"]
    kube.create_pod(manifest, "scratch")
    kube.core.delete_namespace("scratch")
    assert plain(kube.core.read_namespace("scratch"))["status"]["phase"] == "Terminating"
    with pytest.raises(ApiException) as err:
        kube.create_pod(_pod("late"), "scratch")
    assert err.value.status == 403 and "because it is being terminated" in str(err.value.body)
    wait_for(
        lambda: kube.pod("stuck", "scratch")["metadata"].get("deletionTimestamp"), 30, what="content deleted"
    )
    kube.core.patch_namespaced_pod("stuck", "scratch", {"metadata": {"finalizers": None}})
    wait_for(lambda: _gone(lambda: kube.core.read_namespace("scratch")), 30, what="the namespace to go")


# ---------------------------------------------------------------------------------------- Jobs


def test_job_counters_never_go_down_when_its_pods_are_deleted(kube: Kube) -> None:
    kube.create_job(_job("counted", completions=2, parallelism=2))
    wait_for(lambda: kube.job_condition("counted", "Complete"), 30, what="counted complete")
    assert kube.job("counted")["status"]["succeeded"] == 2
    pods = kube.pods_of("counted")
    assert len(pods) == 2 and all(not p["metadata"].get("finalizers") for p in pods)  # counted, released
    kube.core.delete_collection_namespaced_pod(NS, label_selector="job-name=counted", grace_period_seconds=0)
    wait_for(lambda: not kube.pods_of("counted"), 30, what="pods gone")
    assert kube.job("counted")["status"]["succeeded"] == 2


def test_on_failure_restarts_the_container_and_counts_restarts(kube: Kube) -> None:
    job = _job(
        "restarts", annotations={"sim.gpufed.io/exit-codes": "3,0"}, pod={"restartPolicy": "OnFailure"}
    )
    kube.create_job(job)
    wait_for(lambda: kube.job_condition("restarts", "Complete"), 60, what="restarts complete")
    (pod,) = kube.pods_of("restarts")
    status = pod["status"]["containerStatuses"][0]
    assert status["restartCount"] == 1 and status["lastState"]["terminated"]["exitCode"] == 3
    assert "failed" not in kube.job("restarts")["status"]
    # the log of the instance before the restart, and of this one, through the official client
    logs = kube.core
    name = pod["metadata"]["name"]
    before = logs.read_namespaced_pod_log(name, NS, previous=True).strip().splitlines()
    now = logs.read_namespaced_pod_log(name, NS).strip().splitlines()
    assert before[-1] == 'kubesim: container "main" exited with code 3 (Error)', before
    assert now[-1] == 'kubesim: container "main" exited with code 0 (Completed)', now
    assert logs.read_namespaced_pod_log(name, NS, tail_lines=1).strip() == now[-1]


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


def test_backoff_limit_per_index_marks_the_failing_index(kube: Kube) -> None:
    job = _job(
        "per-index",
        annotations={"sim.gpufed.io/index-exit-codes": "1:7"},
        completions=3,
        parallelism=3,
        completionMode="Indexed",
        backoffLimitPerIndex=1,
    )
    kube.create_job(job)
    wait_for(lambda: kube.job_condition("per-index", "Failed"), 60, what="per-index failed")
    done = kube.job("per-index")
    assert done["status"]["failedIndexes"] == "1" and done["status"]["completedIndexes"] == "0,2"
    assert (cond(done, "Failed") or {}).get("reason") == "FailedIndexes"


def test_active_deadline_and_ttl_after_finished(kube: Kube) -> None:
    job = _job(
        "deadline",
        annotations={"sim.gpufed.io/duration-seconds": "100000"},
        activeDeadlineSeconds=10,
        ttlSecondsAfterFinished=30,
    )
    kube.create_job(job)
    failed = wait_for(lambda: kube.job_condition("deadline", "Failed"), 30, what="the deadline")
    assert isinstance(failed, dict)
    assert failed["reason"] == "DeadlineExceeded"
    assert failed["message"] == "Job was active longer than specified deadline"
    wait_for(lambda: _gone(lambda: kube.batch.read_namespaced_job("deadline", NS)), 30, what="the TTL")


# ---------------------------------------------------------------------------------------- preemption


def test_scheduler_preemption_evicts_the_lower_priority_pod(sim: Simulation) -> None:
    api = _api(sim, "life-big")
    kube = Kube(api)
    kube.priority_class("batch-low", 100)
    kube.priority_class("batch-high", 10000)
    for name, pc in (("bulk-a", "batch-low"), ("bulk-b", "batch-high"), ("bulk-c", "batch-high")):
        kube.create_pod(_pod(name, gpus=8, priorityClassName=pc))
        wait_for(functools.partial(_running, kube, name), 30, what=f"{name} running")
    victim_node = kube.pod("bulk-a")["spec"]["nodeName"]
    kube.create_pod(_pod("vip", gpus=8, priorityClassName="batch-high"))
    assert kube.pod("vip")["spec"]["priority"] == 10000  # the Priority admission plugin
    wait_for(lambda: kube.pod("vip")["status"].get("nominatedNodeName") == victim_node, 30, what="nomination")
    disruption = cond(kube.pod("bulk-a"), "DisruptionTarget")
    assert disruption is not None and disruption["reason"] == "PreemptionByScheduler"
    wait_for(lambda: kube.pod("vip")["status"]["phase"] == "Running", 30, what="vip running")
    assert kube.pod("vip")["spec"]["nodeName"] == victim_node
    assert _gone(lambda: kube.core.read_namespaced_pod("bulk-a", NS))
    for name in ("bulk-b", "bulk-c"):
        assert "deletionTimestamp" not in kube.pod(name)["metadata"]
    api.close()  # type: ignore[no-untyped-call]


def _workload_conditions(kube: Kube, job: str) -> dict[str, Any]:
    """The conditions of the Kueue Workload of `job`, by type."""
    items = as_dict(kube.custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", NS, "workloads"))
    uid = kube.job(job)["metadata"]["uid"]
    for w in items["items"]:
        if w["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == uid:
            return {c["type"]: c for c in w["status"].get("conditions") or ()}
    return {}


def test_kueue_reclaims_quota_borrowed_within_the_cohort(sim: Simulation) -> None:
    api = _api(sim, "cohort")
    kube = Kube(api)

    def gpu_job(name: str, queue: str, gpus: int) -> dict[str, Any]:
        job = _job(name, annotations={"sim.gpufed.io/duration-seconds": "100000"})
        job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": queue}
        job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
        return job

    kube.create_job(gpu_job("borrower", "a", 8))  # team-a's 4 and team-b's idle 4
    wait_for(lambda: kube.job("borrower")["status"].get("active") == 1, 30, what="borrower running on 8")
    kube.create_job(gpu_job("owner", "b", 4))  # team-b wants its own quota back

    conditions = wait_for(
        lambda: "Evicted" in (c := _workload_conditions(kube, "borrower")) and c,
        30,
        what="the borrower's workload evicted",
    )
    assert isinstance(conditions, dict)
    assert conditions["Preempted"]["reason"] == "InCohortReclamation"
    assert "reclamation within the cohort" in conditions["Preempted"]["message"]
    wait_for(lambda: kube.job("borrower")["spec"]["suspend"] is True, 30, what="borrower suspended again")
    wait_for(lambda: kube.job("owner")["status"].get("active") == 1, 30, what="owner runs on its own quota")
    api.close()  # type: ignore[no-untyped-call]


def test_kueue_preempts_a_lower_priority_workload(sim: Simulation) -> None:
    api = _api(sim, "queued")
    kube = Kube(api)
    kube.priority_class("q-low", 10)
    kube.priority_class("q-high", 1000)
    for name, pc in (("cheap", "q-low"), ("urgent", "q-high")):
        job = _job(
            name, annotations={"sim.gpufed.io/duration-seconds": "100000"}, pod={"priorityClassName": pc}
        )
        job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "gpu"}
        job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "8"
        kube.create_job(job)
        if name == "cheap":
            wait_for(
                lambda: kube.job("cheap")["status"].get("active") == 1, 30, what="cheap admitted and running"
            )

    def evicted() -> dict[str, Any] | None:
        items = as_dict(
            kube.custom.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", NS, "workloads")
        )
        uid = kube.job("cheap")["metadata"]["uid"]
        for w in items["items"]:
            if w["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == uid:
                conditions = {c["type"]: c for c in w["status"].get("conditions") or ()}
                if "Evicted" in conditions:
                    return conditions
        return None

    conditions = wait_for(evicted, 30, what="the cheap workload evicted")
    assert isinstance(conditions, dict)
    wait_for(lambda: kube.job("cheap")["spec"]["suspend"] is True, 30, what="cheap suspended again")
    assert conditions["Evicted"]["reason"] == "Preempted"
    assert conditions["Preempted"]["reason"] == "InClusterQueue"
    assert "due to prioritization in the ClusterQueue" in conditions["Preempted"]["message"]
    wait_for(lambda: kube.job("urgent")["spec"]["suspend"] is False, 30, what="urgent admitted")
    wait_for(lambda: kube.job("urgent")["status"].get("active") == 1, 30, what="urgent runs")
    api.close()  # type: ignore[no-untyped-call]


# ---------------------------------------------------------------------------------------- spot


def test_spot_interruption_through_the_admin_endpoint_and_the_cli(sim: Simulation) -> None:
    api = _api(sim, "spotty")
    kube = Kube(api)
    req = urllib.request.Request(f"{sim.admin_url}/clusters/spotty/spot", method="GET")
    with urllib.request.urlopen(req, timeout=10) as resp:
        nodes = json.loads(resp.read())["nodes"]
    assert len(nodes) == 2
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubesim.cli",
            "fault",
            "spotty",
            "--spot-interrupt",
            nodes[0],
            "--admin",
            sim.admin_url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert nodes[0] in cli.stdout
    warned = plain(kube.core.read_node(nodes[0]))
    assert warned["spec"]["unschedulable"] is True
    events = kube.core.list_namespaced_event("default", field_selector="reason=SpotInterrupted").items
    assert [plain(e)["involvedObject"]["name"] for e in events] == [nodes[0]]
    wait_for(lambda: _gone(lambda: kube.core.read_node(nodes[0])), 30, what="the interrupted node to go")
    bad = urllib.request.Request(
        f"{sim.admin_url}/clusters/spotty/spot", method="POST", data=json.dumps({"node": "nope"}).encode()
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(bad, timeout=10)
    assert err.value.code == 400
    api.close()  # type: ignore[no-untyped-call]
