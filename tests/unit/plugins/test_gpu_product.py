"""gpu-product: acceptable products (GFD strings normalised) with enough memory; names what is missing."""

from __future__ import annotations

import pytest

from broker.core.model import JobRequest, MigNeed
from broker.scheduler.plugins.gpu_product import GpuProductMemory, describe_gpu_need
from tests.unit.k8s_builders import mig, summary
from tests.unit.plugins.helpers import UNCHANGED, filter_outcome, h100, l4

MIXED = summary("a", h100(8), l4(4))
NO = "UNSCHEDULABLE_AND_UNRESOLVABLE"


@pytest.mark.parametrize(
    ("job", "cluster", "expected"),
    [
        (JobRequest("j", gpus_per_pod=1), MIXED, UNCHANGED),
        (JobRequest("j", gpus_per_pod=1, gpu_products=("H100-80GB",)), MIXED, ["H100-80GB"]),
        (JobRequest("j", gpus_per_pod=1, gpu_products=("NVIDIA-L4",)), MIXED, ["L4"]),  # GFD string
        (JobRequest("j", gpus_per_pod=1, gpu_products=("L4", "H100-80GB")), MIXED, UNCHANGED),
        (JobRequest("j", gpus_per_pod=1, min_gpu_memory_mib=80_000), MIXED, ["H100-80GB"]),
        (JobRequest("j", gpus_per_pod=1, min_gpu_memory_mib=20_000), MIXED, UNCHANGED),
        (JobRequest("j", gpus_per_pod=1, gpu_products=("A100-80GB",)), MIXED, (NO, "no A100-80GB", None)),
        (
            JobRequest("j", gpus_per_pod=1, gpu_products=("A100-80GB", "T4")),
            MIXED,
            (NO, "no A100-80GB or T4", None),
        ),
        (
            JobRequest("j", gpus_per_pod=1, gpu_products=("L4",), min_gpu_memory_mib=40_000),
            MIXED,
            (NO, "no GPU with >= 40000 MiB", None),
        ),
        (JobRequest("j", gpus_per_pod=1), summary("empty"), (NO, "no GPUs", None)),
        (JobRequest("j", mig_profile="1g.10gb"), MIXED, (NO, "no MIG 1g.10gb", None)),
        (JobRequest("j", mig_need=MigNeed(10)), MIXED, (NO, "no MIG >= 10 GB", None)),
        (JobRequest("j", mig_profile="1g.10gb"), summary("m", migs=(mig(),)), UNCHANGED),
        (JobRequest("cpu"), summary("empty"), UNCHANGED),  # a job without GPUs needs no product
    ],
)
def test_product_and_memory(job: JobRequest, cluster: object, expected: object) -> None:
    assert filter_outcome(GpuProductMemory(), job, cluster) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("job", "words"),
    [
        (JobRequest("j", mig_profile="1g.10gb"), "MIG 1g.10gb"),
        (JobRequest("j", mig_need=MigNeed(20, 2)), "MIG >= 20 GB"),
        (JobRequest("j", gpus_per_pod=1, gpu_products=("H100-80GB",)), "H100-80GB"),
        (JobRequest("j", gpus_per_pod=1, gpu_products=("H100-80GB", "L4")), "GPUs"),
        (JobRequest("j", gpus_per_pod=1), "GPUs"),
    ],
)
def test_the_need_in_words(job: JobRequest, words: str) -> None:
    assert describe_gpu_need(job) == words
