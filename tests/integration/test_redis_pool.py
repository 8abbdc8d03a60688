"""The broker's Redis clients under more concurrent callers than redis-py 8's default pool (100
connections): every caller is served, none is refused with "Too many connections" (a burst across 1,000
members' dispatch workers was), and a caller beyond the pool's size waits for a connection."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from adapters import redis_connect
from adapters.redis_connect import client_for

CALLERS = 150  # > redis-py 8's default max_connections (100)


def _blocked_calls(client: redis.Redis, key: str, callers: int) -> list[BaseException]:
    """`callers` threads each holding a connection at the same moment (a BLPOP that waits 0.5 s)."""
    barrier = threading.Barrier(callers)
    errors: list[BaseException] = []

    def call() -> None:
        barrier.wait(timeout=30)
        try:
            client.blpop([key], timeout=0.5)
        except redis.RedisError as e:
            errors.append(e)

    with ThreadPoolExecutor(callers) as pool:
        for f in [pool.submit(call) for _ in range(callers)]:
            f.result(timeout=60)
    return errors


def test_more_concurrent_callers_than_redis_py_default_pool_are_all_served(redis_url: str) -> None:
    client = client_for(redis_url, socket_timeout=5)
    try:
        assert _blocked_calls(client, "test-redis-pool:nothing", CALLERS) == []
    finally:
        client.close()


def test_a_caller_beyond_the_pool_waits_for_a_connection(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_connect, "POOL_CONNECTIONS", 4)
    client = client_for(redis_url, socket_timeout=5)
    try:
        assert _blocked_calls(client, "test-redis-pool:nothing", 12) == []  # 3 rounds of 4, no refusal
        assert client.connection_pool.max_connections == 4
    finally:
        client.close()
