"""The scheduler: resources (GPU, MIG), selectors/affinity, taints, cordon, NUMA alignment, gangs, priority."""

from __future__ import annotations

from typing import Any

from kubesim.controllers.pods import effective_requests
from kubesim.store import Obj
from tests.unit.kubesim.world import bare_pod, batch_job, job_condition, pod_condition, pool, scheduled, world

NRT = "noderesourcetopologies.topology.node.k8s.io"


def test_unschedulable_pod_gets_the_kube_scheduler_message_and_an_event() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 3)]})
    w.store.create("pods", bare_pod("big", {"nvidia.com/gpu": 16}))
    w.settle()
    pod = w.pod("big")
    cond = pod_condition(pod, "PodScheduled")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert cond["message"] == (
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
        " preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
    )
    (event,) = w.events("FailedScheduling")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["name"] == "big"
    assert pod["status"]["phase"] == "Pending"


def test_bound_pod_gets_node_name_condition_and_scheduled_event() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    w.store.create("pods", bare_pod("p", {"nvidia.com/gpu": 8}))
    w.settle()
    pod = w.pod("p")
    assert scheduled(pod) == "c-h-0"
    assert pod_condition(pod, "PodScheduled")["status"] == "True"
    (event,) = w.events("Scheduled")
    assert event["message"] == "Successfully assigned default/p to c-h-0"


def test_gpus_already_requested_by_running_pods_are_not_offered_again() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    for i in range(3):
        w.store.create("pods", bare_pod(f"p{i}", {"nvidia.com/gpu": 3}))
    w.settle()
    assert [bool(scheduled(p)) for p in w.pods()] == [True, True, False]
    w.advance(31)  # the first two finish, freeing their GPUs
    assert scheduled(w.pod("p2")) == "c-h-0"


def test_taints_keep_pods_away_unless_tolerated() -> None:
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    w = world({"name": "c", "nodePools": [pool("h", 1, taints=[taint])]})
    w.store.create("pods", bare_pod("intolerant", {"nvidia.com/gpu": 1}))
    w.store.create(
        "pods",
        bare_pod(
            "tolerant", {"nvidia.com/gpu": 1}, tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]
        ),
    )
    w.store.create(
        "pods",
        bare_pod(
            "equal",
            {"nvidia.com/gpu": 1},
            tolerations=[
                {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
            ],
        ),
    )
    w.settle()
    assert scheduled(w.pod("tolerant")) == "c-h-0"
    assert scheduled(w.pod("equal")) == "c-h-0"
    assert pod_condition(w.pod("intolerant"), "PodScheduled")["message"] == (
        "0/1 nodes are available: 1 node(s) had untolerated taint {nvidia.com/gpu: present}."
        " preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )


def test_required_node_affinity_and_node_selector_are_honoured() -> None:
    w = world({"name": "c", "nodePools": [pool("h100", 1), pool("a100", 1, "A100-80GB")]})

    def affinity(
        op: str, values: list[str] | None = None, key: str = "nvidia.com/gpu.product"
    ) -> dict[str, Any]:
        expr: dict[str, Any] = {"key": key, "operator": op}
        if values is not None:
            expr["values"] = values
        return {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expr]}]
                }
            }
        }

    w.store.create(
        "pods", bare_pod("in", {"nvidia.com/gpu": 1}, affinity=affinity("In", ["NVIDIA-A100-SXM4-80GB"]))
    )
    w.store.create(
        "pods",
        bare_pod("notin", {"nvidia.com/gpu": 1}, affinity=affinity("NotIn", ["NVIDIA-A100-SXM4-80GB"])),
    )
    w.store.create(
        "pods",
        bare_pod("gt", {"nvidia.com/gpu": 1}, affinity=affinity("Gt", ["81000"], "nvidia.com/gpu.memory")),
    )
    w.store.create(
        "pods",
        bare_pod("lt", {"nvidia.com/gpu": 1}, affinity=affinity("Lt", ["81600"], "nvidia.com/gpu.memory")),
    )
    w.store.create(
        "pods", bare_pod("missing", {"nvidia.com/gpu": 1}, affinity=affinity("Exists", key="nope"))
    )
    w.store.create(
        "pods", bare_pod("absent", {"nvidia.com/gpu": 1}, affinity=affinity("DoesNotExist", key="nope"))
    )
    w.store.create(
        "pods",
        bare_pod(
            "selector",
            {"nvidia.com/gpu": 1},
            nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        ),
    )
    w.settle()
    assert scheduled(w.pod("in")) == "c-a100-0"
    assert scheduled(w.pod("notin")) == "c-h100-0"
    assert scheduled(w.pod("selector")) == "c-h100-0"
    assert scheduled(w.pod("lt")) == "c-h100-0"  # 81559 < 81600 < 81920
    assert scheduled(w.pod("gt")) != ""
    assert scheduled(w.pod("absent")) != ""
    assert pod_condition(w.pod("missing"), "PodScheduled")["message"] == (
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
        " preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )


def test_preferred_affinity_picks_the_preferred_node() -> None:
    w = world({"name": "c", "nodePools": [pool("a", 1), pool("b", 1)]})
    pref = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["c-b-0"]}
                        ]
                    },
                }
            ]
        }
    }
    w.store.create("pods", bare_pod("p", {"nvidia.com/gpu": 1}, affinity=pref))
    w.settle()
    assert scheduled(w.pod("p")) == "c-b-0"


