"""broker.health.failover and lifecycle.failover as tables: effective health, loss, unfencing, job outcomes."""

from __future__ import annotations

import pytest

from broker.core.model import ClusterSummary, FailoverPolicy, Health, JobRecord, JobRequest, JobState
from broker.core.workloads import WorkloadStatus
from broker.health.failover import (
    MassLossPolicy,
    blind_shards,
    effective_health,
    is_lost,
    loss_deadline,
    mass_loss,
    may_unfence,
    one_shard,
    pollers_silent,
)
from broker.workload.lifecycle import failover, observe

LOST_AFTER = 10.0
NOW = 1_000.0


def summary(
    health: Health, heartbeat: float, reason: str = "", since: float = 0.0, published_at: float = 0.0
) -> ClusterSummary:
    return ClusterSummary(
        "a",
        health=health,
        heartbeat=heartbeat,
        health_reason=reason,
        health_since=since,
        published_at=published_at,
    )


@pytest.mark.parametrize(
    ("s", "health", "lost", "reason_part"),
    [
        (None, Health.UNKNOWN, False, "not yet observed"),
        (summary(Health.HEALTHY, NOW - 1), Health.HEALTHY, False, ""),
        (summary(Health.DEGRADED, NOW - 1, "error rate 40%"), Health.DEGRADED, False, "error rate"),
        # the poller's own verdict: no success for clusterLostSeconds -> lost at once
        (
            summary(Health.UNREACHABLE, NOW - 11, "connection refused", NOW - 1),
            Health.UNREACHABLE,
            True,
            "refused",
        ),
        # the poller saw calls fail and none succeed since: lost at heartbeat + lost_after, before its
        # own UNREACHABLE verdict is published
        (
            summary(Health.DEGRADED, NOW - 9, "3 of 4 calls failed: connection refused", NOW - 8),
            Health.DEGRADED,
            False,
            "refused",
        ),
        (
            summary(Health.DEGRADED, NOW - 10.5, "3 of 4 calls failed: connection refused", NOW - 8, NOW - 1),
            Health.UNREACHABLE,
            True,
            "connection refused; no successful call for 10 s",
        ),
        # ... but only while the poller still writes: a degraded summary it stopped writing 6 s ago (a
        # starved poller) says nothing of the last 6 s: silence, which moves jobs after 3 x lost_after
        (
            summary(Health.DEGRADED, NOW - 10.5, "3 of 4 calls failed: HTTP 503", NOW - 8, NOW - 6),
            Health.UNREACHABLE,
            False,
            "no successful call for 10 s (the cluster is silent or its poller is down)",
        ),
        (
            summary(Health.DEGRADED, NOW - 31, "3 of 4 calls failed: HTTP 503", NOW - 8, NOW - 25),
            Health.UNREACHABLE,
            True,
            "no successful call for 31 s",
        ),
        # silence (no summary written) reads unreachable, but moves jobs only after 3 x lost_after
        (summary(Health.HEALTHY, NOW - 15), Health.UNREACHABLE, False, "no successful call for 15 s"),
        (summary(Health.HEALTHY, NOW - 31), Health.UNREACHABLE, True, "no successful call for 31 s"),
        # credentials rejected: lost once it lasted lost_after
        (
            summary(Health.FORBIDDEN, NOW - 1, "credentials rejected (401)", NOW - 5),
            Health.FORBIDDEN,
            False,
            "401",
        ),
        (
            summary(Health.FORBIDDEN, NOW - 1, "credentials rejected (401)", NOW - 10),
            Health.FORBIDDEN,
            True,
            "401",
        ),
    ],
)
def test_effective_health_and_loss(
    s: ClusterSummary | None, health: Health, lost: bool, reason_part: str
) -> None:
    h = effective_health("a", s, NOW, LOST_AFTER)
    assert h.health is health
    assert reason_part in h.reason
    assert is_lost(h, NOW, LOST_AFTER) is lost


def written(heartbeat: float, published_at: float, reason: str = "") -> ClusterSummary:
    health = Health.UNREACHABLE if reason else Health.HEALTHY
    return ClusterSummary(
        "a", health=health, heartbeat=heartbeat, health_reason=reason, published_at=published_at
    )


