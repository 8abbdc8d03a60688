"""Kueue admission against quota, and the cluster autoscaler's cloud pools."""

from __future__ import annotations

from typing import Any

from tests.unit.kubesim.world import World, batch_job, job_condition, pod_condition, pool, scheduled, world

WL = "workloads.kueue.x-k8s.io"
CQ = "clusterqueues.kueue.x-k8s.io"
LQ = "localqueues.kueue.x-k8s.io"
QUEUE = {"kueue.x-k8s.io/queue-name": "gpu"}


def kueue(gpu_quota: int, strategy: str = "BestEffortFIFO") -> dict[str, Any]:
    return {
        "flavors": [
            {
                "name": "h100",
                "nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            }
        ],
        "clusterQueues": [
            {
                "name": "gpu-cq",
                "queueingStrategy": strategy,
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "h100",
                                "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpu_quota}],
                            }
                        ],
                    }
                ],
            }
        ],
        "localQueues": [{"name": "gpu", "namespace": "default", "clusterQueue": "gpu-cq"}],
    }


def usage(w: World) -> str:
    cq = w.store.get(CQ, "", "gpu-cq")
    total: str = cq["status"]["flavorsUsage"][0]["resources"][0]["total"]
    return total


def test_kueue_admits_in_quota_order_and_admits_the_next_when_quota_frees() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 2)], "kueue": kueue(8)})
    w.store.create(
        "jobs.batch", batch_job("first", {"nvidia.com/gpu": 6}, duration=100, suspend=True, labels=QUEUE)
    )
    w.clock.advance(1)
    w.store.create(
        "jobs.batch", batch_job("second", {"nvidia.com/gpu": 4}, duration=100, suspend=True, labels=QUEUE)
    )
    w.clock.advance(1)
    w.store.create(
        "jobs.batch", batch_job("small", {"nvidia.com/gpu": 2}, duration=100, suspend=True, labels=QUEUE)
    )
    w.settle()
    first, second, small = w.job("first"), w.job("second"), w.job("small")
    assert first["spec"]["suspend"] is False
    assert first["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"
    }
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (
        first["spec"]["template"]["spec"]["tolerations"]
    )
    assert second["spec"]["suspend"] is True  # 6 + 4 > 8
    assert small["spec"]["suspend"] is False  # BestEffortFIFO: 6 + 2 fits
    assert usage(w) == "8"
    wls = {w_["metadata"]["ownerReferences"][0]["name"]: w_ for w_ in w.store.list(WL, "default")[0]}
    admission = wls["first"]["status"]["admission"]
    assert admission["clusterQueue"] == "gpu-cq"
    assert admission["podSetAssignments"][0]["flavors"] == {"nvidia.com/gpu": "h100"}
    assert admission["podSetAssignments"][0]["resourceUsage"] == {"nvidia.com/gpu": "6"}
    assert wls["first"]["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == first["metadata"]["uid"]
    assert wls["second"]["status"]["conditions"][0]["reason"] == "Pending"
    assert (
        "insufficient unused quota for nvidia.com/gpu in flavor h100"
        in wls["second"]["status"]["conditions"][0]["message"]
    )
    cq = w.store.get(CQ, "", "gpu-cq")["status"]
    assert (cq["admittedWorkloads"], cq["pendingWorkloads"]) == (2, 1)
    lq = w.store.get(LQ, "default", "gpu")["status"]
    assert (lq["admittedWorkloads"], lq["pendingWorkloads"]) == (2, 1)
    assert lq["flavorsUsage"] == [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": "8"}]}]
    assert [bool(scheduled(p)) for p in w.pods()] == [True, True]
    w.advance(101)  # first and small finish: quota frees, second is admitted
    assert job_condition(w.job("first"), "Complete") is not None
    assert w.job("second")["spec"]["suspend"] is False
    assert usage(w) == "4"
    finished = next(
        x for x in w.store.list(WL, "default")[0] if x["metadata"]["ownerReferences"][0]["name"] == "first"
    )
    assert any(c["type"] == "Finished" and c["status"] == "True" for c in finished["status"]["conditions"])


def test_strict_fifo_does_not_let_smaller_jobs_jump_the_queue() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 2)], "kueue": kueue(8, "StrictFIFO")})
    w.store.create("jobs.batch", batch_job("first", {"nvidia.com/gpu": 6}, suspend=True, labels=QUEUE))
    w.clock.advance(1)
    w.store.create("jobs.batch", batch_job("second", {"nvidia.com/gpu": 4}, suspend=True, labels=QUEUE))
    w.clock.advance(1)
    w.store.create("jobs.batch", batch_job("small", {"nvidia.com/gpu": 2}, suspend=True, labels=QUEUE))
    w.settle()
    assert [w.job(n)["spec"]["suspend"] for n in ("first", "second", "small")] == [False, True, True]


