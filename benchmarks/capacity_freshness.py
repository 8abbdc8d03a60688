"""Capacity freshness seen from outside the broker: a change made in a member -> the summary in Redis.

Used by benchmarks.thousand_clusters (`--churn`): while the members churn pods in the background, a few
sampler threads each pick a random member, cordon one of its GPU nodes through that member's API server
(HTTPS, its kubeconfig; a merge patch of spec.unschedulable, as `kubectl cordon` does), and time how
long until the member's summary in Redis counts that node's GPUs out of its allocatable; then uncordon it
and time the way back. Nothing in the broker is hooked: the figure includes the member's watch, the
poller shard (a Ray actor), its batching and its Redis write, as a placer reads it. Background churn
replaces pods and never moves allocatable GPUs, so the change seen is the cordon's.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from adapters.kube_rest import KubeRest
from adapters.redis_store import RedisStateStore
from broker.core.errors import ClusterError

POLL_SECONDS = 0.02
GIVE_UP_SECONDS = 30.0
GPU = "nvidia.com/gpu"


@dataclass
class Freshness:
    latencies: list[float] = field(default_factory=list)  # seconds, one per change seen
    missed: int = 0  # changes not seen within GIVE_UP_SECONDS
    skipped: int = 0  # members with no summary or no GPU node when picked
    failed_calls: int = 0  # a sampler's own call to a member failed (that change was not made)


def allocatable_gpus(store: RedisStateStore, cluster: str) -> int | None:
    """Whole GPUs allocatable (ready, schedulable nodes) in the member's summary as stored (None: none yet)."""
    summary = store.get_summary(cluster)
    return None if summary is None else sum(p.allocatable for p in summary.products)


def _seen(store: RedisStateStore, cluster: str, done: Callable[[int], bool], started: float) -> float | None:
    """Seconds from `started` until `done(free)` holds for the member's summary, or None (gave up)."""
    while time.time() - started < GIVE_UP_SECONDS:
        gpus = allocatable_gpus(store, cluster)
        if gpus is not None and done(gpus):
            return time.time() - started
        time.sleep(POLL_SECONDS)
    return None


def _cordon_and_back(
    store: RedisStateStore, cluster: str, rest: KubeRest, rng: random.Random
) -> list[float | None] | None:
    """Cordon one of the member's GPU nodes, then uncordon it: the seconds until each shows in Redis (None
    for a change not seen in GIVE_UP_SECONDS); None when the member has no GPU node or no summary yet."""
    nodes = rest.request("GET", "/api/v1/nodes")["items"]
    gpu_nodes = [n for n in nodes if int((n["status"].get("allocatable") or {}).get(GPU, 0))]
    before = allocatable_gpus(store, cluster)
    if not gpu_nodes or before is None:
        return None
    node = rng.choice(gpu_nodes)
    gpus = int(node["status"]["allocatable"][GPU])
    path = f"/api/v1/nodes/{node['metadata']['name']}"
    seen: list[float | None] = []
    for cordon, done in (
        (True, lambda g: g <= before - gpus),
        (False, lambda g: g >= before),
    ):
        started = time.time()
        patch = {"spec": {"unschedulable": cordon}}
        rest.request("PATCH", path, body=patch, content_type="application/merge-patch+json")
        seen.append(_seen(store, cluster, done, started))
    return seen


def sample(
    redis_url: str, prefix: str, kubeconfigs: Mapping[str, str], seconds: float, samplers: int = 4
) -> Freshness:
    """`samplers` threads for `seconds`, each cordoning and uncordoning nodes of its own members, one
    change after another."""
    out = Freshness()
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    names = sorted(kubeconfigs)

    def run(k: int) -> None:
        rng = random.Random(k)
        store = RedisStateStore(redis_url, prefix=prefix)
        while time.monotonic() < stop_at:
            cluster = rng.choice(names[k::samplers])  # its own members: no two samplers share a baseline
            rest = KubeRest.from_kubeconfig(cluster, kubeconfigs[cluster])
            try:
                seen = _cordon_and_back(store, cluster, rest, rng)
            except ClusterError:  # the member did not answer the sampler (an overloaded simulator)
                with lock:
                    out.failed_calls += 1
                continue
            finally:
                rest.close()
            with lock:
                if seen is None:
                    out.skipped += 1
                    continue
                for latency in seen:
                    if latency is None:
                        out.missed += 1
                    else:
                        out.latencies.append(latency)
        store.close()

    threads = [threading.Thread(target=run, args=(k,), name=f"fresh-{k}") for k in range(samplers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out
