"""Heartbeat summaries of many clusters in one Redis round trip (a poller shard's periodic re-writes).

Owns put_summaries: the same write as RedisStateStore.put_summary (the PUT_SUMMARY script: version bump,
the summary JSON, the cluster in the fleet set) for a batch of clusters, pipelined without a transaction,
so a shard of 125 clusters re-writing each every HEARTBEAT_SECONDS costs one round trip per pass, not
125. Each summary is still its own atomic script call; one cluster's failure is reported with its name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import redis

from adapters.redis_script_batch import ScriptBatch
from adapters.redis_store import RedisStateStore, summary_args
from broker.core.errors import StoreError
from broker.core.model import ClusterSummary


def put_summaries(store: RedisStateStore, summaries: Sequence[ClusterSummary]) -> list[ClusterSummary]:
    """Write every summary (PUT_SUMMARY each, one pipeline); the summaries as written, with versions."""
    if not summaries:
        return []
    try:
        pipe = ScriptBatch(store.client)
        for s in summaries:
            pipe.call(store._put_summary, store.summary_keys(s), summary_args(s))
        versions = pipe.execute()
    except redis.RedisError as e:
        names = ", ".join(s.cluster for s in summaries[:5])
        raise StoreError(f"redis: put_summaries ({len(summaries)}: {names}...): {e}") from e
    return [dataclasses.replace(s, version=int(v)) for s, v in zip(summaries, versions, strict=True)]
