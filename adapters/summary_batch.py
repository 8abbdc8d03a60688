"""The summaries of many clusters in one Redis round trip: a poller shard's periodic writes, and the
poller liveness check's read of when each was written.

    put_summaries(store, summaries)   the same write as RedisStateStore.put_summary (the PUT_SUMMARY
                                      script: version bump, the summary JSON, the cluster in the fleet
                                      set) for a batch of clusters, pipelined without a transaction, so a
                                      shard of 125 clusters costs one round trip per pass, not 125
    beat_summaries(store, beats)      heartbeats of summaries that still hold (BEAT_SUMMARY): only their
                                      heartbeat and write time move, not their version, so the placers'
                                      caches read nothing again and no reserve's compare-and-set fails
    publications(store, clusters)     when each cluster's summary was last written and the health it
                                      says (PUBLICATIONS), without reading the summaries

Each summary is still its own atomic script call; one cluster's failure is reported with its name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import redis

from adapters.redis_script_batch import ScriptBatch, call_in_chunks
from adapters.redis_store import RedisStateStore, summary_args
from broker.core.errors import StoreError
from broker.core.model import ClusterSummary, Health

# Clusters per PUBLICATIONS call: a script blocks Redis while it runs (about 0.6 ms for 128 here).
PUBLICATIONS_CHUNK = 128


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


def beat_summaries(store: RedisStateStore, beats: Sequence[tuple[str, int, float, float]]) -> list[bool]:
    """Heartbeats of summaries that still hold: (cluster, the version written, heartbeat, published_at)
    each, one round trip. False where the summary is no longer at that version: write it in full."""
    if not beats:
        return []
    try:
        pipe = ScriptBatch(store.client)
        for cluster, version, heartbeat, published in beats:
            pipe.call(
                store._beat_summary,
                [store._k("summary", cluster)],
                [str(version), repr(heartbeat), repr(published)],
            )
        return [bool(int(done)) for done in pipe.execute()]
    except redis.RedisError as e:
        raise StoreError(f"redis: beat_summaries ({len(beats)}): {e}") from e


def publications(store: RedisStateStore, clusters: Sequence[str]) -> dict[str, tuple[float, Health]]:
    """{cluster: (when its poller last wrote its summary, the health written)} for each of these clusters
    that has a summary, without reading the summaries (a poller's liveness, at every check): one round
    trip, PUBLICATIONS_CHUNK clusters per script call. A summary written without those fields (by an
    older poller) is read in full."""
    names = list(clusters)
    try:
        head = [store._k("summary", "")]
        flat = call_in_chunks(store.client, store._publications, head, names, PUBLICATIONS_CHUNK)
    except redis.RedisError as e:
        raise StoreError(f"redis: publications: {e}") from e
    out: dict[str, tuple[float, Health]] = {}
    for cluster, i in zip(names, range(0, len(flat), 3), strict=True):
        version, published, health = flat[i], flat[i + 1], flat[i + 2]
        if not version:
            continue  # no summary
        if published and health:
            text = health.decode() if isinstance(health, bytes) else str(health)
            out[cluster] = (float(published), Health(text))
        elif (s := store.get_summary(cluster)) is not None:
            out[cluster] = (s.published_at, s.health)
    return out
