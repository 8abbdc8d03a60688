"""Example objects of the workload kinds (JobSet, TrainJob, PyTorchJob, RayJob) for the kinds' tests."""

from __future__ import annotations

import copy
from typing import Any


def container(gpus: int | str | None = 1, name: str = "main", **resources: Any) -> dict[str, Any]:
    limits: dict[str, Any] = dict(resources)
    if gpus is not None:
        limits["nvidia.com/gpu"] = gpus
    out: dict[str, Any] = {"name": name, "image": "busybox:1.36", "command": ["sh", "-c", "true"]}
    if limits:
        out["resources"] = {"limits": limits}
    return out


def pod_template(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"spec": {"restartPolicy": "Never", "containers": list(containers), **spec}}


def jobset(leader_gpus: int | None = 1, workers: int = 2, worker_gpus: int | None = 1) -> dict[str, Any]:
    def rjob(name: str, parallelism: int, gpus: int | None) -> dict[str, Any]:
        return {
            "name": name,
            "replicas": 1,
            "template": {
                "spec": {
                    "parallelism": parallelism,
                    "completions": parallelism,
                    "backoffLimit": 0,
                    "template": pod_template(container(gpus)),
                }
            },
        }

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": {"replicatedJobs": [rjob("leader", 1, leader_gpus), rjob("workers", workers, worker_gpus)]},
    }


def pytorchjob(workers: int = 2, gpus: int = 1) -> dict[str, Any]:
    def replica(n: int) -> dict[str, Any]:
        return {"replicas": n, "restartPolicy": "Never", "template": pod_template(container(gpus, "pytorch"))}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ddp"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(workers)}},
    }


def rayjob(workers: int = 2, gpus: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "tune"},
        "spec": {
            "entrypoint": "python -c 'print(1)'",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": {
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": pod_template(container(None, "ray-head")),
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "gpu",
                        "replicas": workers,
                        "rayStartParams": {},
                        "template": pod_template(container(gpus, "ray-worker")),
                    }
                ],
            },
        },
    }


def trainjob(nodes: int = 2, gpus: int = 1, runtime: str = "torch-distributed") -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "fine-tune"},
        "spec": {
            "runtimeRef": {"name": runtime},
            "trainer": {
                "image": "busybox:1.36",
                "command": ["sh", "-c", "true"],
                "numNodes": nodes,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": gpus}},
            },
        },
    }


def cluster_training_runtime(name: str = "torch-distributed") -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "replicas": 1,
                            "template": {
                                "spec": {
                                    "template": pod_template(container(None, "node")),
                                }
                            },
                        }
                    ]
                }
            },
        },
    }


def edited(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy with the dotted path (list indexes as numbers) set to value (None removes it)."""
    out = copy.deepcopy(obj)
    keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
    holder: Any = out
    for k in keys[:-1]:
        holder = holder[k]
    if value is None:
        del holder[keys[-1]]
    else:
        holder[keys[-1]] = value
    return out
