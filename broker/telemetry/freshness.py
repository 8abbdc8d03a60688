"""Whether the capacity the scheduler reads is fresh, and why not: for /readyz, the dashboard, /metrics.

The pollers re-write every cluster's summary at least every couple of seconds, even for a cluster that
does not answer (its health says so). A summary that has not been written for the silence limit
(clusterLostSeconds / 2, adapters.poller_liveness) means its poller shard is not working: the broker
is placing on old capacity, or (past clusterLostSeconds) not placing at all. The supervisor replaces
such a shard; until the new one publishes, /readyz answers 503 with this module's reason.

    stale_clusters(summaries, now, limit)        [(cluster, seconds since its last publish)], oldest first
    stale_reason(summaries, now, limit, replaced)  one line naming the stale clusters and the shard
                                                   replacements of the last minutes, or None when fresh
    ShardFreshness                               the per-shard gauges on /metrics
                                                 (gpufed_poller_shard_silent_seconds,
                                                 gpufed_poller_shard_replacements), read at scrape time
                                                 from the source the broker registers
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from broker import telemetry
from broker.core.model import ClusterSummary

# A replacement is mentioned in the reason for this long after it happened.
RECENT_SECONDS = 300.0


def stale_clusters(summaries: Iterable[ClusterSummary], now: float, limit: float) -> list[tuple[str, float]]:
    stale = [(s.cluster, now - s.published_at) for s in summaries if now - s.published_at > limit]
    return sorted(stale, key=lambda item: -item[1])


def stale_reason(
    summaries: Iterable[ClusterSummary],
    now: float,
    limit: float,
    replaced: Mapping[str, Mapping[str, Any]] | None = None,
) -> str | None:
    stale = stale_clusters(summaries, now, limit)
    if not stale:
        return None
    named = ", ".join(f"{cluster} ({age:.0f} s)" for cluster, age in stale)
    text = f"capacity is stale: no summary from the pollers for {named}, more than {limit:.0f} s"
    recent = [
        f"poller shard {shard} replaced {now - float(r['at']):.0f} s ago after {r['silent_for']} s silent"
        for shard, r in sorted((replaced or {}).items())
        if now - float(r.get("at", 0.0)) < RECENT_SECONDS
    ]
    return text + ("; " + "; ".join(recent) if recent else "; its poller shard is being replaced")


@dataclass(frozen=True)
class ShardSample:
    """What the per-shard gauges are computed from."""

    now: float
    summaries: Sequence[ClusterSummary]
    owner: Callable[[str], str]  # cluster -> the shard that publishes it
    shards: Sequence[str]
    replaced: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


class ShardFreshness(Collector):
    """gpufed_poller_shard_silent_seconds{shard} and gpufed_poller_shard_replacements{shard}."""

    def __init__(self) -> None:
        self.source: Callable[[], ShardSample] | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        source = self.source
        if source is None:
            return
        try:
            sample = source()
        except Exception:  # Redis down: gpufed_store_up says so; no per-shard series this scrape
            return
        silent = GaugeMetricFamily(
            "gpufed_poller_shard_silent_seconds",
            "Seconds since the poller shard last published a cluster summary (replaced past "
            "clusterLostSeconds / 2)",
            labels=["shard"],
        )
        replaced = GaugeMetricFamily(
            "gpufed_poller_shard_replacements",
            "Times the poller shard was killed and restarted because it published nothing",
            labels=["shard"],
        )
        last: dict[str, float] = {}
        for s in sample.summaries:
            shard = sample.owner(s.cluster)
            last[shard] = max(last.get(shard, 0.0), s.published_at)
        for shard in sample.shards:
            if shard in last:
                silent.add_metric([shard], max(0.0, sample.now - last[shard]))
            replaced.add_metric([shard], float(sample.replaced.get(shard, {}).get("count", 0)))
        yield silent
        yield replaced


SHARDS = ShardFreshness()
telemetry.add_collector(SHARDS)
