"""Benchmark: SIGKILL of the Redis primary under a stream of submits, with Sentinel and redisDurability.

Run: .venv/bin/python -m benchmarks.redis_failover [--rate 200] [--seconds 8] [--kill-after 3]
     [--durability replica|none] [--replicas 2]

Started here: a Redis primary, --replicas replicas and three sentinels (adapters.redis_sentinel_process,
down-after-milliseconds 1000), all with a password; the broker's API in process (the real app over
httpx's ASGI transport, its store from `redis+sentinel://` with the API's settings: require_marker,
unique names, and the durability mode). Submits arrive at --rate per second, each with its own
Idempotency-Key; one that fails (503 while the primary is gone) is re-sent with the same key until it
is answered 2xx. At --kill-after seconds the primary is SIGKILLed. Printed:

    acknowledged   submits answered 201/200
    lost           acknowledged jobs not in Redis after the failover (must be 0)
    duplicated     jobs beyond one per Idempotency-Key, and keys answered with two job ids (must be 0)
    unavailable    seconds from the kill to the first 2xx of a submit sent after it
    failover       seconds from the kill until the sentinels name a new primary

With --cost, nothing is killed: the median time of one group-committed batch (1 and 64 submits) with
redisDurability none and replica, i.e. what the WAIT adds per batch.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from adapters.kube import KubeGateway
from adapters.redis_durability import state_store
from adapters.redis_sentinel_process import SentinelDeployment, sentinel_deployment
from adapters.system_clock import SystemClock
from broker.api.routes import create_app
from broker.controller.service import BrokerService
from broker.core.model import ClusterTraits, JobRequest

PASSWORD = "fo-S3cret:pw@x"  # with characters a URL must encode
PREFIX = "gpufed-failover"


@dataclass
class FailoverResult:
    sent: int = 0
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    unavailable_s: float = float("nan")
    failover_s: float = float("nan")
    failed_attempts: int = 0
    never_answered: int = 0
    conflicts: int = 0
    answers: dict[str, set[str]] = field(default_factory=lambda: collections.defaultdict(set))
    bodies: list[str] = field(default_factory=list)  # error bodies seen (for the password check)

    def line(self) -> str:
        return (
            f"acknowledged {self.acknowledged}/{self.sent}  lost {self.lost}  duplicated {self.duplicated}  "
            f"unavailable {self.unavailable_s:.2f} s  failover {self.failover_s:.2f} s  "
            f"(failed attempts re-sent {self.failed_attempts}, 409s {self.conflicts}, "
            f"never answered {self.never_answered})"
        )


async def stream_through_failover(
    dep: SentinelDeployment,
    rate: float = 200.0,
    seconds: float = 8.0,
    kill_after: float = 3.0,
    durability: str = "replica",
    retry_for_s: float = 30.0,
) -> FailoverResult:
    """Submits at `rate` for `seconds` against the API on `dep`; the primary SIGKILLed at `kill_after`."""
    store = state_store(dep.url(), durability, 1000, prefix=PREFIX, require_marker=True, unique_names=True)
    store.set_run_marker("redis-failover")
    service = BrokerService(store, KubeGateway({}), SystemClock(), {"c1": ClusterTraits(name="c1")})
    app = create_app(service, service.clock)
    out = FailoverResult()
    killed_at: list[float] = []
    first_ok_after: list[float] = []

    async def submit(i: int, client: httpx.AsyncClient) -> None:
        key, deadline = f"key-{i:06d}", time.monotonic() + seconds + retry_for_s
        while time.monotonic() < deadline:
            sent_at = time.monotonic()
            try:
                r = await client.post(
                    "/v1/jobs", json={"name": f"job-{i:06d}", "gpus": 1}, headers={"Idempotency-Key": key}
                )
            except httpx.HTTPError as e:
                out.bodies.append(str(e))
                r = None
            if r is not None and r.status_code in (200, 201):
                out.answers[key].add(r.json()["id"])
                if killed_at and sent_at > killed_at[0]:
                    first_ok_after.append(time.monotonic())
                return
            if r is not None:
                out.bodies.append(r.text)
                out.conflicts += r.status_code == 409
            out.failed_attempts += 1
            await asyncio.sleep(0.2)
        out.never_answered += 1

    async def kill() -> None:
        await asyncio.sleep(kill_after)
        old = dep.primary_port()
        killed_at.append(time.monotonic())
        dep.kill(old)
        while True:  # the sentinels name another primary
            try:
                if await asyncio.to_thread(dep.primary_port) != old:
                    break
            except Exception:  # a sentinel mid-failover
                pass
            await asyncio.sleep(0.05)
        out.failover_s = time.monotonic() - killed_at[0]

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api", timeout=60) as client:
        killer = asyncio.create_task(kill())
        tasks = []
        t0 = time.monotonic()
        n = int(rate * seconds)
        for i in range(n):
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(submit(i, client)))
        await asyncio.gather(*tasks)
        await killer
    out.sent = n
    out.acknowledged = sum(1 for ids in out.answers.values() if ids)
    if first_ok_after and killed_at:
        out.unavailable_s = min(first_ok_after) - killed_at[0]
    stored = {r.id: r for r in store.list_jobs()}
    acked_ids = {i for ids in out.answers.values() for i in ids}
    out.lost = sum(1 for i in acked_ids if i not in stored and store.get_job(i) is None)
    per_key = collections.Counter(
        r.idempotency_key for r in stored.values() if r.request.name.startswith("job-")
    )
    out.duplicated = sum(c - 1 for c in per_key.values() if c > 1) + sum(
        len(ids) - 1 for ids in out.answers.values() if len(ids) > 1
    )
    store.close()
    return out


def wait_cost(dep: SentinelDeployment, batches: int = 200) -> dict[tuple[str, int], float]:
    """Median ms of one group-committed batch of `size` submits (StateStore.create_jobs), per mode."""
    out: dict[tuple[str, int], float] = {}
    for mode in ("none", "replica"):
        store = state_store(dep.url(), mode, 1000, prefix=f"{PREFIX}-cost-{mode}")
        service = BrokerService(store, KubeGateway({}), SystemClock(), {"c1": ClusterTraits(name="c1")})
        for size in (1, 64):
            times = []
            for b in range(batches):
                prepared = [
                    service.prepare_submit(JobRequest(name=f"c{size}-{b}-{i}"), f"k{size}-{b}-{i}")
                    for i in range(size)
                ]
                t = time.perf_counter()
                store.create_jobs(prepared)
                times.append((time.perf_counter() - t) * 1000)
            out[(mode, size)] = sorted(times)[len(times) // 2]
        store.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=None, help="submits/s (default 200)")
    ap.add_argument("--seconds", type=float, default=None, help="how long to submit (default 8)")
    ap.add_argument("--kill-after", type=float, default=None, help="when to kill the primary (default 3 s)")
    ap.add_argument("--durability", choices=["none", "replica"], default=None, help="default replica")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--keep", type=Path, help="put the servers' configs and logs here (kept)")
    ap.add_argument("--cost", action="store_true", help="only the cost of WAIT per batch (no kill)")
    args = ap.parse_args()
    streamed = {"rate": 200.0, "seconds": 8.0, "kill_after": 3.0, "durability": "replica"}
    given = [name for name in streamed if getattr(args, name) is not None]
    if args.cost and given:  # an option the run would ignore is refused, not dropped silently (issue 49)
        ap.error(f"--cost ignores {', '.join('--' + n.replace('_', '-') for n in given)}: it kills nothing")
    for name, default in streamed.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    with (
        tempfile.TemporaryDirectory(prefix="gpufed-sentinel-") as tmp,
        sentinel_deployment(args.keep or Path(tmp), replicas=args.replicas, password=PASSWORD) as dep,
    ):
        if args.cost:
            for (mode, size), ms in wait_cost(dep).items():
                print(f"redisDurability {mode:7}  batch of {size:2}: median {ms:.2f} ms per batch")
            return
        result = asyncio.run(
            stream_through_failover(dep, args.rate, args.seconds, args.kill_after, args.durability)
        )
    print(
        f"redis failover: {args.rate:g} submits/s for {args.seconds:g} s, primary SIGKILLed at "
        f"{args.kill_after:g} s, redisDurability {args.durability}, {args.replicas} replica(s)"
    )
    print(result.line())
    leaked = sum(PASSWORD in b for b in result.bodies)
    print(f"error bodies carrying the password: {leaked}")


if __name__ == "__main__":
    main()
