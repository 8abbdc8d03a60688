"""Level 1: which cluster (and product) a job lands on, and why the others were rejected."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from broker.core.model import (
    ClusterSummary,
    ClusterTraits,
    Health,
    JobRequest,
    MigCapacity,
    MigNeed,
    NoFit,
    Placement,
    ProductCapacity,
    QueueHeadroom,
    Tier,
)
from broker.scheduler.framework import Code, FilterResult, PreparedJob, RunOption
from broker.scheduler.placement import PlacementPolicy, explain, place
from tests.unit.k8s_builders import mig, product, summary

NOW = 1000.0
POLICY = PlacementPolicy()


def free_nodes(*frees: int) -> tuple[int, ...]:
    """A nodes_by_free histogram from the free GPUs of each node."""
    hist = [0] * (max(frees) + 1)
    for f in frees:
        hist[f] += 1
    return tuple(hist)


def h100(*frees: int, numa: tuple[int, ...] | None = None) -> ProductCapacity:
    return product("H100-80GB", free_nodes(*frees), numa_blocks=free_nodes(*numa) if numa else None)


def run(
    job: JobRequest,
    *summaries: ClusterSummary,
    traits: dict[str, ClusterTraits] | None = None,
    policy: PlacementPolicy = POLICY,
) -> Placement | NoFit:
    return place(job, summaries, traits or {}, policy, NOW)


def placed(result: Placement | NoFit) -> Placement:
    assert isinstance(result, Placement), result.message if isinstance(result, NoFit) else result
    return result


def rejected(result: Placement | NoFit) -> NoFit:
    assert isinstance(result, NoFit), result
    return result


def test_fits_whole_gpus() -> None:
    p = placed(run(JobRequest("train", gpus_per_pod=4), summary("onprem-a", h100(8, 2))))
    assert (p.cluster, p.product, p.resource_name, p.units_per_pod, p.pods, p.burst) == (
        "onprem-a",
        "H100-80GB",
        "nvidia.com/gpu",
        4,
        1,
        False,
    )
    assert p.gfd_products == ("NVIDIA-H100-80GB-HBM3",)
    assert 0 <= p.score <= 100 and set(p.scores) == {
        "binpack",
        "price",
        "queue",
        "nvlink-clique",
        "gpu-reliability",
    }


def test_nofit_message_names_counts_and_best_candidate() -> None:
    result = rejected(
        run(
            JobRequest("big", gpus_per_pod=8),
            summary("onprem-a", h100(4, 2)),
            summary("onprem-b", h100(6, 6)),
            summary("onprem-c", h100(1)),
            summary("onprem-d", h100(8), heartbeat=NOW - 600),
            summary("cloud-a", h100(8), tier=Tier.CLOUD),
        )
    )
    assert result.message == (
        "0/5 clusters are available: 3 no node with 8 free H100-80GB (best: 6 on onprem-b), "
        "1 burst not allowed, 1 stale."
    )
    assert {r.cluster: r.plugin for r in result.rejections} == {
        "cloud-a": "burst",
        "onprem-a": "gpu-fit",
        "onprem-b": "gpu-fit",
        "onprem-c": "gpu-fit",
        "onprem-d": "health",
    }


@pytest.mark.parametrize(
    ("health", "reason"),
    [
        (Health.UNREACHABLE, "unreachable"),
        (Health.FORBIDDEN, "credentials rejected"),
        (Health.UNKNOWN, "not yet observed"),
    ],
)
def test_unhealthy_clusters_are_filtered(health: Health, reason: str) -> None:
    result = rejected(run(JobRequest("j", gpus_per_pod=1), summary("a", h100(8), health=health)))
    assert result.rejections[0].reason == reason


def test_stale_cluster_filtered_and_fresh_one_chosen() -> None:
    job = JobRequest("j", gpus_per_pod=1)
    stale = summary("a-stale", h100(8), heartbeat=NOW - POLICY.staleness_limit_s - 1)
    fresh = summary("b-fresh", h100(1), heartbeat=NOW - POLICY.staleness_limit_s + 1)
    assert placed(run(job, stale, fresh)).cluster == "b-fresh"


def test_degraded_cluster_still_eligible() -> None:
    assert (
        placed(run(JobRequest("j", gpus_per_pod=1), summary("a", h100(8), health=Health.DEGRADED))).cluster
        == "a"
    )


def test_cluster_allow_list() -> None:
    job = JobRequest("j", gpus_per_pod=1, clusters=("b",))
    assert placed(run(job, summary("a", h100(8)), summary("b", h100(1)))).cluster == "b"
    result = rejected(run(job, summary("a", h100(8))))
    assert result.message == "0/1 clusters are available: 1 not in the job's cluster list."


@pytest.mark.parametrize(
    ("allow_burst", "onprem_free", "expected"),
    [
        (False, 8, "onprem"),  # fits on-prem
        (True, 8, "onprem"),  # burst allowed but on-prem fits: on-prem preferred even if cloud scores higher
        (True, 2, "cloud"),  # on-prem can't: burst
        (False, 2, None),  # on-prem can't and burst not allowed
    ],
)
def test_burst_only_when_allowed_and_only_when_onprem_cannot(
    allow_burst: bool, onprem_free: int, expected: str | None
) -> None:
    job = JobRequest("j", gpus_per_pod=4, allow_burst=allow_burst)
    onprem = summary("onprem", h100(onprem_free))  # binpack alone would prefer the cloud's snug fit
    cloud = summary("cloud", h100(4), tier=Tier.CLOUD)
    result = run(job, onprem, cloud)
    if expected is None:
        assert isinstance(result, NoFit)
        assert "1 burst not allowed" in result.message
    else:
        p = placed(result)
        assert (p.cluster, p.burst) == (expected, expected == "cloud")


def test_explain_notes_why_a_feasible_cloud_cluster_lost() -> None:
    job = JobRequest("j", gpus_per_pod=4, allow_burst=True)
    verdicts = explain(
        job, [summary("onprem", h100(8)), summary("cloud", h100(4), tier=Tier.CLOUD)], {}, POLICY, NOW
    )
    by_name = {v.cluster: v for v in verdicts}
    assert [v.cluster for v in verdicts] == ["cloud", "onprem"]
    assert by_name["onprem"].chosen and not by_name["cloud"].chosen
    assert by_name["cloud"].feasible and "on-prem" in by_name["cloud"].note
    assert [s.plugin for s in by_name["onprem"].statuses][:3] == ["health", "allowlist", "burst"]


@pytest.mark.parametrize(
    ("products", "min_mem", "expected"),
    [
        (("H100-80GB",), 0, "H100-80GB"),
        (("NVIDIA-H100-80GB-HBM3",), 0, "H100-80GB"),  # GFD strings are normalised
        (("L4",), 0, "L4"),
        ((), 80_000, "H100-80GB"),  # memory excludes L4
        ((), 0, "L4"),  # any product: the cheapest
    ],
)
def test_product_and_memory_choice_inside_a_cluster(
    products: tuple[str, ...], min_mem: int, expected: str
) -> None:
    s = summary(
        "a",
        h100(8),
        product("L4", free_nodes(4, 4), memory_mib=23034, per_node=4, gfd=("NVIDIA-L4",)),
        price={"H100-80GB": 4.0, "L4": 0.8},
    )
    p = placed(run(JobRequest("j", gpus_per_pod=2, gpu_products=products, min_gpu_memory_mib=min_mem), s))
    assert p.product == expected


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (
            JobRequest("j", gpus_per_pod=1, gpu_products=("A100-80GB",)),
            "0/1 clusters are available: 1 no A100-80GB.",
        ),
        (
            JobRequest("j", gpus_per_pod=1, min_gpu_memory_mib=100_000),
            "0/1 clusters are available: 1 no GPU with >= 100000 MiB.",
        ),
        (JobRequest("j", mig_profile="1g.10gb"), "0/1 clusters are available: 1 no MIG 1g.10gb."),
        (JobRequest("j", mig_need=MigNeed(10)), "0/1 clusters are available: 1 no MIG >= 10 GB."),
    ],
)
def test_unavailable_products_are_named(job: JobRequest, message: str) -> None:
    assert rejected(run(job, summary("a", h100(8)))).message == message


@pytest.mark.parametrize(
    ("frees", "pods", "gpus", "fits", "best"),
    [
        ((8, 8), 4, 4, True, None),  # 2 pods per node
        ((8, 6), 4, 4, False, 3),  # the 6-free node takes only one 4-GPU pod
        ((2, 2, 2, 2), 4, 2, True, None),
        ((2, 2, 2, 1), 4, 2, False, 3),
        ((8,), 8, 1, True, None),
    ],
)
def test_gang_fit_via_histogram(
    frees: tuple[int, ...], pods: int, gpus: int, fits: bool, best: int | None
) -> None:
    result = run(JobRequest("gang", gpus_per_pod=gpus, pods=pods), summary("a", h100(*frees)))
    if fits:
        assert placed(result).pods == pods
    else:
        (r,) = rejected(result).rejections
        assert (r.reason, r.best) == (f"no room for {pods} pods x {gpus} H100-80GB", best)


def test_numa_fit() -> None:
    job = JobRequest("numa", gpus_per_pod=4, numa_aligned=True)
    split = summary("split", h100(8, numa=(2,)))  # 8 free but at most 2 in one NUMA zone (one node)
    aligned = summary("aligned", h100(4, numa=(4,)))
    assert placed(run(job, split, aligned)).cluster == "aligned"
    (r,) = rejected(run(job, split)).rejections
    assert (r.plugin, r.reason, r.best) == ("numa-fit", "no node with 4 free H100-80GB in one NUMA zone", 2)
    # without numa_aligned the NUMA layout does not matter
    assert placed(run(JobRequest("j", gpus_per_pod=4), split)).cluster == "split"


@pytest.mark.parametrize(
    ("job", "migs", "expected_profile", "expected_product"),
    [
        (JobRequest("m", mig_profile="1g.10gb"), (mig("A100-80GB", "1g.10gb"),), "1g.10gb", "A100-80GB"),
        # by need: mapped per product; the H200 offers 1g.18gb for a 10 GB need
        (
            JobRequest("m", mig_need=MigNeed(10)),
            (mig("H200-141GB", "1g.18gb", gfd=("NVIDIA-H200",)),),
            "1g.18gb",
            "H200-141GB",
        ),
        # by need: the smallest fitting profile among those configured wins
        (
            JobRequest("m", mig_need=MigNeed(10)),
            (mig("H100-80GB", "3g.40gb", gfd=("NVIDIA-H100-80GB-HBM3",)), mig("H100-80GB", "1g.10gb")),
            "1g.10gb",
            "H100-80GB",
        ),
        # a profile too small for the need is never used
        (
            JobRequest("m", mig_need=MigNeed(20, 2)),
            (mig("A100-80GB", "1g.10gb"), mig("A100-80GB", "2g.20gb")),
            "2g.20gb",
            "A100-80GB",
        ),
    ],
)
def test_mig_by_name_and_by_need(
    job: JobRequest,
    migs: tuple[MigCapacity, ...],
    expected_profile: str,
    expected_product: str,
) -> None:
    p = placed(run(job, summary("a", migs=migs)))
    assert (p.mig_profile, p.product, p.resource_name, p.units_per_pod) == (
        expected_profile,
        expected_product,
        "nvidia.com/mig-" + expected_profile,
        1,
    )


def test_mig_uses_settled_capacity_only() -> None:
    job = JobRequest("m", mig_profile="1g.10gb", mig_slices_per_pod=2, pods=2)
    (r,) = rejected(run(job, summary("a", migs=(mig(free=3, largest=3, settled=False),)))).rejections
    assert (r.plugin, r.best) == ("mig-fit", 3)
    assert "reconfigured" in r.reason
    # each pod's slices must fit on one node
    (r,) = rejected(run(job, summary("a", migs=(mig(free=10, largest=1),)))).rejections
    assert r.reason == "not enough free MIG 1g.10gb slices"
    assert placed(run(job, summary("a", migs=(mig(free=4, largest=2),)))).units_per_pod == 2


def test_mig_single_strategy_placement_uses_nvidia_gpu() -> None:
    single = mig("A100-40GB", "1g.5gb", resource="nvidia.com/gpu", gfd=("NVIDIA-A100-SXM4-40GB",))
    p = placed(run(JobRequest("m", mig_profile="1g.5gb"), summary("a", migs=(single,))))
    assert (p.resource_name, p.mig_profile) == ("nvidia.com/gpu", "1g.5gb")


def test_price_cap() -> None:
    job = JobRequest("j", gpus_per_pod=1, allow_burst=True, max_price_per_gpu_hour=3.0)
    pricey = summary("cloud-x", h100(8), tier=Tier.CLOUD, price={"H100-80GB": 4.5})
    cheap = summary("cloud-y", h100(8), tier=Tier.CLOUD, price={"H100-80GB": 2.5})
    assert placed(run(job, pricey, cheap)).cluster == "cloud-y"
    assert rejected(run(job, pricey)).message == "0/1 clusters are available: 1 over the price cap."


def test_kueue_headroom() -> None:
    traits = {"k": ClusterTraits("k", kueue_local_queue="gpu")}
    queue = (QueueHeadroom("gpu-cq", "h100-80gb", "nvidia.com/gpu", nominal=16, used=12),)
    s = summary("k", h100(8, 8), queues=queue)
    assert placed(run(JobRequest("j", gpus_per_pod=4), s, traits=traits)).cluster == "k"
    (r,) = rejected(run(JobRequest("j", gpus_per_pod=8), s, traits=traits)).rejections
    assert (r.plugin, r.reason, r.best) == ("kueue", "Kueue quota for nvidia.com/gpu exhausted", 4)
    # a cluster without Kueue ignores queues it may list
    assert placed(run(JobRequest("j", gpus_per_pod=8), s)).cluster == "k"


def test_binpack_and_spread() -> None:
    job = JobRequest("j", gpus_per_pod=2)
    snug = summary("b-snug", h100(2, 0))  # fills a node exactly
    roomy = summary("a-roomy", h100(8, 8))
    assert placed(run(job, snug, roomy)).cluster == "b-snug"
    assert placed(run(job, snug, roomy, policy=PlacementPolicy(strategy="spread"))).cluster == "a-roomy"


def test_ties_break_by_cluster_name_whatever_the_order() -> None:
    job = JobRequest("j", gpus_per_pod=2)
    clusters = [summary(name, h100(8)) for name in ("c", "a", "b")]
    assert placed(run(job, *clusters)).cluster == "a"
    assert placed(run(job, *reversed(clusters))).cluster == "a"


def test_policy_weights_change_the_winner() -> None:
    job = JobRequest("j", gpus_per_pod=2, allow_burst=True)
    snug_pricey = summary("a", h100(2), price={"H100-80GB": 6.0})
    roomy_cheap = summary("b", h100(8), price={"H100-80GB": 1.0})
    assert placed(run(job, snug_pricey, roomy_cheap)).cluster == "a"
    price_first = PlacementPolicy(weights={"price": 10, "binpack": 1})
    assert placed(run(job, snug_pricey, roomy_cheap, policy=price_first)).cluster == "b"


def test_cpu_only_job_goes_to_a_healthy_cluster() -> None:
    p = placed(run(JobRequest("cpu"), summary("a", heartbeat=0.0), summary("b")))
    assert (p.cluster, p.resource_name, p.units_per_pod) == ("b", "", 0)


def test_no_clusters() -> None:
    assert rejected(run(JobRequest("j", gpus_per_pod=1))).message == "0/0 clusters are available."


class Broken:
    name = "broken"

    def applies(self, job: PreparedJob) -> bool:
        return True

    def filter(
        self,
        job: PreparedJob,
        summary: ClusterSummary,
        traits: ClusterTraits | None,
        now: float,
        options: Sequence[RunOption],
    ) -> FilterResult:
        raise RuntimeError("boom")


def test_a_broken_plugin_rejects_with_error_status_instead_of_crashing() -> None:
    policy = PlacementPolicy(filters=[Broken()])
    (r,) = rejected(run(JobRequest("j", gpus_per_pod=1), summary("a", h100(8)), policy=policy)).rejections
    assert (r.code, r.plugin, r.reason) == (Code.ERROR, "broken", "broken failed: RuntimeError: boom")
