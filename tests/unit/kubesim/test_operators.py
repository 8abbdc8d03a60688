"""kubesim's workload operators: JobSet, TrainJob, PyTorchJob and RayJob run to their own terminal
conditions on a frozen clock; managed objects are left alone; an operator not installed is not served."""

from __future__ import annotations

from typing import Any

from kubesim.api import discovery_v2
from kubesim.controllers.pods import condition_true
from kubesim.operators import hidden_groups
from tests.unit.kind_objects import edited, jobset, pytorchjob, rayjob, trainjob
from tests.unit.kubesim.world import World, pool, world

DURATION = "sim.gpufed.io/duration-seconds"


def cluster(*operators: str) -> World:
    return world({"name": "a", "operators": list(operators), "nodePools": [pool("gpu", 2, gpus=4)]})


def _with_duration(template: dict[str, Any], seconds: int = 10) -> None:
    template.setdefault("metadata", {}).setdefault("annotations", {})[DURATION] = str(seconds)


def create(w: World, key: str, obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"].setdefault("namespace", "default")
    out: dict[str, Any] = w.store.create(key, obj)
    return out


def test_jobset_runs_its_replicated_jobs_to_completed() -> None:
    w = cluster("jobset")
    js = jobset()
    for rj in js["spec"]["replicatedJobs"]:
        _with_duration(rj["template"]["spec"]["template"])
    create(w, "jobsets.jobset.x-k8s.io", js)
    w.settle()
    names = sorted(j["metadata"]["name"] for j in w.store.list("jobs.batch", "default")[0])
    assert names == ["train-leader-0", "train-workers-0"]
    assert len(w.pods()) == 3
    assert w.job("train-workers-0")["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"] == "train"
    w.advance(5)
    status = w.store.get("jobsets.jobset.x-k8s.io", "default", "train")["status"]
    assert {r["name"]: r["ready"] for r in status["replicatedJobsStatus"]} == {"leader": 1, "workers": 1}
    w.advance(10)
    done = w.store.get("jobsets.jobset.x-k8s.io", "default", "train")
    assert condition_true(done, "Completed") and done["status"]["terminalState"] == "Completed"


def test_jobset_failure_restarts_then_fails_and_managed_jobsets_are_left_alone() -> None:
    w = cluster("jobset")
    js = edited(jobset(), "spec.failurePolicy", {"maxRestarts": 1})
    for rj in js["spec"]["replicatedJobs"]:
        tmpl = rj["template"]["spec"]["template"]
        _with_duration(tmpl, 5)
        tmpl["metadata"]["annotations"]["sim.gpufed.io/exit-code"] = "3"
    create(w, "jobsets.jobset.x-k8s.io", js)
    create(w, "jobsets.jobset.x-k8s.io", edited(jobset(), "metadata.name", "hub-owned") | {})
    w.store.mutate(
        "jobsets.jobset.x-k8s.io",
        "default",
        "hub-owned",
        lambda o: o["spec"].update(managedBy="gpufed.io/broker"),
    )
    w.advance(30)
    failed = w.store.get("jobsets.jobset.x-k8s.io", "default", "train")
    assert failed["status"]["restarts"] == 1
    assert condition_true(failed, "Failed")
    assert failed["status"]["conditions"][-1]["reason"] == "ReachedMaxRestarts"
    assert not [
        j for j in w.store.list("jobs.batch", "default")[0] if j["metadata"]["name"].startswith("hub-owned")
    ]


def test_trainjob_runs_as_a_jobset_from_its_runtime() -> None:
    w = cluster("jobset", "trainer")
    create(w, "trainjobs.trainer.kubeflow.org", trainjob(nodes=2))
    w.settle()
    js = w.store.get("jobsets.jobset.x-k8s.io", "default", "fine-tune")
    node = js["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert node["parallelism"] == 2
    assert node["template"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}
    w.advance(60)
    tj = w.store.get("trainjobs.trainer.kubeflow.org", "default", "fine-tune")
    assert condition_true(tj, "Complete"), tj["status"]
    missing = create(
        w, "trainjobs.trainer.kubeflow.org", edited(trainjob(runtime="nope"), "metadata.name", "lost")
    )
    w.settle()
    assert not w.store.find("jobsets.jobset.x-k8s.io", "default", missing["metadata"]["name"])
    assert w.events("TrainingRuntimeNotFound")


def test_pytorchjob_master_and_workers_to_succeeded() -> None:
    w = cluster("training-operator")
    pt = pytorchjob(workers=2)
    for r in pt["spec"]["pytorchReplicaSpecs"].values():
        _with_duration(r["template"])
    create(w, "pytorchjobs.kubeflow.org", pt)
    w.advance(5)
    job = w.store.get("pytorchjobs.kubeflow.org", "default", "ddp")
    assert [p["metadata"]["name"] for p in w.pods()] == ["ddp-master-0", "ddp-worker-0", "ddp-worker-1"]
    env = {e["name"]: e["value"] for e in w.pod("ddp-worker-1")["spec"]["containers"][0]["env"]}
    assert (env["WORLD_SIZE"], env["RANK"], env["MASTER_ADDR"]) == ("3", "2", "ddp-master-0")
    assert condition_true(job, "Running")
    w.advance(10)
    assert condition_true(w.store.get("pytorchjobs.kubeflow.org", "default", "ddp"), "Succeeded")


def test_rayjob_runs_its_raycluster_and_a_submitter_then_shuts_down() -> None:
    w = cluster("kuberay")
    rj = rayjob(workers=2)
    _with_duration(rj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"], 20)
    create(w, "rayjobs.ray.io", rj)
    w.advance(5)
    pods = [p["metadata"]["name"] for p in w.pods()]
    assert "tune-raycluster-head" in pods and "tune-raycluster-gpu-worker-1" in pods
    status = w.store.get("rayjobs.ray.io", "default", "tune")["status"]
    assert status["jobDeploymentStatus"] == "Running" and status["rayClusterName"] == "tune-raycluster"
    w.advance(30)
    status = w.store.get("rayjobs.ray.io", "default", "tune")["status"]
    assert (status["jobDeploymentStatus"], status["jobStatus"]) == ("Complete", "SUCCEEDED")
    assert w.store.find("rayclusters.ray.io", "default", "tune-raycluster") is None  # shut down


def test_operators_not_installed_are_not_served() -> None:
    w = cluster("jobset")
    hidden = hidden_groups(w.cluster)
    assert hidden == frozenset({"ray.io", "kubeflow.org", "trainer.kubeflow.org"})
    served = {i["metadata"]["name"] for i in discovery_v2(core=False, hidden=hidden)["items"]}
    assert "jobset.x-k8s.io" in served and "ray.io" not in served
