"""The cost of the API's hard edges, in-process (httpx over ASGI, real Redis from $REDIS_URL):

* a YAML bomb (9 levels x 9 aliases, ~10^9 nodes expanded) refused by broker.core.safe_yaml
* a plain batch/v1 Job translated and validated (broker.intake.parse.spec_of), per second
* a 10 MB body answered 413 by the API (what the fuzzing found stored as a 12.5 MB Redis hash)
* a submitted transition seen on the SSE stream of GET /v1/events?watch=1 (store -> client latency)

.venv/bin/python benchmarks/edges.py [--rounds 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path

import httpx
import uvicorn

from adapters.kube import KubeGateway
from adapters.redis_store import RedisStateStore
from adapters.system_clock import SystemClock
from broker.api.routes import create_app
from broker.controller.service import BrokerService
from broker.core import safe_yaml
from broker.core.model import ClusterTraits
from broker.intake.parse import spec_of

REPO = Path(__file__).resolve().parents[1]


def _bomb() -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return "\n".join(lines)


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    return f"p50 {statistics.median(ordered) * 1000:.2f} ms, p99 {ordered[int(len(ordered) * 0.99) - 1] * 1000:.2f} ms"


async def _sse_latency(url: str, rounds: int) -> list[float]:
    out: list[float] = []
    async with (
        httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(10, read=30)) as client,
        client.stream("GET", "/v1/events", params={"watch": "1"}) as stream,
    ):
        lines = stream.aiter_lines()
        for i in range(rounds):
            t0 = time.perf_counter()
            r = await client.post("/v1/jobs", json={"name": f"bench-{i}", "gpus": 1})
            job_id = r.json()["id"]
            async for line in lines:
                if line.startswith("data:") and job_id in line:
                    out.append(time.perf_counter() - t0)
                    break
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()

    bomb = _bomb()
    refusals = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        try:
            safe_yaml.load(bomb)
        except safe_yaml.YamlError:
            refusals.append(time.perf_counter() - t0)
    print(f"YAML bomb ({len(bomb)} bytes) refused: {_ms(refusals)}")

    job = safe_yaml.load((REPO / "examples" / "job.yaml").read_text())
    t0 = time.perf_counter()
    n = args.rounds * 20
    for _ in range(n):
        spec_of(job)
    print(f"plain Job translated + validated: {n / (time.perf_counter() - t0):,.0f} per second")

    store = RedisStateStore(
        os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), prefix="gpufed-bench-edges"
    )
    service = BrokerService(store, KubeGateway({}), SystemClock(), {"c1": ClusterTraits(name="c1")})
    server = uvicorn.Server(uvicorn.Config(create_app(service, service.clock), port=0, log_level="warning"))
    try:

        async def run() -> None:
            task = asyncio.create_task(server.serve())
            while not server.started:
                await asyncio.sleep(0.01)
            port = server.servers[0].sockets[0].getsockname()[1]
            url = f"http://127.0.0.1:{port}"
            big = b'{"name": "' + b"x" * (10 << 20) + b'"}'
            async with httpx.AsyncClient(base_url=url, timeout=30) as client:
                t0 = time.perf_counter()
                r = await client.post("/v1/jobs", content=big, headers={"content-type": "application/json"})
                print(f"10 MB body: {r.status_code} in {(time.perf_counter() - t0) * 1000:.1f} ms")
            latencies = await _sse_latency(url, args.rounds)
            print(f"submit -> SSE transition on /v1/events?watch=1 ({len(latencies)} jobs): {_ms(latencies)}")
            server.should_exit = True
            await task

        asyncio.run(run())
    finally:
        keys = list(store.client.scan_iter(match="gpufed-bench-edges:*"))
        if keys:
            store.client.delete(*keys)
        store.close()


if __name__ == "__main__":
    main()
