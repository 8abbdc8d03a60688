"""A quiet, healthy cluster must never look stale to the placer, nor lost to health.

Health (broker.health) counts a cluster unreachable after clusterLostSeconds without a successful call;
on a quiet cluster the liveness probe is what succeeds, so it must come several times within that limit.

The watcher's heartbeat moves on events, bookmarks and the end of each watch request (timeoutSeconds).
A real kube-apiserver sends bookmarks about once a minute, not every few seconds as kubesim does, and a
quiet cluster sends few events: the end of each watch is then the only proof of life, so it must come
well inside the staleness limit the placer applies (settings.staleAfterSeconds).
"""

from __future__ import annotations

from adapters.kube_informer import WatchSettings
from broker.config import Settings


def test_a_watch_ends_and_proves_the_cluster_alive_within_the_default_staleness_limit() -> None:
    watch = WatchSettings()
    stale_after = Settings().stale_after_seconds
    assert watch.watch_timeout_s <= stale_after * 2 / 3, (watch.watch_timeout_s, stale_after)


def test_a_quiet_cluster_is_probed_several_times_within_cluster_lost_seconds() -> None:
    watch = WatchSettings()
    lost = Settings().cluster_lost_seconds
    assert watch.probe_interval_s * 3 <= lost, (watch.probe_interval_s, lost)
    assert watch.probe_timeout[1] <= watch.probe_interval_s  # a hung cluster does not slow the probing
