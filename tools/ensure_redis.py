"""Make sure a Redis answers at $REDIS_URL (default redis://127.0.0.1:6379/0); start one if not.

CI machines and developer machines normally have Redis running already. If none answers and the URL
points at this machine, start `redis-server` from PATH in the background (no persistence) and wait
until it answers. Exits non-zero with a clear message when that is impossible.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from urllib.parse import urlparse

import redis


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def main() -> int:
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    if _answers(url):
        print(f"redis answers at {url}")
        return 0
    parsed = urlparse(url)
    if parsed.hostname not in ("127.0.0.1", "localhost", "::1"):
        print(f"no Redis answers at {url}, and it is not on this machine: start it first", file=sys.stderr)
        return 1
    server = shutil.which("redis-server")
    if server is None:
        print("no Redis answers and redis-server is not on PATH: apt-get install redis-server", file=sys.stderr)
        return 1
    port = str(parsed.port or 6379)
    subprocess.run(
        [server, "--daemonize", "yes", "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no"],
        check=True,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if _answers(url):
            print(f"started redis-server on port {port}")
            return 0
        time.sleep(0.1)
    print(f"started redis-server but it does not answer at {url}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
