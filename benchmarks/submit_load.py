"""Submits and lists on the production path: `gpufed serve` as deployed, measured over TCP.

    .venv/bin/python -m benchmarks.submit_load [--clusters 4] [--nodes 13] [--jobs 2000] [--clients 32]
        [--profile out.prof]

Set-up: a private redis-server; a kubesim fleet (`--clusters` synthetic clusters of `--nodes` 8-GPU
nodes) in its own process; `gpufed serve` in a subprocess with auth ON (a tokens file, a user's Bearer
token on every request), the HA middleware, the leader lease, the control loop placing the submitted
jobs into kubesim meanwhile and the Ray pollers running. Then:

1. submits: `--jobs` one-GPU jobs from `--clients` keep-alive connections (closed loop: each sends the
   next request once its answer is read), every request with its own Idempotency-Key. Throughput,
   p50/p99 latency, errors, and the broker process's CPU per submit (its own process, not the pollers'
   Ray workers or kubesim).
2. retries: 500 of the keys sent again: each must answer 200 with the job it created first.
3. lists: `GET /v1/jobs?limit=500` walked to the end by following metadata.continue, 5 times: per page
   p50/p99, and whether the walk returned every job exactly once.

`--spy PY_SPY` samples the broker with py-spy during the submits (folded stacks in /tmp/gpufed-submit-load.spy.txt).
The load generator speaks raw HTTP/1.1 on asyncio streams (benchmarks/http_load.py: a few tens of
microseconds per request, where httpx would cost as much CPU as the broker on these 2 cores).
`--profile FILE` runs the broker under cProfile (its figures are then not comparable) and writes the
stats there on exit.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

REPO = Path(__file__).resolve().parents[1]
TOKEN = "bench-user-token-0123456789abcdef"
SPY_OUT = "/tmp/gpufed-submit-load.spy.txt"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_config(workdir: Path, kubeconfigs: dict[str, Path], redis_url: str) -> Path:
    tokens = workdir / "tokens.yaml"
    tokens.write_text(
        yaml.safe_dump([{"name": "bench", "tenant": "research", "role": "user", "token": TOKEN}])
    )
    tokens.chmod(0o600)
    doc = {
        "clusters": [
            {"name": name, "kubeconfig": str(path), "context": name, "tier": "on-prem", "region": "eu-west"}
            for name, path in sorted(kubeconfigs.items())
        ],
        "settings": {"redisUrl": redis_url, "redisPrefix": "bench"},
        "auth": {"tokensFile": str(tokens)},
    }
    path = workdir / "clusters.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def request_bytes(port: int, key: str, body: bytes, token: str = TOKEN) -> bytes:
    head = (
        f"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: keep-alive\r\n"
        f"Authorization: Bearer {token}\r\nIdempotency-Key: {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    return status, (await reader.readexactly(length)) if length else b""


async def submit_load(
    port: int, keys: list[str], clients: int, expect: int
) -> tuple[float, list[float], int, dict[str, str]]:
    """Each key submitted once over `clients` keep-alive connections: (rate, latencies, errors,
    key -> job id)."""
    latencies: list[float] = []
    ids: dict[str, str] = {}
    errors = 0
    counter = itertools.count()

    async def client() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while (i := next(counter)) < len(keys):
                key = keys[i]
                body = json.dumps({"name": f"load-{key[-8:]}", "gpus": 1}).encode()
                t0 = time.perf_counter()
                writer.write(request_bytes(port, key, body))
                status, answer = await read_answer(reader)
                latencies.append(time.perf_counter() - t0)
                if status != expect:
                    errors += 1
                    continue
                ids[key] = json.loads(answer)["id"]
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return len(keys) / (time.perf_counter() - start), latencies, errors, ids


def walk(url: str, limit: int) -> tuple[list[float], list[str]]:
    """One walk of GET /v1/jobs?limit=N: (each page's latency, every id in order)."""
    latencies: list[float] = []
    ids: list[str] = []
    token: str | None = None
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
        while True:
            params: dict[str, Any] = {"limit": limit}
            if token:
                params["continue"] = token
            t0 = time.perf_counter()
            r = http.get("/v1/jobs", params=params)
            latencies.append(time.perf_counter() - t0)
            r.raise_for_status()
            body = orjson.loads(r.content)  # the client shares the cores: parse cheaply
            ids += [j["id"] for j in body["items"]]
            token = body.get("metadata", {}).get("continue")  # an unpaged server answers all at once
            if not token:
                return latencies, ids


def wait(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def healthy(url: str, clusters: int) -> bool:
    try:
        r = httpx.get(f"{url}/v1/clusters", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    except httpx.HTTPError:
        return False
    items = r.json().get("items", []) if r.status_code == 200 else []
    return len(items) == clusters and all(c["health"] == "healthy" for c in items)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clusters", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=13)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument(
        "--spy", type=Path, default=None, help="a py-spy binary: record the broker during the submits"
    )
    args = parser.parse_args()

    from adapters import redis_process
    from adapters.loopback_ports import free_port
    from kubesim.fleet import synthetic_fleet
    from kubesim.sim import Simulation

    spec = synthetic_fleet(args.clusters, args.nodes, gpus_per_node=8)
    with (
        tempfile.TemporaryDirectory() as tmp,
        redis_process.private_redis(Path(tmp)) as redis,
        Simulation(spec, Path(tmp) / "kube", speed=1.0) as sim,
    ):
        names = sim.cluster_names()
        cfg = write_config(Path(tmp), {n: sim.kubeconfig_path(n) for n in names}, redis.url)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        serve = [sys.executable, "-m", "broker.cli", "serve", "--config", str(cfg), "--port", str(port)]
        if args.profile is not None:
            serve = [sys.executable, "-m", "cProfile", "-o", str(args.profile), *serve[1:]]
        log = Path(tmp) / "serve.log"
        with log.open("wb") as out:
            broker = subprocess.Popen(
                serve, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=out, stderr=out
            )
        try:
            wait(lambda: healthy(url, len(names)), 180, "every cluster healthy")
            warm = [f"warm-{uuid.uuid4().hex}" for _ in range(args.warmup)]
            asyncio.run(submit_load(port, warm, args.clients, 201))
            keys = [f"k-{uuid.uuid4().hex}" for _ in range(args.jobs)]
            spy = None
            if args.spy is not None:
                spy = subprocess.Popen(
                    [
                        str(args.spy),
                        "record",
                        "-p",
                        str(broker.pid),
                        "--format",
                        "raw",
                        "-r",
                        "250",
                        "--nonblocking",
                        "-o",
                        SPY_OUT,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                time.sleep(1.0)
            cpu0 = cpu_seconds(broker.pid)
            rate, lat, errors, ids = asyncio.run(submit_load(port, keys, args.clients, 201))
            cpu = cpu_seconds(broker.pid) - cpu0
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=30)
            print(
                f"submit: {args.jobs} jobs, {args.clients} clients, {len(names)} clusters x {args.nodes} "
                f"nodes: {rate:,.0f}/s, p50 {pct(lat, 0.5) * 1000:.1f} ms, p99 {pct(lat, 0.99) * 1000:.1f} ms, "
                f"errors {errors}, broker CPU {cpu / args.jobs * 1000:.2f} ms per submit",
                flush=True,
            )
            retried = keys[:: max(1, len(keys) // 500)][:500]
            _, _, retry_errors, again = asyncio.run(submit_load(port, retried, args.clients, 200))
            same = sum(1 for k in retried if again.get(k) == ids.get(k))
            print(
                f"retries: {len(retried)} keys sent again: {same} answered 200 with their first job, "
                f"{retry_errors} errors",
                flush=True,
            )
            pages: list[float] = []
            for _ in range(5):
                lat_pages, listed = walk(url, 500)
                pages += lat_pages
            total = len(warm) + len(keys)
            print(
                f"list: GET /v1/jobs?limit=500 over {total} jobs, 5 walks of {len(lat_pages)} pages: "
                f"p50 {pct(pages, 0.5) * 1000:.1f} ms, p99 {pct(pages, 0.99) * 1000:.1f} ms; last walk "
                f"{len(listed)} ids, {len(set(listed))} distinct, all submitted listed: "
                f"{set(ids.values()) <= set(listed)}",
                flush=True,
            )
        finally:
            broker.send_signal(signal.SIGTERM)
            try:
                broker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                broker.kill()
                broker.wait()
            if broker.returncode not in (0, -signal.SIGTERM):
                print(log.read_text()[-3000:], file=sys.stderr)


if __name__ == "__main__":
    main()
