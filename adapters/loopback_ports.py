"""Free loopback ports for the servers this process starts (private Redis, the demo's and tests' brokers).

Owns choosing the port. `bind(("127.0.0.1", 0))` hands out a port from the kernel's ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by default), the same range every outgoing
connection takes its local port from. Between choosing a port and the server binding it, a busy
process (Ray's GCS, raylet and workers open hundreds of connections while a broker starts) can take
that port for an outgoing connection, and the server then fails with EADDRINUSE. So ports are chosen
from 20000-32767: below the ephemeral range and above Ray's worker ports (10002-19999), checked free
by binding, and never handed out twice by one process.
"""

from __future__ import annotations

import random
import socket
import threading

LOWEST = 20000
HIGHEST = 32767
_handed_out: set[int] = set()
_lock = threading.Lock()


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and outside the ephemeral range."""
    rng = random.SystemRandom()
    with _lock:
        for _ in range(200):
            port = rng.randint(LOWEST, HIGHEST)
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                return port
    raise OSError(f"no free loopback port found in {LOWEST}-{HIGHEST} after 200 tries")
