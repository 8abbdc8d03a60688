"""NVLink cliques end to end in the pure core: level 1 over two clusters, level 2's Job and ComputeDomain.

The issue's set-up over summaries (in-process, no HTTP): one cluster with 12 free GB200 nodes in two
cliques of 6, one with 8 free nodes in one clique; an 8 x 4-GPU gang with nvlinkClique: required.
"""

from __future__ import annotations

from typing import Any

from broker.cache.reservations import deduct
from broker.core.model import ClusterTraits, JobRequest, NoFit, Placement, Reservation
from broker.core.topology import CLIQUE_LABEL, NvlinkClique
from broker.scheduler.placement import PlacementPolicy, explain, place
from broker.workload.manifest import build_workload
from tests.unit.topology_builders import clique_id, cluster, rack

TRAITS = {"split": ClusterTraits("split"), "whole": ClusterTraits("whole")}
SPLIT = cluster("split", rack("split", 1, 6, busy_nodes=12), rack("split", 2, 6, busy_nodes=12))
WHOLE = cluster("whole", rack("whole", 7, 8, busy_nodes=10))


def gang(pods: int = 8, wish: NvlinkClique = NvlinkClique.REQUIRED) -> JobRequest:
    return JobRequest("train", gpus_per_pod=4, pods=pods, nvlink_clique=wish)


def test_required_gang_goes_to_the_cluster_with_one_clique_that_fits() -> None:
    verdicts = {v.cluster: v for v in explain(gang(), [SPLIT, WHOLE], TRAITS, PlacementPolicy(), 1000.0)}
    assert verdicts["whole"].chosen and verdicts["whole"].option is not None
    assert verdicts["whole"].option.clique == clique_id(7)
    rejection = verdicts["split"].rejection
    assert rejection is not None and rejection.plugin == "nvlink-clique"
    assert rejection.reason == f"no NVLink clique with 8 nodes of 4 free GB200 (best: 6 in {clique_id(1)})"
    placement = place(gang(), [SPLIT, WHOLE], TRAITS, PlacementPolicy(), 1000.0)
    assert isinstance(placement, Placement) and placement.clique == clique_id(7)


def test_without_the_wish_the_split_cluster_is_just_as_good() -> None:
    """The control: gpu-fit alone sees 12 free nodes in `split` and takes it (by name, on equal scores)."""
    free = gang(wish=NvlinkClique.NONE)
    verdicts = {v.cluster: v for v in explain(free, [SPLIT, WHOLE], TRAITS, PlacementPolicy(), 1000.0)}
    assert verdicts["split"].feasible


def test_preferred_gang_ranks_the_whole_clique_first_and_falls_back_when_none_fits() -> None:
    p = place(gang(wish=NvlinkClique.PREFERRED), [SPLIT, WHOLE], TRAITS, PlacementPolicy(), 1000.0)
    assert isinstance(p, Placement) and p.cluster == "whole" and p.clique == clique_id(7)
    fallback = place(gang(wish=NvlinkClique.PREFERRED), [SPLIT], TRAITS, PlacementPolicy(), 1000.0)
    assert isinstance(fallback, Placement) and fallback.cluster == "split" and fallback.clique is None
    assert fallback.scores["nvlink-clique"] == 0


def test_a_rack_sized_job_waits_rather_than_splitting() -> None:
    two_racks = cluster("split", rack("split", 1, 17, busy_nodes=1), rack("split", 2, 17, busy_nodes=1))
    verdict = place(gang(pods=18), [two_racks], TRAITS, PlacementPolicy(), 1000.0)
    assert isinstance(verdict, NoFit) and not verdict.never_fits  # capacity freeing up helps: it waits
    assert f"no NVLink clique with 18 nodes of 4 free GB200 (best: 17 in {clique_id(1)})" in verdict.message


def _pod_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = manifest["spec"]["template"]["spec"]
    return spec