@pytest.mark.parametrize(
    ("summaries", "blind"),
    [
        ([], False),  # nothing observed yet is not blindness
        ([written(NOW - 1, NOW - 1), written(NOW - 40, NOW - 40)], False),  # one poller still writes
        # a down cluster's poller writes its failing verdict every few seconds: the broker still sees
        ([written(NOW - 40, NOW - 1, "connection refused"), written(NOW - 40, NOW - 40)], False),
        ([written(NOW - 40, NOW - 11), written(NOW - 40, NOW - 12)], True),  # nobody wrote for 10 s
        ([written(NOW - 11, 0.0), written(NOW - 12, 0.0)], True),  # written by an older broker: heartbeat
        ([written(NOW - 9, 0.0)], False),
    ],
)
def test_the_broker_is_blind_only_when_no_poller_wrote_for_lost_after(
    summaries: list[ClusterSummary], blind: bool
) -> None:
    assert pollers_silent(summaries, NOW, LOST_AFTER) is blind


def written_for(cluster: str, published_at: float) -> ClusterSummary:
    return ClusterSummary(cluster, health=Health.HEALTHY, heartbeat=published_at, published_at=published_at)


SHARDS = {"a": "s0", "b": "s0", "c": "s1", "d": "s2"}


@pytest.mark.parametrize(
    ("ages", "blind"),
    [
        ({"a": 1, "b": 1, "c": 1, "d": 1}, {}),
        # s1 wrote nothing for lost_after: down or restarting; its cluster's silence is the shard's
        ({"a": 1, "b": 1, "c": 11, "d": 1}, {"s1": ["c"]}),
        ({"a": 11, "b": 12, "c": 1, "d": 40}, {"s0": ["a", "b"], "s2": ["d"]}),
        # s0 still writes b: a alone is silent, which the shard does not explain
        ({"a": 40, "b": 1, "c": 1, "d": 1}, {}),
        ({"a": 11, "b": 11, "c": 11, "d": 11}, {"s0": ["a", "b"], "s1": ["c"], "s2": ["d"]}),
    ],
)
def test_a_shard_that_wrote_none_of_its_summaries_is_blind_for_its_own_clusters(
    ages: dict[str, float], blind: dict[str, list[str]]
) -> None:
    summaries = [written_for(c, NOW - age) for c, age in ages.items()]
    assert blind_shards(summaries, SHARDS.__getitem__, NOW, LOST_AFTER) == blind


def test_one_shard_for_the_fleet_is_the_blind_broker_rule() -> None:
    summaries = [written_for("a", NOW - 11), written_for("b", NOW - 12)]
    assert blind_shards(summaries, one_shard, NOW, LOST_AFTER) == {"": ["a", "b"]}
    assert blind_shards([*summaries, written_for("c", NOW - 1)], one_shard, NOW, LOST_AFTER) == {}


@pytest.mark.parametrize(
    ("s", "lost_when_blind"),
    [
        (summary(Health.HEALTHY, NOW - 31), False),  # silent for 3 x lost_after, but so is every poller
        (summary(Health.HEALTHY, NOW - 300), False),
        # a verdict with a cause was the poller's own word: it still counts
        (summary(Health.UNREACHABLE, NOW - 11, "connection refused", NOW - 1), True),
        (summary(Health.FORBIDDEN, NOW - 1, "credentials rejected (401)", NOW - 10), True),
    ],
)
def test_a_blind_broker_fails_over_no_cluster_for_silence(s: ClusterSummary, lost_when_blind: bool) -> None:
    h = effective_health("a", s, NOW, LOST_AFTER)
    assert is_lost(h, NOW, LOST_AFTER, blind=True) is lost_when_blind


@pytest.mark.parametrize(
    ("health", "unfence"),
    [(Health.HEALTHY, True), (Health.DEGRADED, True), (Health.UNREACHABLE, False), (Health.FORBIDDEN, False)],
)
def test_a_fence_is_lifted_only_from_a_cluster_that_answers(health: Health, unfence: bool) -> None:
    h = effective_health("a", summary(health, NOW, since=NOW), NOW, LOST_AFTER)
    assert may_unfence(h) is unfence


