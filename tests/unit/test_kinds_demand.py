"""Table tests: the demand derived from each workload kind (roles, pods, GPUs, MIG, gang, priority, queue),
the native submission it becomes, and the refusals that name the kind's field."""

from __future__ import annotations

from typing import Any

import pytest

from broker.core.errors import InvalidRequest
from broker.intake.parse import spec_of
from broker.workload.kinds import registry
from tests.unit.kind_objects import container, edited, jobset, pod_template, pytorchjob, rayjob, trainjob

RJ1 = "spec.replicatedJobs.1.template.spec.template.spec"


def _demand(obj: dict[str, Any]) -> Any:
    adapter = registry.kind_of(obj)
    assert adapter is not None
    return adapter.demand(obj)


@pytest.mark.parametrize(
    ("obj", "roles", "gang", "pods", "gpus"),
    [
        (jobset(), [("leader", 1, 1), ("workers", 2, 1)], ("leader", "workers"), 3, 1),
        (jobset(leader_gpus=None), [("leader", 1, 0), ("workers", 2, 1)], ("leader", "workers"), 2, 1),
        (
            edited(jobset(), "spec.replicatedJobs.1.replicas", 3),
            [("leader", 1, 1), ("workers", 6, 1)],
            None,
            7,
            1,
        ),
        (pytorchjob(workers=3, gpus=2), [("Master", 1, 2), ("Worker", 3, 2)], ("Master", "Worker"), 4, 2),
        (rayjob(workers=2), [("head", 1, 0), ("gpu", 2, 1)], ("head", "gpu"), 2, 1),
        (
            edited(rayjob(), "spec.rayClusterSpec.workerGroupSpecs.0.numOfHosts", 2),
            [("head", 1, 0), ("gpu", 4, 1)],
            None,
            4,
            1,
        ),
        (trainjob(nodes=4, gpus=8), [("node", 4, 8)], ("node",), 4, 8),
        (edited(trainjob(), "spec.trainer.numNodes", None), [("node", 1, 1)], ("node",), 1, 1),
    ],
)
def test_demand_of_each_kind(
    obj: dict[str, Any], roles: list[tuple[str, int, int]], gang: tuple[str, ...] | None, pods: int, gpus: int
) -> None:
    demand = _demand(obj)
    assert [(r.name, r.pods, r.pod.gpus) for r in demand.roles] == roles
    if gang is not None:
        assert demand.gang == gang
    native, problems, _ = registry.to_native_all(obj)
    assert problems == []
    assert (native["pods"], native["gpus"]) == (pods, gpus)


def test_mig_priority_and_queue() -> None:
    obj = jobset()
    for i in (0, 1):
        tmpl = obj["spec"]["replicatedJobs"][i]["template"]["spec"]["template"]
        tmpl["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": 2}}
        tmpl["spec"]["priorityClassName"] = "high"
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a", "app": "x"}
    demand = _demand(obj)
    assert demand.priority_class == "high"
    assert demand.queue == "team-a"
    native, problems, _ = registry.to_native_all(obj)
    assert problems == []
    assert native["mig"] == {"profile": "1g.10gb", "slices": 2}
    assert native["priorityClass"] == "high"
    assert native["labels"] == {"app": "x"}
    pt = edited(pytorchjob(), "spec.runPolicy", {"schedulingPolicy": {"priorityClass": "low", "queue": "q"}})
    assert (_demand(pt).priority_class, _demand(pt).queue) == ("low", "q")


def test_spec_of_reads_a_kind_and_keeps_the_object_without_managed_by() -> None:
    obj = edited(rayjob(), "spec.managedBy", "gpufed.io/broker")
    spec = spec_of(obj)
    assert (spec.name, spec.pods, spec.gpus) == ("tune", 2, 1)
    request = registry.with_workload(obj, spec.to_request())
    assert request.workload is not None
    assert request.workload["kind"] == "RayJob"
    assert "managedBy" not in request.workload["spec"]
    assert registry.api_of(request) == "ray.io/v1"
    train = registry.with_workload(trainjob(), spec_of(trainjob()).to_request())
    assert registry.runtime_of(train) == "torch-distributed"


