"""A quiet, healthy cluster must never look stale to the placer.

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
