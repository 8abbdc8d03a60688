"""A private `redis-server` process: started on a free loopback port, waited for, stopped.

Owns running Redis as a child process for the demo (when nothing answers at REDIS_URL) and for tests
that need their own server (isolation, restarts, persistence). No persistence unless asked for.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


class RedisServerUnavailable(RuntimeError):
    """redis-server is not installed, or started but never answered."""


@dataclass(frozen=True)
class RedisProcess:
    port: int
    url: str
    process: subprocess.Popen[bytes]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def answers(port: int) -> bool:
    """PING over a raw socket: no client library needed."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def private_redis(workdir: Path | None = None, timeout_s: float = 10.0) -> Iterator[RedisProcess]:
    """A redis-server from PATH on a free 127.0.0.1 port for the duration of the block."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise RedisServerUnavailable("redis-server is not on PATH (apt-get install redis-server)")
    with contextlib.ExitStack() as stack:
        directory = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        port = free_port()
        args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        proc = subprocess.Popen(
            [*args, "--dir", str(directory)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + timeout_s
            while not answers(port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RedisServerUnavailable(f"redis-server did not answer on 127.0.0.1:{port}")
                time.sleep(0.02)
            yield RedisProcess(port=port, url=f"redis://127.0.0.1:{port}/0", process=proc)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
