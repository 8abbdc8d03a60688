"""Capacity freshness seen from outside the broker: a change made in a member -> the summary in Redis.

Used by benchmarks.thousand_clusters (`--churn`): while the members churn pods in the background, a few
sampler threads each pick a random member, bind a marker pod of MARKER_GPUS GPUs to one of its nodes
through that member's API server (HTTPS, its kubeconfig), and time how long until the member's summary in
Redis shows MARKER_GPUS fewer free GPUs; then delete the marker and time the way back. Nothing in the
broker is hooked: the figure includes the member's watch, the poller shard (a Ray actor), its batching
and its Redis write, as a placer reads it. Background churn replaces one-GPU pods on the same nodes
(free counts move by one at most between a delete and its create), so a change of MARKER_GPUS - 1 or
more is the marker's.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import orjson
import redis

from adapters.kube_rest import KubeRest
from kubesim.churn import churn_pod

MARKER_GPUS = 4
POLL_SECONDS = 0.02
GIVE_UP_SECONDS = 30.0


@dataclass
class Freshness:
    latencies: list[float] = field(default_factory=list)  # seconds, one per change seen
    missed: int = 0  # changes not seen within GIVE_UP_SECONDS
    skipped: int = 0  # members with no summary or too few free GPUs when picked


def free_gpus(r: redis.Redis, prefix: str, cluster: str) -> int | None:
    """Whole GPUs free in the member's summary as stored (None: no summary yet)."""
    blob = r.hget(f"{prefix}:summary:{cluster}", "json")
    if not blob:
        return None
    products = orjson.loads(blob).get("products") or []
    return sum(int(p.get("free", 0)) for p in products)


def _seen(
    r: redis.Redis, prefix: str, cluster: str, done: Callable[[int], bool], started: float
) -> float | None:
    """Seconds from `started` until `done(free)` holds for the member's summary, or None (gave up)."""
    while time.time() - started < GIVE_UP_SECONDS:
        free = free_gpus(r, prefix, cluster)
        if free is not None and done(free):
            return time.time() - started
        time.sleep(POLL_SECONDS)
    return None


def sample(
    redis_url: str, prefix: str, kubeconfigs: Mapping[str, str], seconds: float, samplers: int = 4
) -> Freshness:
    """`samplers` threads for `seconds`, each making and timing marker changes one after another."""
    out = Freshness()
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    names = sorted(kubeconfigs)

    def run(k: int) -> None:
        rng = random.Random(k)
        r = redis.Redis.from_url(redis_url)
        serial = 0
        while time.monotonic() < stop_at:
            cluster = rng.choice(names)
            rest = KubeRest.from_kubeconfig(cluster, kubeconfigs[cluster])
            try:
                nodes = rest.request("GET", "/api/v1/nodes", query=[("limit", 1)])["items"]
                before = free_gpus(r, prefix, cluster)
                if not nodes or before is None or before < MARKER_GPUS:
                    with lock:
                        out.skipped += 1
                    continue
                serial += 1
                name = f"fresh-{k}-{serial}"
                pod = churn_pod(name, nodes[0]["metadata"]["name"], MARKER_GPUS)
                started = time.time()
                rest.request("POST", "/api/v1/namespaces/default/pods", body=pod)
                there = _seen(r, prefix, cluster, lambda f, b=before: f <= b - MARKER_GPUS + 1, started)
                started = time.time()
                rest.request("DELETE", f"/api/v1/namespaces/default/pods/{name}")
                gone = _seen(r, prefix, cluster, lambda f, b=before: f >= b - 1, started)
                with lock:
                    for seen in (there, gone):
                        if seen is None:
                            out.missed += 1
                        else:
                            out.latencies.append(seen)
            finally:
                rest.close()
        r.close()

    threads = [threading.Thread(target=run, args=(k,), name=f"fresh-{k}") for k in range(samplers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out
