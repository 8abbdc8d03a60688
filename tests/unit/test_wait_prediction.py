"""Predicted on-prem wait (broker.burst.wait_prediction): run-time estimates and the queue replay."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.burst.wait_prediction import MIN_SAMPLES, RunTimeModel, median, predict_queue, shape_key
from broker.core.model import (
    ClusterSummary,
    JobRecord,
    JobRequest,
    JobState,
    Placement,
    ProductCapacity,
    Tier,
)

NOW = 1_800_000_000.0
H100 = "H100-80GB"


def pool(cluster: str, allocatable: int, free: int, tier: Tier = Tier.ONPREM) -> ClusterSummary:
    by_free = [0] * 9  # 8-GPU nodes: the free GPUs on as few nodes as they fill
    by_free[8] = free // 8
    by_free[free % 8] += 1 if free % 8 else 0
    cap = ProductCapacity(H100, 81920, allocatable, allocatable, allocatable - free, free, tuple(by_free))
    return ClusterSummary(cluster, tier=tier, products=(cap,))


def queued(job_id: str, gpus: int, tenant: str = "ml", duration: float | None = None) -> JobRecord:
    req = JobRequest(name=job_id, tenant=tenant, gpus_per_pod=gpus, duration_seconds=duration)
    return JobRecord(id=job_id, request=req, created_at=NOW)


def running(job_id: str, cluster: str, gpus: int, started: float, duration: float) -> JobRecord:
    req = JobRequest(name=job_id, gpus_per_pod=gpus, duration_seconds=duration)
    where = Placement(cluster, H100, "nvidia.com/gpu", gpus, 1, 0)
    return JobRecord(
        id=job_id, request=req, state=JobState.RUNNING, cluster=cluster, placement=where, updated_at=started
    )


@pytest.mark.parametrize(
    ("samples", "duration", "seconds", "basis"),
    [
        ({"ml/H100-80GB/8x1": [600, 660, 7200_00]}, None, 660, "median of 3 runs of ml/H100-80GB/8x1"),
        ({"ml/H100-80GB/8x1": [600, 660]}, 900, 900, "the job's durationSeconds"),
        ({"*/H100-80GB/8x1": [100, 200, 300, 400]}, None, 250, "median of 4 runs of */H100-80GB/8x1"),
        ({}, None, 3600, "default 3600 s (no runs of this shape yet)"),
    ],
    ids=["own-median-ignores-outlier", "too-few-samples-declared", "any-tenant", "default"],
)
def test_expected_run_time(
    samples: dict[str, list[float]], duration: float | None, seconds: float, basis: str
) -> None:
    est = RunTimeModel(samples).expected(
        JobRequest(name="j", tenant="ml", gpus_per_pod=8, duration_seconds=duration), H100
    )
    assert (est.seconds, est.basis) == (seconds, basis)
    assert MIN_SAMPLES == 3


def test_median_and_shape_key() -> None:
    assert median([5, 1, 3]) == 3
    assert median([4, 1, 3, 2]) == 2.5
    assert shape_key(JobRequest(name="j", tenant="t", gpus_per_pod=2, pods=4), H100) == "t/H100-80GB/2x4"


def test_fits_now_waits_zero() -> None:
    p = predict_queue([queued("a", 4)], [], [pool("op", 8, 4)], RunTimeModel(), NOW)["a"]
    assert (p.cluster, p.wait_seconds, p.ahead) == ("op", 0.0, 0)


def test_waits_for_running_job_to_end() -> None:
    busy = running("r", "op", 8, started=NOW - 600, duration=1800)
    p = predict_queue([queued("a", 8)], [busy], [pool("op", 8, 0)], RunTimeModel(), NOW)["a"]
    assert p.wait_seconds == 1200
    assert "20 min on op" in p.explain


def test_queue_ahead_runs_first_and_pools_share_it() -> None:
    # Two pools of 8, both full until +600 (op-a) and +1200 (op-b); two 8-GPU jobs ahead of ours.
    fleet = [pool("op-a", 8, 0), pool("op-b", 8, 0)]
    active = [running("r1", "op-a", 8, NOW - 600, 1200), running("r2", "op-b", 8, NOW, 1200)]
    order = [queued("q1", 8, duration=3000), queued("q2", 8, duration=3000), queued("me", 8)]
    got = predict_queue(order, active, fleet, RunTimeModel(), NOW)
    assert (got["q1"].cluster, got["q1"].wait_seconds) == ("op-a", 600)
    assert (got["q2"].cluster, got["q2"].wait_seconds) == ("op-b", 1200)
    assert (got["me"].cluster, got["me"].wait_seconds, got["me"].ahead) == ("op-a", 3600, 2)


def test_overrunning_job_gets_a_tenth_more() -> None:
    late = running("r", "op", 8, started=NOW - 5000, duration=1000)
    p = predict_queue([queued("a", 8)], [late], [pool("op", 8, 0)], RunTimeModel(), NOW)["a"]
    assert p.wait_seconds == pytest.approx(100)


def test_cloud_is_not_an_on_prem_pool_and_too_big_never_starts() -> None:
    got = predict_queue(
        [queued("big", 16)], [], [pool("op", 8, 8), pool("cloud", 64, 64, Tier.CLOUD)], RunTimeModel(), NOW
    )
    assert got["big"].start_at is None
    assert "never" in got["big"].explain


@pytest.mark.parametrize(
    ("elapsed", "left"),
    [
        (0, 1200),  # the median of all its shape's runs
        (700, 1300),  # it outlived the short ones: the median of the runs longer than 700 s, less 700
        (5000, 3000),  # past the long ones too: the median of the one longer run, less 5000
        (9000, 120),  # longer than every run seen: 10% of the median more
    ],
)
def test_a_running_jobs_time_left_grows_with_what_it_has_run(elapsed: float, left: float) -> None:
    model = RunTimeModel({"ml/H100-80GB/8x1": [300, 500, 600, 1800, 2000, 8000]})
    req = JobRequest(name="r", tenant="ml", gpus_per_pod=8)
    assert model.remaining(req, H100, elapsed) == pytest.approx(left)


def test_a_pod_larger_than_any_node_never_starts_though_the_pool_has_the_gpus() -> None:
    three_nodes = ProductCapacity(H100, 81920, 24, 24, 0, 24, (0,) * 8 + (3,), nodes=3)
    fleet = [ClusterSummary("op", tier=Tier.ONPREM, products=(three_nodes,))]
    two_pods = JobRecord(
        id="two-pods", request=JobRequest(name="two-pods", gpus_per_pod=8, pods=2), created_at=NOW
    )

    got = predict_queue([queued("one-pod", 16), two_pods], [], fleet, RunTimeModel(), NOW)

    assert got["one-pod"].start_at is None and "never" in got["one-pod"].explain
    assert got["two-pods"].start_at == NOW


def test_free_gpus_spread_over_nodes_are_no_start_now() -> None:
    # 12 H100s free, but 4 on each of three nodes: an 8-GPU pod starts when a running job ends
    spread = ProductCapacity(H100, 81920, 24, 24, 12, 12, (0, 0, 0, 0, 3), nodes=3)
    fleet = [ClusterSummary("op", tier=Tier.ONPREM, products=(spread,))]
    holding = running("r1", "op", 4, started=NOW - 60, duration=600)

    got = predict_queue([queued("eight", 8)], [holding], fleet, RunTimeModel(), NOW)

    assert got["eight"].start_at == pytest.approx(NOW + 540)


def test_a_runs_cost_is_reckoned_with_the_mean_of_its_shape_and_its_wait_with_the_median() -> None:
    """A budget pays what runs cost on average: with one long run in five, the median says 10 min and
    the mean 42 min; reckoning cost with the median would let a tenant commit far past its budget."""
    model = RunTimeModel({"ml/H100-80GB/8x1": [600, 600, 600, 600, 10_200]})
    req = JobRequest(name="r", tenant="ml", gpus_per_pod=8)
    assert model.expected(req, H100).seconds == 600
    cost = model.expected_for_cost(req, H100)
    assert cost.seconds == pytest.approx(2520)
    assert cost.basis == "mean of 5 runs of ml/H100-80GB/8x1"
    # a running job that outlived the short runs: the mean of the longer ones, less what it has run
    assert model.remaining(req, H100, 700, for_cost=True) == pytest.approx(9500)
    # nothing known: both fall back to the job's durationSeconds
    declared = JobRequest(name="d", tenant="nlp", gpus_per_pod=8, duration_seconds=900)
    assert model.expected_for_cost(declared, H100).seconds == 900


def test_jobs_ahead_take_slots_not_only_gpus() -> None:
    """Issue 28: onprem-b's 24 free H100s are one whole 8-GPU node and two single-numa-node nodes (4 + 4
    zones): one 8-GPU slot. Three queued 8-GPU jobs start one after another there, not all at once."""
    domains = (0, 0, 0, 0, 4, 0, 0, 0, 1)  # four 4-GPU zones and one 8-GPU node, all free
    onprem_b = ProductCapacity(H100, 81920, 24, 24, 0, 24, domains, nodes=3, domains_by_size=domains)
    fleet = [ClusterSummary("onprem-b", tier=Tier.ONPREM, products=(onprem_b,))]

    got = predict_queue([queued(f"big-{i}", 8) for i in range(3)], [], fleet, RunTimeModel(), NOW)

    starts = [got[f"big-{i}"].start_at for i in range(3)]
    assert starts[0] == NOW
    assert starts[0] is not None and starts[1] is not None and starts[2] is not None
    assert starts[0] < starts[1] < starts[2]  # each waits for the one slot
    # without the domain sizes (an older summary) the GPU count alone is what is known
    unknown = [
        ClusterSummary("onprem-b", tier=Tier.ONPREM, products=(replace(onprem_b, domains_by_size=()),))
    ]
    assert predict_queue([queued("big-0", 8)], [], unknown, RunTimeModel(), NOW)["big-0"].start_at == NOW


def test_a_workload_kind_is_predicted_only_where_its_api_is_served() -> None:
    kind = replace(
        queued("ray", 1).request, workload={"apiVersion": "ray.io/v1", "kind": "RayJob", "spec": {}}
    )
    job = replace(queued("ray", 1), request=kind)
    with_ray = replace(pool("a", 8, 0), workload_apis=("ray.io/v1",), workload_apis_observed=True)
    without = replace(
        pool("b", 8, 8), workload_apis=("jobset.x-k8s.io/v1alpha2",), workload_apis_observed=True
    )
    got = predict_queue([job], [], [with_ray, without], RunTimeModel(), NOW)["ray"]
    assert "b/H100-80GB" not in got.per_pool  # b has free GPUs but no KubeRay: no start there
    assert predict_queue([job], [], [without], RunTimeModel(), NOW)["ray"].start_at is None


def test_simulated_durations_are_predicted_in_wall_clock_time() -> None:
    """kubesim at x20 (gpufed demo): a job's durationSeconds is simulated time, 240 s of it pass in 12 s
    of wall-clock time; the prediction beside wall-clock ages says 6 s, not the simulated 234 s."""
    busy = running("r", "op", 8, started=NOW - 6, duration=240)
    model = RunTimeModel(simulation_speed=20.0)
    p = predict_queue([queued("a", 8, duration=60)], [busy], [pool("op", 8, 0)], model, NOW)["a"]
    assert p.wait_seconds == 6
    assert p.run is not None and p.run.seconds == 3
    assert p.explain == (
        "predicted on-prem start in 6 s on op (H100-80GB); expected run 3 s "
        "(the job's durationSeconds, simulated at x20)"
    )