def test_level2_pins_the_pods_to_the_clique_and_owns_a_compute_domain() -> None:
    p = place(gang(), [SPLIT, WHOLE], TRAITS, PlacementPolicy(), 1000.0)
    assert isinstance(p, Placement)
    traits = ClusterTraits("whole", compute_domains=True)
    w = build_workload("j1", 0, gang(), p, traits)
    pod = _pod_spec(w.job)
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {"matchExpressions": [{"key": CLIQUE_LABEL, "operator": "In", "values": [clique_id(7)]}]}
    ]
    domain = next(c for c in w.companions if c["kind"] == "ComputeDomain")
    assert domain["apiVersion"] == "resource.nvidia.com/v1beta1"
    assert domain["metadata"]["name"] == w.name and domain["metadata"]["namespace"] == w.namespace
    assert domain["spec"] == {
        "numNodes": 8,
        "channel": {"resourceClaimTemplate": {"name": f"{w.name}-channel"}},
    }
    assert pod["resourceClaims"] == [
        {"name": "imex-channel", "resourceClaimTemplateName": f"{w.name}-channel"}
    ]
    assert pod["containers"][0]["resources"]["claims"] == [{"name": "imex-channel"}]
    # without ComputeDomain support: pinned, no domain, no claim
    plain = build_workload("j1", 0, gang(), p, ClusterTraits("whole"))
    assert not any(c["kind"] == "ComputeDomain" for c in plain.companions)
    assert "resourceClaims" not in _pod_spec(plain.job) and "affinity" in _pod_spec(plain.job)


def test_the_clique_pin_joins_an_existing_product_term() -> None:
    p = Placement("c", "H100-80GB", "nvidia.com/gpu", 4, 2, 50, gfd_products=("A", "B"), clique="u.1")
    pod = _pod_spec(build_workload("j", 0, gang(pods=2), p, ClusterTraits("c")).job)
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert [e["key"] for e in term["matchExpressions"]] == ["nvidia.com/gpu.product", CLIQUE_LABEL]


def test_a_reserved_gang_holds_its_clique_for_the_next_decision() -> None:
    """Two 8-node gangs, one cluster with racks of 8 and 18 free: the first takes the 8 (best fit), and
    with its reservation deducted the second gets the 18-node rack, not the same 8 again."""
    two = cluster("whole", rack("whole", 1, 18), rack("whole", 2, 8, busy_nodes=10))
    first = place(gang(), [two], TRAITS, PlacementPolicy(), 1000.0)
    assert isinstance(first, Placement) and first.clique == clique_id(2)
    held = Reservation(
        "j1", 1, "whole", "GB200", "nvidia.com/gpu", 32, 1000.0, 2000.0, pods=8, clique=first.clique
    )
    after = deduct(two, [held], 1000.0)
    assert next(c for c in after.cliques if c.clique == clique_id(2)).pods_that_fit(4) == 0
    second = place(gang(), [after], TRAITS, PlacementPolicy(), 1000.0)
    assert isinstance(second, Placement) and second.clique == clique_id(1)


def test_a_gang_goes_through_the_workload_api_where_the_member_serves_it() -> None:
    p = Placement("c", "GB200", "nvidia.com/gpu", 4, 8, 50, clique="u.1")
    traits = ClusterTraits("c", gang_scheduler="scheduler-plugins-scheduler", workload_api=True)
    w = build_workload("j", 0, gang(), p, traits)
    kinds = [c["kind"] for c in w.companions]
    assert "Workload" in kinds and "PodGroup" not in kinds  # Kubernetes' own gang API replaces the PodGroup
    workload = next(c for c in w.companions if c["kind"] == "Workload")
    assert workload["apiVersion"] == "scheduling.k8s.io/v1alpha1"
    assert workload["spec"] == {
        "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": w.name},
        "podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 8}}}],
    }
    assert _pod_spec(w.job)["workloadRef"] == {"name": w.name, "podGroup": "workers"}
    # without it: the member's gang scheduler, as before
    plain = build_workload(
        "j", 0, gang(), p, ClusterTraits("c", gang_scheduler="scheduler-plugins-scheduler")
    )
    assert [c["kind"] for c in plain.companions] == ["PodGroup"] and "workloadRef" not in _pod_spec(plain.job)
    single = build_workload("j", 0, gang(pods=1), p, traits)
    assert not single.companions and "workloadRef" not in _pod_spec(single.job)