def test_higher_priority_workloads_are_admitted_first() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)], "kueue": kueue(8)})
    w.store.create(
        "jobs.batch",
        batch_job(
            "low",
            {"nvidia.com/gpu": 8},
            suspend=True,
            labels=QUEUE,
            pod_extra={"priorityClassName": "gpu-low"},
        ),
    )
    w.store.create(
        "jobs.batch",
        batch_job(
            "high",
            {"nvidia.com/gpu": 8},
            suspend=True,
            labels=QUEUE,
            pod_extra={"priorityClassName": "gpu-high"},
        ),
    )
    w.settle()
    assert w.job("high")["spec"]["suspend"] is False
    assert w.job("low")["spec"]["suspend"] is True


def test_jobs_for_a_missing_local_queue_stay_suspended() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)], "kueue": kueue(8)})
    w.store.create(
        "jobs.batch", batch_job("lost", {"nvidia.com/gpu": 1}, labels={"kueue.x-k8s.io/queue-name": "nope"})
    )
    w.settle()
    assert w.job("lost")["spec"]["suspend"] is True
    assert w.pods() == []
    (wl,) = w.store.list(WL, "default")[0]
    assert wl["status"]["conditions"][0]["message"] == "LocalQueue nope doesn't exist"


def cloud(max_nodes: int = 2, delay: float = 120, idle: float = 300, min_nodes: int = 0) -> dict[str, Any]:
    return {
        "name": "l4",
        "min": min_nodes,
        "max": max_nodes,
        "provisioningDelaySeconds": delay,
        "scaleDownIdleSeconds": idle,
        "pricePerGpuHour": 0.85,
        "cpu": "96",
        "memory": "384Gi",
        "gpu": {"product": "L4", "count": 8},
    }


