"""A quiet, healthy cluster must never look stale to the placer, nor lost to health.

Health (broker.health.machine) counts a cluster unreachable after clusterLostSeconds without a successful call;
on a quiet cluster the liveness probe is what succeeds, so it must come several times within that limit.

The watcher's heartbeat moves on events, bookmarks and the end of each watch request (timeoutSeconds).
A real kube-apiserver sends bookmarks about once a minute, not every few seconds as kubesim does, and a
quiet cluster sends few events: the end of each watch is then the only proof of life, so it must come
well inside the staleness limit the placer applies (settings.staleAfterSeconds).
"""

from __future__ import annotations

import pytest

from adapters.kube_informer import WatchSettings
from broker.config.settings import Settings
from broker.health.machine import HealthThresholds


def test_a_watch_ends_and_proves_the_cluster_alive_within_the_default_staleness_limit() -> None:
    watch = WatchSettings()
    stale_after = Settings().stale_after_seconds
    assert watch.watch_timeout_s <= stale_after * 2 / 3, (watch.watch_timeout_s, stale_after)


@pytest.mark.parametrize("lost", [3.0, 6.0, 10.0, 30.0, 60.0])
def test_a_quiet_cluster_is_probed_several_times_within_cluster_lost_seconds(lost: float) -> None:
    watch = WatchSettings()
    settings = Settings.model_validate({"clusterLostSeconds": lost})
    probe = HealthThresholds.for_lost(settings.cluster_lost_seconds, settings.probe_interval_seconds)
    assert probe.probe_interval_seconds * 3 <= lost, (probe.probe_interval_seconds, lost)
    if lost >= 10:  # a hung cluster does not slow the probing
        assert watch.probe_timeout[1] <= probe.probe_interval_seconds


def test_a_cluster_answering_half_its_calls_is_not_lost_by_a_run_of_bad_luck() -> None:
    """After a failed probe the next comes soon, so 'no success for clusterLostSeconds' at 50% errors
    needs dozens of failures in a row (CI saw a 6 s limit crossed with probes 0.5 s apart)."""
    watch = WatchSettings()
    lost = Settings().cluster_lost_seconds
    failures_in_a_row = lost / watch.probe_retry_interval_s
    assert 0.5**failures_in_a_row < 1e-9, failures_in_a_row
    assert watch.probe_retry_interval_s <= HealthThresholds().probe_interval_seconds
