"""Shared pytest fixtures, session-scoped servers first.

Fixtures here:
    redis_server   a private `redis-server` (from PATH) on a free port for this test session, no persistence
    redis_url      its URL, redis://127.0.0.1:<port>/0

Other engineers add their fixtures below their own section header.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# --------------------------------------------------------------------------- redis (adapters)


@dataclass(frozen=True)
class RedisServer:
    """A running private redis-server: its port, URL and process."""

    port: int
    url: str
    process: subprocess.Popen[bytes]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _redis_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server for this test session; killed at the end."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not on PATH")
    workdir: Path = tmp_path_factory.mktemp("redis")
    port = _free_port()
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10.0
    while not _redis_answers(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"redis-server did not answer on 127.0.0.1:{port}")
        time.sleep(0.02)
    try:
        yield RedisServer(port=port, url=f"redis://127.0.0.1:{port}/0", process=proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    """URL of the session's private redis-server (db 0). Tests isolate themselves by key prefix."""
    return redis_server.url


# --------------------------------------------------------------------------- ray and the broker (service)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """Ray started once per test session (never per test), stopped at the end."""
    import ray

    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for servers tests start)."""
    return _free_port()


def wait_for(
    predicate: Callable[[], object], timeout: float, interval: float = 0.05, what: str = "condition"
) -> object:
    """Poll `predicate` until it returns something truthy; fail the test with `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
