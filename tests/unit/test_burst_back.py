"""The burst-back decision (broker.burst.burst_back): remaining time, price, restart cost, hysteresis,
policy and capacity, as tables; and the free-capacity history its hysteresis reads."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.burst.burst_back import (
    BurstBackPolicy,
    BurstBackSettings,
    Candidate,
    FreeHistory,
    OnPremPool,
    choose,
    decide,
)
from broker.burst.spend import spend_by_tenant
from broker.config.burst import BurstConfig
from broker.core.records import Saving

NOW = 1_800_000_000.0
SETTINGS = BurstBackSettings()  # ratio 4, startup 60 s, min saving $1, cooldown 30 min

# A checkpointing 8-GPU job on the cloud at $1/GPU-h with 2 h left: staying costs $16.
JOB = Candidate(
    job_id="j1",
    tenant="ml",
    cluster="cloud-burst",
    gpus=8,
    gpus_per_pod=8,
    pods=1,
    price_per_gpu_hour=1.0,
    elapsed_seconds=1800.0,
    remaining_seconds=7200.0,
    remaining_basis="its durationSeconds",
    checkpoint_grace_seconds=60.0,
)
POOL = OnPremPool("onprem-a", "H100-80GB", 8, {1: 8, 2: 4, 4: 2, 8: 1}, 600.0)


@pytest.mark.parametrize(
    ("change", "move", "says"),
    [
        # remaining time against the restart cost (grace 60 + lost 0 + startup 60 = 120 s; x4 = 480 s)
        ({}, True, "burst-back: est. $15.87 saved"),
        ({"remaining_seconds": 481.0, "price_per_gpu_hour": 2.0}, True, "restart costs 2 min"),
        ({"remaining_seconds": 479.0}, False, "under 4x the restart cost of 2 min"),
        # price: the saving (price x GPUs x (remaining - grace)) must reach the minimum
        ({"price_per_gpu_hour": 0.01}, False, "est. $0.16 saved is under the minimum $1.00"),
        ({"price_per_gpu_hour": 0.1, "remaining_seconds": 4560.0}, True, "est. $1.00 saved"),
        # restart cost: work lost since the last periodic checkpoint counts
        ({"last_checkpoint_seconds": 0.0}, False, "under 4x the restart cost of 32 min"),
        ({"last_checkpoint_seconds": 1200.0}, True, "restart costs 12 min"),
        # a job that does not checkpoint is not moved by default
        ({"checkpoint_grace_seconds": None}, False, "it does not checkpoint"),
        # hysteresis: a job moved is not bounced again within the cooldown
        ({"moved_at": NOW - 600}, False, "moved 10 min ago (not again within 30 min)"),
        ({"moved_at": NOW - 1801}, True, "burst-back"),
        # capacity: products and clusters it accepts, pods that fit
        ({"products": ("A100-80GB",)}, False, "no on-prem GPUs free for 5 min that hold it"),
        ({"clusters": ("cloud-burst",)}, False, "no on-prem GPUs free"),
        ({"gpus": 16, "pods": 2}, False, "no on-prem GPUs free"),
    ],
)
def test_the_decision_for_one_job(change: dict[str, object], move: bool, says: str) -> None:
    verdict = decide(replace(JOB, **change), [POOL], SETTINGS, NOW)  # type: ignore[arg-type]
    assert verdict.move is move, verdict.reason
    assert says in verdict.reason
    assert (verdict.to_cluster == "onprem-a") is move


@pytest.mark.parametrize(
    ("fleet", "tenant", "move"),
    [
        (BurstBackPolicy.AUTO, {}, True),
        (BurstBackPolicy.AUTO, {"ml": BurstBackPolicy.NEVER}, False),
        (BurstBackPolicy.NEVER, {}, False),
        (BurstBackPolicy.NEVER, {"ml": BurstBackPolicy.AUTO}, True),
        (BurstBackPolicy.AUTO, {"cv": BurstBackPolicy.NEVER}, True),
    ],
)
def test_the_tenant_policy(fleet: BurstBackPolicy, tenant: dict[str, BurstBackPolicy], move: bool) -> None:
    verdict = decide(JOB, [POOL], BurstBackSettings(policy=fleet, tenants=tenant), NOW)
    assert verdict.move is move
    if not move:
        assert verdict.reason == "stays on cloud-burst: tenant ml's burstBack is never"


def test_a_job_that_does_not_checkpoint_restarts_from_scratch_when_allowed() -> None:
    settings = BurstBackSettings(move_without_checkpoint=True)
    scratch = replace(JOB, checkpoint_grace_seconds=None)
    # lost = all 30 min it ran + 60 s startup = 31 min; 2 h left < 4 x 31 min
    assert not decide(scratch, [POOL], settings, NOW).move
    assert decide(replace(scratch, elapsed_seconds=600.0), [POOL], settings, NOW).move  # 11 min x 4 < 2 h


def test_the_saving_is_the_cloud_time_left_less_the_grace_period_at_its_price() -> None:
    verdict = decide(replace(JOB, gpus=4, gpus_per_pod=4, price_per_gpu_hour=2.5), [POOL], SETTINGS, NOW)
    assert verdict.saving == pytest.approx(2.5 * 4 * (7200 - 60) / 3600)
    assert verdict.restart_seconds == 120.0


def test_jobs_share_the_free_gpus_the_largest_saving_first() -> None:
    small = replace(JOB, job_id="small", remaining_seconds=3600.0)
    big = replace(JOB, job_id="big", remaining_seconds=36000.0)
    verdicts = {v.job_id: v for v in choose([small, big], [POOL], SETTINGS, NOW)}
    assert verdicts["big"].move
    assert not verdicts["small"].move  # the 8 free GPUs went to the larger saving
    two_pools = [POOL, replace(POOL, cluster="onprem-b")]
    assert all(v.move for v in choose([small, big], two_pools, SETTINGS, NOW))
    halves = [replace(JOB, job_id=f"h{i}", gpus=4, gpus_per_pod=4) for i in range(3)]
    assert [v.move for v in choose(halves, [POOL], SETTINGS, NOW)] == [True, True, False]


def test_gpus_kept_free_for_arrivals_are_not_taken() -> None:
    roomy = OnPremPool("onprem-b", "H100-80GB", 16, {8: 2}, 60.0)
    keep = BurstBackSettings(keep_free_gpus=8)
    assert not decide(JOB, [POOL], keep, NOW).move  # 8 free, 8 kept
    assert decide(JOB, [POOL, roomy], keep, NOW).to_cluster == "onprem-b"


def test_the_pool_with_the_most_left_over_is_taken() -> None:
    roomy = OnPremPool("onprem-b", "H100-80GB", 16, {8: 2}, 60.0)
    assert decide(JOB, [POOL, roomy], SETTINGS, NOW).to_cluster == "onprem-b"


def test_free_history_counts_only_gpus_free_for_the_whole_window() -> None:
    h = FreeHistory()
    h.observe(NOW, {"a/H100": 8})
    assert h.stable("a/H100", NOW + 299, 300) == 0  # not watched for the whole window yet
    assert h.next_change(NOW, 300) == NOW + 300
    assert h.stable("a/H100", NOW + 300, 300) == 8
    h.observe(NOW + 400, {"a/H100": 2})  # a job took 6
    h.observe(NOW + 500, {"a/H100": 8})
    assert h.stable("a/H100", NOW + 600, 300) == 2  # the dip is inside the window
    assert h.next_change(NOW + 600, 300) == NOW + 700  # an entry leaves the window: look again
    assert h.stable("a/H100", NOW + 700, 300) == 2
    assert h.next_change(NOW + 700, 300) == NOW + 800  # the dip leaves it
    assert h.stable("a/H100", NOW + 800, 300) == 8
    assert h.next_change(NOW + 800, 300) is None
    assert h.free_since("a/H100", NOW + 800) == 800  # some GPUs free since the first sighting
    h.observe(NOW + 900, {"a/H100": 0})
    assert h.free_since("a/H100", NOW + 900) == 0
    h.observe(NOW + 1000, {})  # the pool is gone: watched afresh when it comes back
    h.observe(NOW + 1100, {"a/H100": 8})
    assert h.stable("a/H100", NOW + 1300, 300) == 0


def test_the_settings_name_the_field_and_carry_the_tenant_policy() -> None:
    config = BurstConfig.model_validate(
        {
            "burstBack": {"freeForSeconds": 120, "cooldownSeconds": 600, "keepFreeGpus": 8},
            "tenants": {"vision": {"burstBack": "never"}},
        }
    )
    s = config.settings().burst_back
    assert (s.free_for_seconds, s.cooldown_seconds, s.keep_free_gpus) == (120, 600, 8)
    assert s.policy_of("vision") is BurstBackPolicy.NEVER
    assert s.policy_of("ml") is BurstBackPolicy.AUTO
    with pytest.raises(ValueError, match=r"burstBack\.minRemainingRatio"):
        BurstConfig.model_validate({"burstBack": {"minRemainingRatio": -1}})
    with pytest.raises(ValueError, match=r"tenants\.vision\.burstBack"):
        BurstConfig.model_validate({"tenants": {"vision": {"burstBack": "sometimes"}}})


def test_spend_shows_what_burst_back_saved_in_the_period() -> None:
    saved = [
        Saving("j1", 0, "ml", "cloud-burst", "onprem-a", NOW, 15.87, 15.87),
        Saving("j2", 0, "ml", "cloud-burst", "onprem-a", NOW - 40 * 86400, 99.0, 99.0),  # last month
    ]
    spend = spend_by_tenant([], {}, NOW, savings=saved)
    assert spend["ml"].avoided == pytest.approx(15.87)
    assert spend["ml"].moved_back == 1