def test_cordoned_and_not_ready_nodes_are_skipped() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 3)]})
    w.store.mutate("nodes", "", "c-h-0", lambda n: n["spec"].__setitem__("unschedulable", True))

    def not_ready(node: dict[str, Any]) -> None:
        for c in node["status"]["conditions"]:
            if c["type"] == "Ready":
                c["status"] = "False"

    w.store.mutate("nodes", "", "c-h-1", not_ready)
    w.store.create("pods", bare_pod("p", {"nvidia.com/gpu": 8}))
    w.store.create("pods", bare_pod("q", {"nvidia.com/gpu": 8}))
    w.settle()
    assert scheduled(w.pod("p")) == "c-h-2"
    assert pod_condition(w.pod("q"), "PodScheduled")["message"] == (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint "
        "{node.kubernetes.io/not-ready: }, 1 node(s) were unschedulable. preemption: 0/3 nodes are available: "
        "1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling."
    )


def test_mig_mixed_and_single_resources_are_scheduled() -> None:
    w = world(
        {
            "name": "c",
            "nodePools": [
                pool("mixed", 1, "A100-80GB", gpu={"mig": {"strategy": "mixed", "config": "all-balanced"}}),
                pool("single", 1, "A100-40GB", gpu={"mig": {"strategy": "single", "config": "all-1g.5gb"}}),
            ],
        }
    )
    for i in range(3):
        w.store.create("pods", bare_pod(f"slice{i}", {"nvidia.com/mig-3g.40gb": 3}))
    w.store.create(
        "pods",
        bare_pod(
            "onegig",
            {"nvidia.com/gpu": 50},
            nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"},
        ),
    )
    w.settle()
    assert [scheduled(w.pod(f"slice{i}")) for i in range(3)] == ["c-mixed-0", "c-mixed-0", ""]
    assert pod_condition(w.pod("slice2"), "PodScheduled")["message"] == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/mig-3g.40gb."
        " preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )
    assert scheduled(w.pod("onegig")) == "c-single-0"


def test_numa_aligned_pod_lands_only_where_one_zone_has_room() -> None:
    numa = {"zones": 2, "policy": "single-numa-node", "scope": "pod"}
    w = world({"name": "c", "nodePools": [pool("h", 2, numa=numa)]})
    # c-h-0: 3 GPUs used in each zone (6 free in total, but only 1 per zone)
    for zone in ("node-0", "node-1"):
        pod = bare_pod(f"filler-{zone}", {"nvidia.com/gpu": 3}, duration=1000, nodeName="c-h-0")
        pod["metadata"]["annotations"]["sim.gpufed.io/numa-zone"] = zone
        w.store.create("pods", pod)
    w.settle()
    w.store.create("pods", bare_pod("aligned", {"nvidia.com/gpu": 2}, schedulerName="topo-aware-scheduler"))
    w.settle()
    aligned = w.pod("aligned")
    assert scheduled(aligned) == "c-h-1"
    zone = aligned["metadata"]["annotations"]["sim.gpufed.io/numa-zone"]
    nrt = w.store.get(NRT, "", "c-h-1")
    available = {
        z["name"]: {r["name"]: r["available"] for r in z["resources"]}["nvidia.com/gpu"] for z in nrt["zones"]
    }
    assert available[zone] == "2"
    assert sorted(available.values()) == ["2", "4"]
    busy = w.store.get(NRT, "", "c-h-0")
    assert [{r["name"]: r["available"] for r in z["resources"]}["nvidia.com/gpu"] for z in busy["zones"]] == [
        "1",
        "1",
    ]
    # a 5-GPU pod can never be aligned on 4-GPU zones
    w.store.create("pods", bare_pod("too-wide", {"nvidia.com/gpu": 5}, schedulerName="topo-aware-scheduler"))
    w.settle()
    msg = pod_condition(w.pod("too-wide"), "PodScheduled")["message"]
    assert "node(s) cannot align pod" in msg


