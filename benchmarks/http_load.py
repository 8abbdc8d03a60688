"""A lean HTTP/1.1 load generator for the API benchmarks: keep-alive connections on raw asyncio streams,
each sending one pre-encoded request and reading the answer by its Content-Length.

Why not httpx: on this 2-core machine the load generator shares the cores with the server it measures,
and httpx spends about as much CPU per request as the broker does, so the figure would be the client's.
This one spends a few tens of microseconds a request. It speaks just enough HTTP for our own server
(Content-Length answers, no chunking) and counts anything but the expected status as an error.
`run_httpx_load` is the same closed loop with httpx, to show the difference (`placement submit-httpx`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LoadResult:
    rate: float  # requests/s over the whole run
    latencies: list[float]  # seconds, one per request
    errors: int  # answers with another status than expected, or broken connections


def encode_request(
    method: str, path: str, host: str, body: Mapping[str, Any] | None, headers: Mapping[str, str]
) -> bytes:
    payload = json.dumps(body).encode() if body is not None else b""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", "Connection: keep-alive"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


async def _answer(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
            break
    if length:
        await reader.readexactly(length)
    return status


async def run_load(
    host: str,
    port: int,
    request: bytes,
    *,
    clients: int,
    total: int,
    expect: int,
    warmup: int = 200,
) -> LoadResult:
    """`total` requests over `clients` keep-alive connections, each sending the next as soon as its
    answer is read (a closed loop, as `clients` busy users would)."""
    latencies: list[float] = []
    errors = 0
    counter = itertools.count()

    async def client(limit: int, record: bool) -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while next(counter) < limit:
                t0 = time.perf_counter()
                writer.write(request)
                try:
                    status = await _answer(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    errors += 1
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
                    continue
                if record:
                    latencies.append(time.perf_counter() - t0)
                if status != expect:
                    errors += 1
        finally:
            writer.close()

    await asyncio.gather(*(client(warmup, False) for _ in range(clients)))
    counter = itertools.count()
    start = time.perf_counter()
    await asyncio.gather(*(client(total, True) for _ in range(clients)))
    elapsed = time.perf_counter() - start
    return LoadResult(total / elapsed, latencies, errors)


async def run_httpx_load(
    url: str, path: str, body: Mapping[str, Any], *, clients: int, total: int, expect: int, warmup: int = 200
) -> LoadResult:
    """The same closed loop as run_load, with an httpx.AsyncClient of `clients` keep-alive connections."""
    import httpx

    latencies: list[float] = []
    errors = 0
    counter = itertools.count()

    async def client(http: httpx.AsyncClient, limit: int, record: bool) -> None:
        nonlocal errors
        while next(counter) < limit:
            t0 = time.perf_counter()
            status = (await http.post(path, json=body)).status_code
            if record:
                latencies.append(time.perf_counter() - t0)
            if status != expect:
                errors += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as http:
        await asyncio.gather(*(client(http, warmup, False) for _ in range(clients)))
        counter = itertools.count()
        start = time.perf_counter()
        await asyncio.gather(*(client(http, total, True) for _ in range(clients)))
        elapsed = time.perf_counter() - start
    return LoadResult(total / elapsed, latencies, errors)
