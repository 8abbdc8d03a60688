"""The workload operators a simulated cluster may run (ClusterSpec.operators): JobSet, KubeRay, the
Kubeflow Training Operator (PyTorchJob) and Kubeflow Trainer (TrainJob).

Owns `hidden_groups(cluster)`: the API groups of the operators a cluster does not install (the API server
serves neither their discovery nor their routes, as a cluster without the CRD), and
`populate_operators(store, cluster)`: the ClusterTrainingRuntimes a Trainer install ships (one replicated
Job "node" running a container "node"; TrainJob.spec.trainer fills it in).
"""

from __future__ import annotations

import contextlib
from typing import Any

from kubesim.resources import OPERATOR_GROUPS
from kubesim.store import AlreadyExistsError, ObjectStore

__all__ = ["RUNTIMES", "hidden_groups", "populate_operators", "training_runtime"]

RUNTIMES = "clustertrainingruntimes.trainer.kubeflow.org"


def hidden_groups(cluster: Any) -> frozenset[str]:
    installed = set(getattr(cluster, "operators", ()) or ())
    return frozenset(group for op, group in OPERATOR_GROUPS.items() if op not in installed)


def training_runtime(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "replicas": 1,
                            "template": {
                                "metadata": {
                                    "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                                },
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "restartPolicy": "Never",
                                            "containers": [
                                                {
                                                    "name": "node",
                                                    "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
                                                }
                                            ],
                                        }
                                    }
                                },
                            },
                        }
                    ]
                }
            },
        },
    }


def populate_operators(store: ObjectStore, cluster: Any) -> None:
    if "trainer" not in (getattr(cluster, "operators", ()) or ()):
        return
    for name in getattr(cluster, "training_runtimes", ()) or ():
        with contextlib.suppress(AlreadyExistsError):
            store.create(RUNTIMES, training_runtime(name))