def record(policy: FailoverPolicy, state: JobState = JobState.RUNNING) -> JobRecord:
    return JobRecord(
        "j1",
        JobRequest("x", gpus_per_pod=1, failover=policy),
        state=state,
        attempt=2,
        cluster="a",
        workload_name="gf-j1-2",
        updated_at=0.0,
    )


@pytest.mark.parametrize(
    ("policy", "state", "reason_part"),
    [
        (FailoverPolicy.REQUEUE, JobState.QUEUED, "requeued (attempt 2 abandoned)"),
        (FailoverPolicy.NEVER, JobState.FAILED, "(failover: never)"),
    ],
)
def test_failover_follows_the_jobs_policy(policy: FailoverPolicy, state: JobState, reason_part: str) -> None:
    step = failover(record(policy), "cluster a lost: unreachable")
    assert step.state is state
    assert step.reason.startswith("cluster a lost") and reason_part in step.reason


@pytest.mark.parametrize(
    ("status", "policy", "state"),
    [
        # pods disrupted (node lost, spot reclaimed, preempted): the place failed, not the work
        (
            WorkloadStatus("gf-j1-2", "default", True, failed_terminal=True, disrupted=True),
            FailoverPolicy.REQUEUE,
            JobState.QUEUED,
        ),
        (
            WorkloadStatus("gf-j1-2", "default", True, failed_terminal=True, disrupted=True),
            FailoverPolicy.NEVER,
            JobState.FAILED,
        ),
        # the work itself failed: FAILED whatever the policy
        (
            WorkloadStatus("gf-j1-2", "default", True, failed_terminal=True),
            FailoverPolicy.REQUEUE,
            JobState.FAILED,
        ),
        # the Job vanished: like a lost cluster
        (WorkloadStatus("gf-j1-2", "default", False), FailoverPolicy.REQUEUE, JobState.QUEUED),
        (WorkloadStatus("gf-j1-2", "default", False), FailoverPolicy.NEVER, JobState.FAILED),
    ],
)
def test_observe_fails_over_disrupted_and_vanished_jobs(
    status: WorkloadStatus, policy: FailoverPolicy, state: JobState
) -> None:
    step = observe(record(policy), status, now=1_000.0)
    assert step is not None and step.state is state


@pytest.mark.parametrize(
    ("s", "deadline"),
    [
        (None, None),
        (summary(Health.HEALTHY, NOW - 1), None),
        (summary(Health.DEGRADED, NOW - 2, "connection refused", NOW - 1), NOW - 2 + LOST_AFTER),
        (summary(Health.UNREACHABLE, NOW - 12, "connection refused", NOW - 2), NOW - 12 + LOST_AFTER),
        # silence and rejected credentials have rules of their own
        (summary(Health.HEALTHY, NOW - 15), None),
        (summary(Health.FORBIDDEN, NOW - 1, "credentials rejected (401)", NOW - 5), None),
    ],
)
def test_the_loss_deadline_of_a_failing_cluster(s: ClusterSummary | None, deadline: float | None) -> None:
    assert loss_deadline(s, LOST_AFTER) == deadline


@pytest.mark.parametrize(
    ("lost", "fleet", "paused"),
    [
        (0, 1000, False),
        (549, 1000, False),
        (550, 1000, True),  # 55% of a large fleet at once
        (1000, 1000, True),
        (6, 10, True),
        (5, 10, False),
        (2, 3, False),  # a small fleet always fails over: two of three sites can truly be down
        (9, 9, False),
    ],
)
def test_failover_pauses_when_most_of_a_large_fleet_is_lost_at_once(
    lost: int, fleet: int, paused: bool
) -> None:
    assert mass_loss(lost, fleet, MassLossPolicy()) is paused


@pytest.mark.parametrize(("lost", "paused"), [(549, True), (275, True), (274, False)])
def test_a_paused_failover_resumes_only_when_fewer_than_half_that_share_are_lost(
    lost: int, paused: bool
) -> None:
    assert mass_loss(lost, 1000, MassLossPolicy(), paused=True) is paused


def test_mass_loss_can_be_narrowed_to_the_whole_fleet() -> None:
    only_all = MassLossPolicy(fraction=1.0, min_clusters=2)
    assert not mass_loss(2, 3, only_all) and mass_loss(3, 3, only_all)