def test_kubelet_rejects_an_unalignable_pod_from_the_default_scheduler() -> None:
    numa = {"zones": 2, "policy": "single-numa-node", "scope": "pod"}
    w = world({"name": "c", "nodePools": [pool("h", 1, numa=numa)]})
    w.store.create("pods", bare_pod("wide", {"nvidia.com/gpu": 6}))
    w.settle()
    pod = w.pod("wide")
    assert scheduled(pod) == "c-h-0"
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["reason"] == "TopologyAffinityError"


def _gang(w: Any, name: str, members: int, gpus: int, min_member: int) -> None:
    w.store.create(
        "podgroups.scheduling.x-k8s.io",
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"minMember": min_member},
        },
    )
    for i in range(members):
        w.store.create(
            "pods",
            bare_pod(
                f"{name}-{i}",
                {"nvidia.com/gpu": gpus},
                labels={"scheduling.x-k8s.io/pod-group": name},
                schedulerName="scheduler-plugins-scheduler",
            ),
        )


def test_a_gang_that_cannot_fit_stays_pending_whole() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 2)]})
    _gang(w, "big", members=3, gpus=8, min_member=3)
    w.settle()
    pods = w.pods()
    assert [scheduled(p) for p in pods] == ["", "", ""]
    for p in pods:
        cond = pod_condition(p, "PodScheduled")
        assert cond["reason"] == "Unschedulable"
        assert "pod group big rejected: 2/3 members fit" in cond["message"]


def test_a_gang_that_fits_is_bound_together() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 2)]})
    _gang(w, "ok", members=4, gpus=4, min_member=4)
    w.settle()
    assert sorted(scheduled(p) for p in w.pods()) == ["c-h-0", "c-h-0", "c-h-1", "c-h-1"]
    assert w.store.get("podgroups.scheduling.x-k8s.io", "default", "ok")["status"]["phase"] == "Running"


def test_a_gang_waits_for_its_members() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 2)]})
    _gang(w, "partial", members=2, gpus=1, min_member=3)
    w.settle()
    assert [scheduled(p) for p in w.pods()] == ["", ""]
    assert "cannot find enough sibling pods" in pod_condition(w.pod("partial-0"), "PodScheduled")["message"]


def test_higher_priority_pods_are_scheduled_first() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    w.store.create("pods", bare_pod("early-low", {"nvidia.com/gpu": 8}, priorityClassName="gpu-low"))
    w.store.create("pods", bare_pod("late-high", {"nvidia.com/gpu": 8}, priorityClassName="gpu-high"))
    w.settle()
    assert scheduled(w.pod("late-high")) == "c-h-0"
    assert scheduled(w.pod("early-low")) == ""


def test_scheduling_gates_hold_a_pod() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    w.store.create(
        "pods", bare_pod("gated", {"nvidia.com/gpu": 1}, schedulingGates=[{"name": "example.com/wait"}])
    )
    w.settle()
    assert pod_condition(w.pod("gated"), "PodScheduled")["reason"] == "SchedulingGated"
    w.store.mutate("pods", "default", "gated", lambda p: p["spec"].pop("schedulingGates"))
    w.settle()
    assert scheduled(w.pod("gated")) == "c-h-0"


def test_pods_of_other_schedulers_are_left_alone() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    w.store.create("pods", bare_pod("volcano", {"nvidia.com/gpu": 1}, schedulerName="volcano"))
    w.settle()
    assert scheduled(w.pod("volcano")) == ""
    assert "conditions" not in w.pod("volcano").get("status", {})


