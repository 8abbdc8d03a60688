"""Jobs on broken GPUs (broker.workload.gpu_moves) and the level-2 anti-affinity they get
(broker.workload.manifest): tables per rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.core.gpu_health import NODE_WIDE, ClusterGpuHealth, GpuFault, GpuState, NodeQuarantine
from broker.core.model import ClusterTraits, JobRecord, JobRequest, JobState, Placement
from broker.workload import gpu_moves
from broker.workload.manifest import build_workload

XID79 = "XID 79 (GPU has fallen off the bus)"


def fault(pod: str | None = "default/train-j1-0-abcde", **kw: object) -> GpuFault:
    base = GpuFault("n0", 3, GpuState.UNHEALTHY, XID79, 100.0, "dcgm", 79, True, pod)
    return replace(base, **kw)  # type: ignore[arg-type]


def job(name: str = "train-j1-0", state: JobState = JobState.RUNNING, job_id: str = "j1") -> JobRecord:
    return JobRecord(job_id, JobRequest("train"), state=state, cluster="c", workload_name=name)


@pytest.mark.parametrize(
    ("f", "jobs", "found"),
    [
        (fault(), [job()], "j1"),
        (fault(), [job("train-j2-0", job_id="j2"), job()], "j1"),
        (fault(pod="default/other-abcde"), [job()], None),  # another pod (not the broker's)
        (fault(pod="team-a/train-j1-0-abcde"), [job()], None),  # another namespace
        (fault(pod=None), [job()], None),  # the exporter named no pod
        (fault(), [job(state=JobState.PLACED)], None),  # not running: nothing to move yet
        (fault(pod="default/train-j1-0x-abcde"), [job()], None),  # a prefix is not the job
    ],
)
def test_job_on_a_faulted_gpu(f: GpuFault, jobs: list[JobRecord], found: str | None) -> None:
    got = gpu_moves.job_on(f, jobs, lambda r: "default")
    assert (got.id if got else None) == found


@pytest.mark.parametrize(
    ("f", "movable"),
    [
        (fault(), True),
        (fault(quarantined=False), False),  # held back by the circuit breaker
        (fault(state=GpuState.RECOVERING), False),
        (fault(gpu=NODE_WIDE), False),
    ],
)
def test_movable(f: GpuFault, movable: bool) -> None:
    assert gpu_moves.movable(f) is movable


def test_the_reasons_name_the_gpu_and_the_xid() -> None:
    assert gpu_moves.move_reason(fault()) == f"moved off GPU 3 of node n0: {XID79}"
    assert gpu_moves.died_reason(fault()).startswith(f"its pod died on GPU 3 of node n0: {XID79}")


def test_avoided_nodes_are_the_jobs_own_and_the_clusters_quarantined_ones() -> None:
    record = gpu_moves.with_avoided(job(), fault(), until=500.0)
    record = gpu_moves.with_avoided(record, fault(), until=600.0)  # the same node: one entry, the later time
    assert record.avoid_nodes == (("c", "n0", 600.0),)
    health = ClusterGpuHealth(
        faults=(fault(node="n2", gpu=NODE_WIDE), fault(node="n3", gpu=NODE_WIDE, quarantined=False)),
        nodes=(NodeQuarantine("n1", "rule node-many-gpus", 0.0),),
    )
    assert gpu_moves.avoided_nodes(record, "c", health, now=550.0) == ("n0", "n1", "n2")
    assert gpu_moves.avoided_nodes(record, "c", ClusterGpuHealth(), now=700.0) == ()  # its time is up
    assert gpu_moves.avoided_nodes(record, "other", ClusterGpuHealth(), now=550.0) == ()


def test_level_2_keeps_the_pods_off_the_avoided_nodes() -> None:
    placement = Placement("c", "H100-80GB", "nvidia.com/gpu", 8, 1, 80, avoid_nodes=("n0", "n1"))
    spec = build_workload("j1", 1, JobRequest("train"), placement, ClusterTraits("c")).job["spec"][
        "template"
    ]["spec"]
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]
    assert {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n0", "n1"]} in term[
        "matchExpressions"
    ]
