"""A private Redis Sentinel deployment: a primary, its replicas and three sentinels, as child processes.

Owns starting and stopping that topology on free loopback ports (adapters.loopback_ports), each sentinel
with its own config file (Sentinel rewrites it), for the failover test and benchmark
(tests/integration/test_redis_sentinel.py, benchmarks/redis_failover.py). Failure detection is quick
(down-after-milliseconds 1000), so a killed primary is replaced within a few seconds.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from adapters import loopback_ports
from broker.config.redis_settings import sentinel_url

MASTER = "gpufed"

__all__ = ["MASTER", "SentinelDeployment", "sentinel_deployment"]


@dataclass
class SentinelDeployment:
    directory: Path
    password: str | None
    data_ports: list[int]  # [primary at start, replicas...]
    sentinel_ports: list[int]
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)

    def url(self, db: int = 0) -> str:
        return sentinel_url([f"127.0.0.1:{p}" for p in self.sentinel_ports], MASTER, db, self.password)

    def sentinel(self, port: int | None = None) -> redis.Redis:
        return redis.Redis(port=port or self.sentinel_ports[0], socket_timeout=2, decode_responses=True)

    def primary_port(self) -> int:
        """Where the sentinels say the primary is now."""
        addr: Any = self.sentinel().sentinel_get_master_addr_by_name(MASTER)
        return int(addr[1])

    def kill(self, port: int) -> None:
        """SIGKILL the server on `port` (no shutdown, no last write)."""
        proc = self.processes.pop(port)
        proc.kill()
        proc.wait(timeout=10)

    def start_data(self, port: int, replica_of: int | None) -> None:
        exe = shutil.which("redis-server") or "redis-server"
        args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(self.directory), "--dbfilename", f"dump-{port}.rdb"]
        args += ["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"]
        if self.password:
            args += ["--requirepass", self.password, "--masterauth", self.password]
        if replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(replica_of)]
        self.processes[port] = _spawn(args, self.directory / f"redis-{port}.log")

    def start_sentinel(self, port: int, primary: int) -> None:
        conf = self.directory / f"sentinel-{port}.conf"
        lines = [
            f"port {port}",
            "bind 127.0.0.1",
            f"dir {self.directory}",
            f"sentinel monitor {MASTER} 127.0.0.1 {primary} 2",
            f"sentinel down-after-milliseconds {MASTER} 1000",
            f"sentinel failover-timeout {MASTER} 2000",
            f"sentinel parallel-syncs {MASTER} 1",
        ]
        if self.password:
            lines.append(f"sentinel auth-pass {MASTER} {self.password}")
        conf.write_text("\n".join(lines) + "\n")
        exe = shutil.which("redis-server") or "redis-server"
        self.processes[port] = _spawn([exe, str(conf), "--sentinel"], self.directory / f"sentinel-{port}.log")

    def ready(self) -> bool:
        """Every sentinel sees the primary, every replica and the other sentinels."""
        try:
            for port in self.sentinel_ports:
                s = self.sentinel(port)
                replicas: Any = s.sentinel_slaves(MASTER)
                peers: Any = s.sentinel_sentinels(MASTER)
                if len(replicas) < len(self.data_ports) - 1:
                    return False
                if len(peers) < len(self.sentinel_ports) - 1:
                    return False
            primary = redis.Redis(port=self.primary_port(), password=self.password, socket_timeout=2)
            info = primary.info("replication")
            return int(info.get("connected_slaves", 0)) >= len(self.data_ports) - 1
        except (redis.RedisError, OSError):
            return False

    def stop(self) -> None:
        for proc in self.processes.values():
            proc.kill()
        for proc in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        self.processes.clear()


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)


@contextlib.contextmanager
def sentinel_deployment(
    directory: Path, replicas: int = 2, password: str | None = None, ready_timeout_s: float = 30.0
) -> Iterator[SentinelDeployment]:
    """A primary, `replicas` replicas and three sentinels, all answering and aware of each other."""
    if shutil.which("redis-server") is None:
        raise RuntimeError("redis-server is not on PATH (apt-get install redis-server redis-sentinel)")
    data = [loopback_ports.free_port() for _ in range(1 + replicas)]
    sentinels = [loopback_ports.free_port() for _ in range(3)]
    dep = SentinelDeployment(directory, password, data, sentinels)
    try:
        dep.start_data(data[0], None)
        for port in data[1:]:
            dep.start_data(port, data[0])
        for port in sentinels:
            dep.start_sentinel(port, data[0])
        deadline = time.monotonic() + ready_timeout_s
        while not dep.ready():
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the sentinel deployment in {directory} did not come up in {ready_timeout_s:g}s"
                )
            time.sleep(0.1)
        yield dep
    finally:
        dep.stop()