def test_effective_requests_take_init_containers_and_sidecars_into_account() -> None:
    pod = {
        "spec": {
            "initContainers": [
                {"name": "setup", "resources": {"requests": {"cpu": "4", "memory": "1Gi"}}},
                {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
                {"name": "late-init", "resources": {"requests": {"cpu": "2"}}},
            ],
            "containers": [
                {"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "1"}}},
                {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}},
            ],
        }
    }
    req = effective_requests(pod)
    assert req["cpu"] == 4.0  # max(sum 2 + sidecar 0.5, setup 4, late-init 2 + sidecar 0.5)
    assert req["memory"] == 2 * 2**30
    assert req["nvidia.com/gpu"] == 2.0


def _prio_pod(name: str, priority: int, gpus: int = 8, **spec: Any) -> Obj:
    pod = bare_pod(name, {"nvidia.com/gpu": gpus}, duration=10_000)
    pod["spec"].update(priority=priority, terminationGracePeriodSeconds=30, **spec)
    return pod


def test_a_high_priority_pod_preempts_the_lowest_priority_victims_and_runs() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 2)]})
    w.store.create("pods", _prio_pod("mid", 500))
    w.store.create("pods", _prio_pod("low", 100))
    w.settle()
    low_node = scheduled(w.pod("low"))
    w.store.create("pods", _prio_pod("urgent", 1000))
    w.settle()
    urgent = w.pod("urgent")
    assert urgent["status"]["nominatedNodeName"] == low_node and not scheduled(urgent)
    victim = w.pod("low")
    assert victim["metadata"]["deletionTimestamp"]
    disruption = pod_condition(victim, "DisruptionTarget")
    assert disruption["reason"] == "PreemptionByScheduler"
    assert disruption["message"] == "default-scheduler: preempting to accommodate a higher priority pod"
    assert "deletionTimestamp" not in w.pod("mid")["metadata"]
    (event,) = w.events("Preempted")
    assert event["message"] == f"Preempted by pod {urgent['metadata']['uid']} on node {low_node}"
    w.advance(31)  # the victim's grace period
    assert w.store.find("pods", "default", "low") is None
    urgent = w.pod("urgent")
    assert scheduled(urgent) == low_node and urgent["status"]["phase"] == "Running"


def test_preemption_policy_never_waits_instead_of_evicting() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    w.store.create("pods", _prio_pod("low", 100))
    w.settle()
    w.store.create("pods", _prio_pod("polite", 1000, preemptionPolicy="Never"))
    w.settle()
    assert "deletionTimestamp" not in w.pod("low")["metadata"]
    assert not w.pod("polite")["status"].get("nominatedNodeName")
    assert pod_condition(w.pod("polite"), "PodScheduled")["reason"] == "Unschedulable"


def test_equal_priority_pods_are_never_victims() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    w.store.create("pods", _prio_pod("first", 500))
    w.settle()
    w.store.create("pods", _prio_pod("second", 500))
    w.settle()
    assert "deletionTimestamp" not in w.pod("first")["metadata"]
    assert not w.events("Preempted")


def test_the_fewest_victims_are_taken() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    for i in range(4):
        w.store.create("pods", _prio_pod(f"small-{i}", 100, gpus=2))
    w.settle()
    w.store.create("pods", _prio_pod("needs-four", 1000, gpus=4))
    w.settle()
    terminating = [p for p in w.pods() if p["metadata"].get("deletionTimestamp")]
    assert len(terminating) == 2


def test_a_preempted_job_pod_ignored_by_its_pod_failure_policy_does_not_fail_the_job() -> None:
    w = world({"name": "c", "nodePools": [pool("h", 1)]})
    job = batch_job("tolerant", {"nvidia.com/gpu": 8}, duration=10_000, backoffLimit=0)
    job["spec"]["template"]["spec"].update(priority=100, terminationGracePeriodSeconds=10)
    job["spec"]["podFailurePolicy"] = {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
    }
    w.store.create("jobs.batch", job)
    w.settle()
    w.store.create("pods", _prio_pod("urgent", 1000))
    w.advance(11)
    assert w.pod("urgent")["status"]["phase"] == "Running"
    tolerant = w.job("tolerant")
    assert "failed" not in tolerant["status"] and job_condition(tolerant, "Failed") is None
    pending = [
        p for p in w.pods() if p["metadata"]["labels"].get("job-name") == "tolerant" and not scheduled(p)
    ]
    assert len(pending) == 1  # the replacement waits for room
