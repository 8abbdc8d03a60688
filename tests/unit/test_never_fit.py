"""Never-fit at submit (broker/scheduler/never_fit.py): a warning only when no cluster could ever hold the
job, even empty, naming the largest cluster's fit."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.core.model import ClusterSummary, JobRequest, MigCapacity, ProductCapacity
from broker.scheduler.never_fit import never_fit_warning


def h100(free_hist: tuple[int, ...], allocated: int = 0, whole: int | None = None) -> ProductCapacity:
    free = sum(k * n for k, n in enumerate(free_hist))
    alloc = free + allocated
    return ProductCapacity(
        "H100-80GB", 81920, alloc, alloc, allocated, free, free_hist, nodes=sum(free_hist),
        whole_gpus=alloc if whole is None else whole,
    )  # fmt: skip


# onprem-a: 4 nodes x 8 H100, 2 GPUs in use on one of them; small: 2 nodes x 4
FLEET = [
    ClusterSummary("onprem-a", products=(h100((0,) * 6 + (1, 0, 3), allocated=2),),
                   mig=(MigCapacity("H100-80GB", "1g.10gb", "nvidia.com/mig-1g.10gb", 14, 14, 7),)),
    ClusterSummary("small", products=(h100((0, 0, 0, 0, 2)),)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("job", "warning"),
    [
        (JobRequest("fits-now", gpus_per_pod=8, pods=3), None),
        (JobRequest("fits-when-empty", gpus_per_pod=8, pods=4), None),  # 2 GPUs in use: waits, never warned
        (JobRequest("no-gpus"), None),
        (JobRequest("mig", mig_profile="1g.10gb", pods=14), None),
        (
            JobRequest("huge", gpus_per_pod=8, pods=100),
            "never fits: no declared cluster could hold 100 pods x 8 GPUs even empty; the largest: onprem-a "
            "with 32 H100-80GB (8 free on one node now); accepted, it waits for a cluster that can",
        ),
        (
            JobRequest("wide", gpus_per_pod=16),
            "never fits: no declared cluster could hold 1 pod x 16 GPUs even empty; the largest: onprem-a "
            "with 32 H100-80GB (8 free on one node now); accepted, it waits for a cluster that can",
        ),
        (
            JobRequest("no-such-profile", mig_profile="1g.18gb"),
            "never fits: no declared cluster offers 1g.18gb; accepted, it waits for a cluster that can",
        ),
        (
            JobRequest("too-many-slices", mig_profile="1g.10gb", pods=15),
            "never fits: no declared cluster could hold 15 pods x 1 1g.10gb even empty; the largest: onprem-a "
            "with 14 H100-80GB 1g.10gb; accepted, it waits for a cluster that can",
        ),
        (
            JobRequest("other-product", gpus_per_pod=1, gpu_products=("H200-141GB",)),
            "never fits: no declared cluster offers H200-141GB for 1 pod x 1 GPUs; accepted, it waits for a "
            "cluster that can",
        ),
    ],
    ids=lambda v: v.name if isinstance(v, JobRequest) else "",
)
def test_never_fit_warning(job: JobRequest, warning: str | None) -> None:
    assert never_fit_warning(job, FLEET) == warning


def test_cordoned_nodes_and_autoscaling_count_as_room_that_may_come() -> None:
    cordoned = ClusterSummary("c", products=(h100((0, 0, 0, 0, 1), whole=12),))  # a cordoned 8-GPU node
    assert never_fit_warning(JobRequest("j", gpus_per_pod=8), [cordoned]) is None
    grows = ClusterSummary("g", products=(h100((0, 0, 0, 0, 1)),), autoscale_headroom={"H100-80GB": 64})
    assert never_fit_warning(JobRequest("j", gpus_per_pod=8, pods=8), [grows]) is None


def test_no_known_cluster_gives_no_warning_and_a_restricted_job_reads_its_clusters_only() -> None:
    assert never_fit_warning(JobRequest("j", gpus_per_pod=8), []) is None
    only_small = JobRequest("j", gpus_per_pod=8, clusters=("small",))
    assert (never_fit_warning(only_small, FLEET) or "").startswith(
        "never fits: no declared cluster could hold 1 pod x 8"
    )


SIZED = [  # 2 nodes x 8 H100, each 64 CPUs and 512 GiB allocatable
    ClusterSummary("sized", products=(replace(h100((0,) * 8 + (2,)), max_node_cpu_millis=64_000,
                                              max_node_memory_mib=512 * 1024),)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("job", "warning"),
    [
        (JobRequest("fits", gpus_per_pod=8, cpu_millis_per_pod=64_000, memory_mib_per_pod=512 * 1024), None),
        (
            JobRequest("cpu", gpus_per_pod=1, cpu_millis_per_pod=96_000),
            "never fits: no node of a declared cluster could hold one pod even empty: a pod asks 96 CPUs (the "
            "most on one node: 64) on sized (H100-80GB); accepted, it waits for a cluster that can",
        ),
        (
            JobRequest("memory", gpus_per_pod=1, memory_mib_per_pod=1024 * 1024),
            "never fits: no node of a declared cluster could hold one pod even empty: a pod asks 1024 GiB "
            "memory (the most on one node: 512 GiB) on sized (H100-80GB); accepted, it waits for a cluster "
            "that can",
        ),
        (JobRequest("unknown sizes", gpus_per_pod=1, cpu_millis_per_pod=96_000), None),  # FLEET: not known
    ],
    ids=lambda v: v.name if isinstance(v, JobRequest) else "",
)
def test_a_pod_larger_than_any_node_in_cpu_or_memory_is_warned_about(
    job: JobRequest, warning: str | None
) -> None:
    """Issue 48 finding 9: only GPUs were compared; a pod asking more CPU or memory than any node has was
    accepted without a word and bounced between members."""
    assert never_fit_warning(job, FLEET if job.name == "unknown sizes" else SIZED) == warning