@pytest.mark.parametrize(
    ("obj", "field", "words"),
    [
        (
            edited(jobset(), f"{RJ1}.containers.0.resources.limits", {"nvidia.com/gpu": 2}),
            f"{RJ1.replace('.1.', '[1].')}.containers[0].resources.limits[nvidia.com/gpu]",
            "same GPUs per pod",
        ),
        (
            edited(jobset(), f"{RJ1}.containers.0.resources.limits", {"nvidia.com/gpu": "1.5"}),
            f"{RJ1.replace('.1.', '[1].')}.containers[0].resources.limits[nvidia.com/gpu]",
            "whole number",
        ),
        (
            edited(
                jobset(),
                f"{RJ1}.containers.0.resources.limits",
                {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 1},
            ),
            f"{RJ1.replace('.1.', '[1].')}.containers[0].resources.limits",
            "one GPU resource",
        ),
        (
            edited(jobset(), f"{RJ1}.resourceClaims", [{"name": "gpu"}]),
            f"{RJ1.replace('.1.', '[1].')}.resourceClaims[0].resourceClaimTemplateName",
            "required",
        ),
        (
            edited(jobset(), "spec.replicatedJobs.1.replicas", 0),
            "spec.replicatedJobs[1].replicas",
            "integer from 1",
        ),
        (edited(jobset(), "spec.replicatedJobs", []), "spec.replicatedJobs", "at least one"),
        (edited(jobset(), "spec.replicatedJobs.1.name", "leader"), "spec.replicatedJobs[1].name", "twice"),
        (
            edited(jobset(), "spec.replicatedJobs.1.template.spec.completions", 5),
            "spec.replicatedJobs[1].template.spec.completions",
            "parallelism",
        ),
        (
            edited(jobset(), "spec.managedBy", "kueue.x-k8s.io/multikueue"),
            "spec.managedBy",
            "another controller",
        ),
        (edited(jobset(), "spec.suspend", True), "spec.suspend", "suspended"),
        (
            jobset(leader_gpus=None, worker_gpus=None),
            "spec.replicatedJobs[0].template.spec.template.spec.containers[0].resources.limits",
            "nothing to place",
        ),
        (
            edited(pytorchjob(), "spec.pytorchReplicaSpecs.Master.replicas", 2),
            "spec.pytorchReplicaSpecs.Master.replicas",
            "one Master",
        ),
        (
            edited(
                pytorchjob(), "spec.pytorchReplicaSpecs.Worker.template", pod_template(container(1, "main"))
            ),
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers",
            "'pytorch'",
        ),
        (
            edited(pytorchjob(), "spec.pytorchReplicaSpecs.Chief", {"replicas": 1}),
            "spec.pytorchReplicaSpecs.Chief",
            "unknown replica type",
        ),
        (edited(rayjob(), "spec.entrypoint", None), "spec.entrypoint", "required"),
        (
            edited(rayjob(), "spec.clusterSelector", {"ray.io/cluster": "c"}),
            "spec.clusterSelector",
            "creates the RayCluster",
        ),
        (edited(rayjob(), "spec.submissionMode", "InteractiveMode"), "spec.submissionMode", "one of"),
        (
            edited(rayjob(), "spec.rayClusterSpec.workerGroupSpecs.0.groupName", None),
            "spec.rayClusterSpec.workerGroupSpecs[0].groupName",
            "required",
        ),
        (edited(trainjob(), "spec.runtimeRef", {}), "spec.runtimeRef.name", "required"),
        (edited(trainjob(), "spec.runtimeRef.kind", "Runtime"), "spec.runtimeRef.kind", "one of"),
        (edited(trainjob(), "spec.trainer.numNodes", 0), "spec.trainer.numNodes", "integer from 1"),
        (
            edited(trainjob(), "spec.trainer.resourcesPerNode", None),
            "spec.trainer.resourcesPerNode.limits",
            "nothing to place",
        ),
        (edited(jobset(), "metadata.name", None), "metadata.name", "required"),
        (
            edited(jobset(), "metadata.annotations", {"gpufed.io/colour": "red"}),
            "metadata.annotations[gpufed.io/colour]",
            "unknown gpufed annotation",
        ),
        (edited(jobset(), "extra", 1), "extra", "unknown top-level"),
    ],
)
def test_refusals_name_the_field(obj: dict[str, Any], field: str, words: str) -> None:
    _, problems, _ = registry.to_native_all(obj)
    assert problems, "expected a refusal"
    assert problems[0].field == field
    assert words in problems[0].detail


def test_jobspec_refusal_is_said_in_the_kinds_field() -> None:
    obj = edited(jobset(), f"{RJ1}.containers.0.resources.limits", {"nvidia.com/gpu": 65})
    with pytest.raises(Exception) as err:
        spec_of(obj)
    assert "spec.replicatedJobs[1].template.spec.template.spec.containers[0].resources.limits" in str(
        err.value
    )


def test_annotations_are_read_like_a_jobs() -> None:
    obj = edited(
        rayjob(),
        "metadata.annotations",
        {"gpufed.io/gpu-products": "H100-80GB", "gpufed.io/failover": "never"},
    )
    native, problems, _ = registry.to_native_all(obj)
    assert problems == []
    assert native["gpuProducts"] == ["H100-80GB"]
    assert native["failover"] == "never"
    with pytest.raises(InvalidRequest):
        registry.workload_of({"apiVersion": "batch/v1", "kind": "Job"})