def test_autoscaler_adds_a_node_after_its_delay_and_removes_it_when_idle() -> None:
    w = world({"name": "c", "tier": "cloud", "nodePools": [pool("h", 1, gpus=1)], "cloudPools": [cloud()]})
    assert w.store.count("nodes") == 1
    w.store.create(
        "jobs.batch", batch_job("burst", {"nvidia.com/gpu": 4}, duration=60, parallelism=2, completions=2)
    )
    w.settle()
    assert all(pod_condition(p, "PodScheduled")["reason"] == "Unschedulable" for p in w.pods())
    (event,) = w.events("TriggeredScaleUp")
    assert event["message"] == "pod triggered scale-up: [{l4 0->1 (max: 2)}]"
    w.advance(119)
    assert w.store.count("nodes") == 1  # still provisioning
    w.advance(2)
    nodes = {n["metadata"]["name"]: n for n in w.store.list("nodes")[0]}
    assert "c-l4-0" in nodes and len(nodes) == 2  # both pods share one ordered 8-GPU node
    assert nodes["c-l4-0"]["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-L4"
    assert nodes["c-l4-0"]["metadata"]["annotations"]["sim.gpufed.io/price-per-gpu-hour"] == "0.85"
    assert {scheduled(p) for p in w.pods()} == {"c-l4-0"}
    w.advance(61)  # the pods finish
    assert w.job("burst")["status"]["succeeded"] == 2
    w.advance(250)
    assert w.store.count("nodes") == 2  # idle, but not for long enough yet
    w.advance(60)
    assert {n["metadata"]["name"] for n in w.store.list("nodes")[0]} == {"c-h-0"}


def test_autoscaler_respects_max_and_pod_constraints() -> None:
    w = world({"name": "c", "tier": "cloud", "cloudPools": [cloud(max_nodes=1)]})
    w.store.create("jobs.batch", batch_job("two", {"nvidia.com/gpu": 8}, parallelism=2, completions=2))
    w.store.create(
        "jobs.batch",
        batch_job(
            "h100-only",
            {"nvidia.com/gpu": 1},
            pod_extra={"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        ),
    )
    w.settle()
    assert len(w.events("TriggeredScaleUp")) == 1
    assert w.events("NotTriggerScaleUp")
    w.advance(130)
    assert w.store.count("nodes") == 1
    placed = [p for p in w.pods() if scheduled(p)]
    assert len(placed) == 1 and placed[0]["metadata"]["labels"]["job-name"] == "two"


def test_kueue_reserves_quota_for_the_pods_a_job_can_run_at_once_not_its_parallelism() -> None:
    """Kueue's pod set count is min(parallelism, completions): a Job that will never run more pods than
    its completions must not hold (and so block others from) quota for idle parallelism."""
    w = world({"name": "c", "nodePools": [pool("h", 2)], "kueue": kueue(8)})
    w.store.create(
        "jobs.batch",
        batch_job(
            "wide",
            {"nvidia.com/gpu": 2},
            duration=100,
            suspend=True,
            labels=QUEUE,
            parallelism=4,
            completions=2,
        ),
    )
    w.store.create(
        "jobs.batch", batch_job("other", {"nvidia.com/gpu": 4}, duration=100, suspend=True, labels=QUEUE)
    )
    w.settle()
    (wide,) = [
        x for x in w.store.list(WL, "default")[0] if x["metadata"]["ownerReferences"][0]["name"] == "wide"
    ]
    assert wide["spec"]["podSets"][0]["count"] == 2
    assert wide["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] == {"nvidia.com/gpu": "4"}
    assert w.job("other")["spec"]["suspend"] is False  # 4 + 4 fits the 8 GPUs


def _prio_job(name: str, gpus: int, priority: str, queue: str = "gpu") -> dict[str, Any]:
    job = batch_job(
        name,
        {"nvidia.com/gpu": gpus},
        duration=10_000,
        suspend=True,
        labels={"kueue.x-k8s.io/queue-name": queue},
        pod_extra={"priorityClassName": priority, "terminationGracePeriodSeconds": 5},
    )
    return job


def _priority_classes(w: World) -> None:
    for name, value in (("low", 100), ("high", 1000)):
        w.store.create(
            "priorityclasses.scheduling.k8s.io",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            },
        )


def _workload_of(w: World, job: str) -> dict[str, Any]:
    uid = w.job(job)["metadata"]["uid"]
    (wl,) = [x for x in w.store.list(WL)[0] if x["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == uid]
    return wl


def test_kueue_preempts_a_lower_priority_workload_within_the_cluster_queue() -> None:
    spec = kueue(8)
    spec["clusterQueues"][0]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    w = world({"name": "c", "nodePools": [pool("h", 1)], "kueue": spec})
    _priority_classes(w)
    w.store.create("jobs.batch", _prio_job("cheap", 8, "low"))
    w.advance(5)
    assert w.job("cheap")["spec"]["suspend"] is False
    w.store.create("jobs.batch", _prio_job("urgent", 8, "high"))
    w.settle()
    victim = _workload_of(w, "cheap")
    evicted = job_condition(victim, "Evicted")
    preempted = job_condition(victim, "Preempted")
    urgent_wl = _workload_of(w, "urgent")
    assert evicted is not None and evicted["reason"] == "Preempted"
    assert preempted is not None and preempted["reason"] == "InClusterQueue"
    assert preempted["message"] == (
        f"Preempted to accommodate a workload (UID: {urgent_wl['metadata']['uid']}, JobUID: "
        f"{w.job('urgent')['metadata']['uid']}) due to prioritization in the ClusterQueue; "
        "preemptor path: /gpu-cq; preemptee path: /gpu-cq"
    )
    assert w.job("cheap")["spec"]["suspend"] is True
    assert "nodeSelector" not in w.job("cheap")["spec"]["template"]["spec"]  # the flavor's labels are undone
    assert w.events("EvictedDueToPreempted") and w.events("PreemptedWorkload")
    w.advance(30)  # the evicted pods terminate, the quota goes to the preemptor
    victim = _workload_of(w, "cheap")
    assert "admission" not in victim["status"]
    quota = job_condition(victim, "QuotaReserved")
    assert quota is not None and quota["status"] == "False" and quota["reason"] == "Pending"
    assert job_condition(_workload_of(w, "urgent"), "Admitted") is not None
    assert w.job("urgent")["spec"]["suspend"] is False
    running = [p for p in w.pods() if p["status"]["phase"] == "Running"]
    assert [p["metadata"]["labels"]["job-name"] for p in running] == ["urgent"]


def test_without_a_preemption_policy_kueue_only_waits() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)], "kueue": kueue(8)})
    _priority_classes(w)
    w.store.create("jobs.batch", _prio_job("cheap", 8, "low"))
    w.advance(5)
    w.store.create("jobs.batch", _prio_job("urgent", 8, "high"))
    w.advance(30)
    assert job_condition(_workload_of(w, "cheap"), "Evicted") is None
    assert w.job("urgent")["spec"]["suspend"] is True


def test_kueue_reclaims_borrowed_quota_within_the_cohort() -> None:
    spec = kueue(4)
    spec["clusterQueues"][0].update(cohort="research")
    other = {
        "name": "team-b",
        "cohort": "research",
        "preemption": {"reclaimWithinCohort": "Any"},
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 4}]}],
            }
        ],
    }
    spec["clusterQueues"].append(other)
    spec["localQueues"].append({"name": "b", "namespace": "default", "clusterQueue": "team-b"})
    w = world({"name": "c", "nodePools": [pool("h", 1)], "kueue": spec})
    _priority_classes(w)
    w.store.create("jobs.batch", _prio_job("borrower", 8, "high"))  # 4 own + 4 borrowed from team-b
    w.advance(5)
    assert w.job("borrower")["spec"]["suspend"] is False
    w.store.create("jobs.batch", _prio_job("owner", 4, "low", queue="b"))
    w.settle()
    preempted = job_condition(_workload_of(w, "borrower"), "Preempted")
    assert preempted is not None and preempted["reason"] == "InCohortReclamation"
    assert (
        "reclamation within the cohort; preemptor path: /research/team-b; preemptee path: /research/gpu-cq"
        in (preempted["message"])
    )
    w.advance(30)
    assert w.job("owner")["spec"]["suspend"] is False


def test_lower_or_newer_equal_priority_never_preempts_an_older_workload_of_the_same_priority() -> None:
    spec = kueue(8)
    spec["clusterQueues"][0]["preemption"] = {"withinClusterQueue": "LowerOrNewerEqualPriority"}
    w = world({"name": "c", "nodePools": [pool("h", 1)], "kueue": spec})
    _priority_classes(w)
    w.store.create("jobs.batch", _prio_job("older", 8, "high"))
    w.clock.advance(1)
    w.store.create("jobs.batch", _prio_job("newer", 8, "high"))
    w.settle()
    # admission is by priority then creation: "older" runs, and "newer" (same priority, created later) may
    # not preempt it
    assert w.job("older")["spec"]["suspend"] is False
    assert job_condition(_workload_of(w, "older"), "Evicted") is None
    assert w.job("newer")["spec"]["suspend"] is True
