"""How many poller shards a fleet gets when `settings.pollerShards` is not set (docs/operations.md, Sizing).

Owns the rule, pure: one shard per CLUSTERS_PER_SHARD member clusters, rounded up, at least 1 and at
most MAX_POLLER_SHARDS. A shard is one process (a Ray actor) holding its clusters' informers, one
liveness prober and one publisher; past ~100-150 clusters one Python process spends more of its time
waiting for its own interpreter lock than for the member API servers, and its probes start to read a
busy poller as a slow cluster. An explicit `pollerShards` always wins.
"""

from __future__ import annotations

CLUSTERS_PER_SHARD = 125
MAX_POLLER_SHARDS = 64


def poller_shards_for(clusters: int, configured: int | None = None) -> int:
    """The shard count for a fleet of `clusters` members: `configured` when set, else one per
    CLUSTERS_PER_SHARD clusters (1 for up to 125, 2 for 126-250, ..., 8 for 1,000), capped at 64."""
    if configured is not None:
        if configured < 1:
            raise ValueError(f"pollerShards must be >= 1, got {configured}")
        return configured
    if clusters < 0:
        raise ValueError(f"a fleet cannot have {clusters} clusters")
    return max(1, min(MAX_POLLER_SHARDS, -(-clusters // CLUSTERS_PER_SHARD)))
