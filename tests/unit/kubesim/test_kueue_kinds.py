"""kubesim's Kueue admits JobSets and RayJobs the way Kueue's integrations do: a Workload per object
(`jobset-<name>-<hash>`, owner the object) with one pod set per role, the object held suspended until
admission, the flavor merged into every role's pod template, its GPUs charged to the ClusterQueue, and
freed when it finishes; quota short, it stays suspended."""

from __future__ import annotations

from typing import Any

from kubesim.controllers.pods import condition_true
from tests.unit.kind_objects import jobset, rayjob
from tests.unit.kubesim.test_kueue_autoscaler import CQ, QUEUE, WL, kueue, usage
from tests.unit.kubesim.world import World, pool, world

JOBSETS = "jobsets.jobset.x-k8s.io"
RAYJOBS = "rayjobs.ray.io"
DURATION = "sim.gpufed.io/duration-seconds"
FLAVOR_SELECTOR = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def cluster(quota: int) -> World:
    return world(
        {
            "name": "k",
            "operators": ["jobset", "kuberay"],
            "nodePools": [pool("h", 2, gpus=4)],
            "kueue": kueue(quota),
        }
    )


def queued(obj: dict[str, Any], name: str) -> dict[str, Any]:
    obj["metadata"] = {"name": name, "namespace": "default", "labels": dict(QUEUE)}
    return obj


def workload_of(w: World, kind: str, name: str) -> dict[str, Any]:
    found = [
        wl
        for wl in w.store.list(WL, "default")[0]
        if wl["metadata"]["ownerReferences"][0]["kind"] == kind
        and wl["metadata"]["ownerReferences"][0]["name"] == name
    ]
    assert len(found) == 1, found
    return found[0]


def test_a_jobset_gets_a_workload_per_role_and_runs_once_admitted() -> None:
    w = cluster(quota=8)
    js = queued(jobset(leader_gpus=1, workers=2, worker_gpus=2), "train")
    for rj in js["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["metadata"] = {"annotations": {DURATION: "30"}}
    w.store.create(JOBSETS, js)
    w.settle()
    wl = workload_of(w, "JobSet", "train")
    assert wl["metadata"]["name"].startswith("jobset-train-")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("leader", 1), ("workers", 2)]
    assignments = wl["status"]["admission"]["podSetAssignments"]
    assert [(a["name"], a["resourceUsage"]) for a in assignments] == [
        ("leader", {"nvidia.com/gpu": "1"}),
        ("workers", {"nvidia.com/gpu": "4"}),
    ]
    assert usage(w) == "5"  # 1 + 2 x 2 GPUs charged to the ClusterQueue
    admitted = w.store.get(JOBSETS, "default", "train")
    assert admitted["spec"]["suspend"] is False
    for rj in admitted["spec"]["replicatedJobs"]:
        assert rj["template"]["spec"]["template"]["spec"]["nodeSelector"] == FLAVOR_SELECTOR
    w.advance(5)
    assert len([p for p in w.pods() if p["status"].get("phase") == "Running"]) == 3
    w.advance(60)
    assert condition_true(w.store.get(JOBSETS, "default", "train"), "Completed")
    w.advance(1)
    assert condition_true(workload_of(w, "JobSet", "train"), "Finished")
    assert usage(w) == "0"


def test_a_jobset_over_quota_stays_suspended_with_no_pods() -> None:
    w = cluster(quota=2)
    w.store.create(JOBSETS, queued(jobset(leader_gpus=1, workers=2, worker_gpus=2), "big"))
    w.settle()
    js = w.store.get(JOBSETS, "default", "big")
    assert js["spec"]["suspend"] is True and condition_true(js, "Suspended")
    assert w.store.list("jobs.batch", "default")[0] == [] and w.pods() == []
    why = next(
        c for c in workload_of(w, "JobSet", "big")["status"]["conditions"] if c["type"] == "QuotaReserved"
    )
    assert why["status"] == "False" and "insufficient unused quota for nvidia.com/gpu" in why["message"]
    assert w.store.get(CQ, "", "gpu-cq")["status"]["pendingWorkloads"] == 1


def test_a_rayjob_gets_head_and_worker_pod_sets_and_runs_once_admitted() -> None:
    w = cluster(quota=8)
    w.store.create(RAYJOBS, queued(rayjob(workers=3, gpus=1), "tune"))
    w.settle()
    wl = workload_of(w, "RayJob", "tune")
    assert wl["metadata"]["name"].startswith("rayjob-tune-")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [("head", 1), ("gpu", 3)]
    assert usage(w) == "3"
    rj = w.store.get(RAYJOBS, "default", "tune")
    assert rj["spec"]["suspend"] is False
    w.advance(10)
    assert w.store.get(RAYJOBS, "default", "tune")["status"]["jobDeploymentStatus"] == "Running"


def test_a_rayjob_over_quota_is_suspended_without_a_cluster() -> None:
    w = cluster(quota=2)
    w.store.create(RAYJOBS, queued(rayjob(workers=3, gpus=1), "tune"))
    w.advance(5)
    rj = w.store.get(RAYJOBS, "default", "tune")
    assert rj["spec"]["suspend"] is True and rj["status"]["jobDeploymentStatus"] == "Suspended"
    assert w.store.find("rayclusters.ray.io", "default", "tune-raycluster") is None and w.pods() == []


def test_a_lower_priority_jobset_is_evicted_suspended_and_restored_for_a_higher_priority_job() -> None:
    from tests.unit.kubesim.test_kueue_autoscaler import _prio_job, _priority_classes

    spec = kueue(8)
    spec["clusterQueues"][0]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    w = world({"name": "k", "operators": ["jobset"], "nodePools": [pool("h", 2, gpus=4)], "kueue": spec})
    _priority_classes(w)
    js = queued(jobset(leader_gpus=2, workers=3, worker_gpus=2), "cheap")  # 2 + 3 x 2 = 8 GPUs
    for rj in js["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["spec"]["priorityClassName"] = "low"
    w.store.create(JOBSETS, js)
    w.advance(5)
    assert w.store.get(JOBSETS, "default", "cheap")["spec"]["suspend"] is False and usage(w) == "8"
    w.store.create("jobs.batch", _prio_job("urgent", 4, "high"))
    w.settle()
    evicted = w.store.get(JOBSETS, "default", "cheap")
    assert evicted["spec"]["suspend"] is True
    for rj in evicted["spec"]["replicatedJobs"]:  # the flavor's node labels undone in every role
        assert "nodeSelector" not in rj["template"]["spec"]["template"]["spec"]
    w.advance(30)  # its Jobs go, its quota is released, the Job is admitted
    assert "admission" not in workload_of(w, "JobSet", "cheap")["status"]
    assert w.job("urgent")["spec"]["suspend"] is False and usage(w) == "4"
