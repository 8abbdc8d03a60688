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

from adapters import loopback_ports


class RedisServerUnavailable(RuntimeError):
    """redis-server is not installed, or started but never answered."""


@dataclass(frozen=True)
class RedisProcess:
    port: int
    url: str
    process: subprocess.Popen[bytes]


def free_port() -> int:
    """A free loopback port outside the ephemeral range (see adapters.loopback_ports)."""
    return loopback_ports.free_port()


def answers(port: int) -> bool:
    """PING over a raw socket: no client library needed."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def spawn(
    directory: Path, port: int, appendonly: bool = False, timeout_s: float = 10.0, own_session: bool = False
) -> RedisProcess:
    """Start a redis-server on `port` with its files in `directory` and wait until it answers.

    appendonly=True is the recommended production setting (docs/reliability.md): AOF with an fsync
    every second, so a restart loses nothing written more than a second before it. own_session=True
    starts it in a session of its own: with Linux's autogroup scheduling that is a CPU share of its own,
    as a Redis pod has its own cgroup (benchmarks that share the machine with the broker)."""
    exe = shutil.which("redis-server")
    if exe is None:
        raise RedisServerUnavailable("redis-server is not on PATH (apt-get install redis-server)")
    args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    args += ["--appendonly", "yes", "--appendfsync", "everysec"] if appendonly else ["--appendonly", "no"]
    proc = subprocess.Popen(
        [*args, "--dir", str(directory)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=own_session,
    )
    deadline = time.monotonic() + timeout_s
    while not answers(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise RedisServerUnavailable(f"redis-server did not answer on 127.0.0.1:{port}")
        time.sleep(0.02)
    return RedisProcess(port=port, url=f"redis://127.0.0.1:{port}/0", process=proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (Redis flushes its AOF on the way out), SIGKILL if it does not exit within 5 s."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@contextlib.contextmanager
def private_redis(
    workdir: Path | None = None, timeout_s: float = 10.0, appendonly: bool = False, own_session: bool = False
) -> Iterator[RedisProcess]:
    """A redis-server from PATH on a free 127.0.0.1 port for the duration of the block (spawn's options)."""
    with contextlib.ExitStack() as stack:
        directory = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        server = spawn(directory, free_port(), appendonly, timeout_s, own_session)
        try:
            yield server
        finally:
            stop(server.process)
