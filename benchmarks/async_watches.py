"""Spike for issue 24: what one asyncio event loop pays to list and watch a shard's members (no thread per watch).

Run: .venv/bin/python -m benchmarks.async_watches [--clusters 125] [--nodes 10] [--connects 32] [--idle 20]

Not the product: a measurement to decide the next step of the 1,000-member cold start. The poller shards
today run one thread per informer (9 per member: ~1,125 threads for a shard of 125 members), and on this
2-core machine a shard of 100 members never finished its cold start (docs/benchmarks.md, "1,000 member
clusters"). This opens the same requests from one event loop in one thread: per member one TLS context
(its CA), and per resource (the shards' nine: nodes, pods, NodeResourceTopologies, Kueue ClusterQueues,
DRA ResourceSlices and ResourceClaims, namespaces, ResourceQuotas, LimitRanges) one connection that lists
(JSON decoded) and then watches from the list's resourceVersion on the same keep-alive connection, with
at most `connects` set-ups in flight. kubesim (`kubesim serve`, the fleet of benchmarks.thousand_clusters)
runs in its own process. Prints: the seconds until every watch is open, this process's CPU for it, and
then `idle` seconds with every watch open: CPU (% of a core), RSS, events and bookmarks read.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import resource
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from benchmarks.fleet_scale import fleet_yaml

PATHS = (
    "/api/v1/nodes",
    "/api/v1/pods",
    "/apis/topology.node.k8s.io/v1alpha2/noderesourcetopologies",
    "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
    "/apis/resource.k8s.io/v1/resourceslices",
    "/apis/resource.k8s.io/v1/resourceclaims",
    "/api/v1/namespaces",
    "/api/v1/resourcequotas",
    "/api/v1/limitranges",
)


@dataclass
class Member:
    host: str
    port: int
    token: str
    context: ssl.SSLContext


@dataclass
class Tally:
    listed: int = 0
    absent: int = 0
    watching: int = 0
    events: int = 0
    failures: list[str] = field(default_factory=list)


def member_of(kubeconfig: Path) -> Member:
    doc = yaml.safe_load(kubeconfig.read_text())
    cluster = doc["clusters"][0]["cluster"]
    url = urlsplit(cluster["server"])
    context = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    return Member(url.hostname or "127.0.0.1", url.port or 443, doc["users"][0]["user"]["token"], context)


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    status = int((await reader.readline()).split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    parts = []
    while size := int((await reader.readline()).strip() or b"0", 16):
        parts.append(await reader.readexactly(size))
        await reader.readline()
    await reader.readline()
    return b"".join(parts)


async def follow(m: Member, path: str, gate: asyncio.Semaphore, tally: Tally, stop: asyncio.Event) -> None:
    auth = f"Authorization: Bearer {m.token}\r\nHost: {m.host}\r\nAccept: application/json\r\n"
    async with gate:
        try:
            reader, writer = await asyncio.open_connection(m.host, m.port, ssl=m.context)
            writer.write(f"GET {path}?limit=500 HTTP/1.1\r\n{auth}\r\n".encode())
            status, headers = await read_head(reader)
            body = await read_body(reader, headers)
            if status == 404:
                tally.absent += 1
                writer.close()
                return
            listed = json.loads(body)
            rv = listed["metadata"]["resourceVersion"]
            tally.listed += 1
            query = f"watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=600"
            writer.write(f"GET {path}?{query} HTTP/1.1\r\n{auth}\r\n".encode())
            status, headers = await read_head(reader)
            if status != 200:
                raise RuntimeError(f"watch {path}: {status}")
            tally.watching += 1
        except (OSError, RuntimeError, ValueError, KeyError, asyncio.IncompleteReadError) as e:
            tally.failures.append(f"{m.port}{path}: {type(e).__name__}: {e}")
            return
    try:  # the stream: one JSON event per chunk line
        while not stop.is_set():
            size = int((await reader.readline()).strip() or b"0", 16)
            if not size:
                break
            json.loads(await reader.readexactly(size))
            await reader.readline()
            tally.events += 1
    except (OSError, ValueError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run(members: list[Member], connects: int, idle: float) -> None:
    gate, tally, stop = asyncio.Semaphore(connects), Tally(), asyncio.Event()
    started, cpu0 = time.monotonic(), cpu_s()
    tasks = [asyncio.create_task(follow(m, p, gate, tally, stop)) for m in members for p in PATHS]
    want = len(tasks)
    while tally.watching + tally.absent + len(tally.failures) < want:
        await asyncio.sleep(0.05)
    took, cpu = time.monotonic() - started, cpu_s() - cpu0
    print(
        f"cold    {len(members)} members x {len(PATHS)} resources: {tally.watching} watches open, "
        f"{tally.absent} absent (404), {len(tally.failures)} failed, in {took:.1f} s; "
        f"CPU {cpu:.1f} s ({cpu / max(1, tally.watching) * 1000:.2f} ms per list+watch), one thread"
    )
    for failure in tally.failures[:5]:
        print(f"        failed: {failure}")
    events0, cpu0 = tally.events, cpu_s()
    await asyncio.sleep(idle)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"idle    {idle:.0f} s, {tally.watching} watches open: CPU {(cpu_s() - cpu0) / idle * 100:.1f}% of a core, "
        f"{tally.events - events0} events and bookmarks read; max RSS {rss:.0f} MiB "
        f"({rss / len(members):.2f} MiB per member)"
    )
    stop.set()
    for t in tasks:
        t.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clusters", type=int, default=125)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--connects", type=int, default=32, help="set-ups in flight at once")
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument(
        "--ssl-buffer-kib",
        type=int,
        default=0,
        help="asyncio's per-connection TLS read buffer (0: its default, 256 KiB)",
    )
    args = parser.parse_args()
    if args.ssl_buffer_kib:  # a class attribute of CPython's asyncio.sslproto.SSLProtocol (3.11+)
        import asyncio.sslproto

        asyncio.sslproto.SSLProtocol.max_size = args.ssl_buffer_kib * 1024
    bindir = Path(sys.executable).parent
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "fleet.yaml").write_text(yaml.safe_dump(fleet_yaml(args.clusters, args.nodes)))
        sim = subprocess.Popen(
            [
                str(bindir / "kubesim"),
                "serve",
                "--fleet",
                str(tmp / "fleet.yaml"),
                "--out",
                str(tmp / "out"),
                "--bookmark-seconds",
                "60",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 300
            while not (tmp / "out" / "kubesim.json").exists():
                if time.monotonic() > deadline or sim.poll() is not None:
                    raise SystemExit("kubesim did not start")
                time.sleep(0.5)
            info = json.loads((tmp / "out" / "kubesim.json").read_text())
            members = [member_of(Path(c["kubeconfig"])) for c in info["clusters"]]
            asyncio.run(run(members, args.connects, args.idle))
        finally:
            sim.terminate()
            sim.wait(timeout=30)


if __name__ == "__main__":
    main()
