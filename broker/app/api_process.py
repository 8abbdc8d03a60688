"""One HTTP API process of `gpufed serve` (settings.apiProcesses): the API on the listening socket that the
broker process opened, without the control loop, the pollers or the leader lease.

With apiProcesses N >= 1 the broker process starts N of these (broker.app.api_workers) and runs the
controller only. An API process is a follower replica in all but name: a submit goes into Redis and the
leader's change feed wakes its control loop; reads come from Redis and the fleet snapshot published
there; /readyz and /v1/status read the lease from Redis (broker.ha.lease_view). It has an interpreter of
its own, so a submit or a page of jobs never waits for the control loop's thread to give up Python's
lock. It reads clusters.yaml (and the environment) as the broker process does; the broker process
restarts it when the member clusters or the `auth` section change. It exits on SIGTERM (in-flight requests finish, new writes
get 503) or when the broker process is gone.

    python -m broker.app.api_process --config F --fd N --replica HOLDER [--ready-fd R] [--shard NAME ...]
        [--tls-cert C --tls-key K] [--insecure-no-auth]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import threading
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from adapters import poller_liveness
from adapters.redis_lease import RedisLease
from adapters.shard_ring import HashRing
from broker import telemetry
from broker.app import main as composition
from broker.app.api_wiring import api_app, api_server
from broker.app.api_workers import read_members
from broker.app.auth import AuthRuntime, token_table
from broker.ha import drain as ha
from broker.ha.lease_view import LeaseView
from broker.telemetry import freshness

log = logging.getLogger(__name__)


TICK_SECONDS = 1.0


class _DrainingServer(uvicorn.Server):
    """uvicorn's server whose SIGTERM also refuses new writes while the requests in flight finish, and
    whose event loop beats on the ready pipe every half second once serving (the broker process kills
    and replaces a process whose beats stop: frozen, or its loop blocked; broker.app.api_workers)."""

    drain: ha.Drain | None = None
    beat_fd: int | None = None

    async def on_tick(self, counter: int) -> bool:
        if self.beat_fd is not None and counter % 5 == 0:
            try:
                os.write(self.beat_fd, b"h")
            except BlockingIOError:  # the broker process has not read for a while: nothing lost
                pass
            except OSError:  # the broker process is gone (the parent watch ends this one)
                self.beat_fd = None
        return await super().on_tick(counter)

    def handle_exit(self, sig: int, frame: object) -> None:
        if self.drain is not None:
            self.drain.begin()
        super().handle_exit(sig, frame)  # type: ignore[arg-type]

    async def main_loop(self) -> None:
        """uvicorn's, ticking every TICK_SECONDS instead of every 0.1 s (its on_tick refreshes the Date
        header when the counter is a multiple of 10 and answers whether to exit): idle, 1 wake-up a second
        instead of 10 (issue 43). The trade: a SIGTERM or a gone broker is acted on up to a second later."""
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 10) % 864000
            await asyncio.sleep(TICK_SECONDS)
            should_exit = await self.on_tick(counter)


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpufed-api", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--fd", type=int, required=True, help="the listening socket, inherited")
    parser.add_argument("--replica", required=True, help="the broker process's lease holder name")
    parser.add_argument("--members", type=Path, default=None, help="the members' traits (api_workers)")
    parser.add_argument("--ready-fd", type=int, default=None, help="written to once serving, then closed")
    parser.add_argument("--shard", action="append", default=[], help="a poller shard's name (its gauges)")
    parser.add_argument("--tls-cert", type=Path, default=None)
    parser.add_argument("--tls-key", type=Path, default=None)
    parser.add_argument("--insecure-no-auth", action="store_true")
    return parser.parse_args(argv)


def _exit_with_parent(server: uvicorn.Server) -> None:
    """The broker process gone (even by SIGKILL): stop serving. Checked every second."""
    parent = os.getppid()

    def watch() -> None:
        stop = threading.Event()
        while not server.should_exit:
            if os.getppid() != parent:
                log.warning("the broker process %d is gone: this API process stops", parent)
                server.should_exit = True
                return
            stop.wait(1.0)

    threading.Thread(target=watch, name="gpufed-api-parent-watch", daemon=True).start()


def run(args: argparse.Namespace) -> None:
    cfg = composition.configured(args.config, os.environ)
    settings = cfg.settings
    tokens = token_table(cfg, args.insecure_no_auth, warn=False)
    service, store, gateway = composition.build_service(cfg, store=composition.api_state_store(cfg))
    members = read_members(args.members) if args.members is not None else None
    if members is not None:  # clusters.yaml's and the ClusterProfiles' as the broker process holds them
        service.set_traits(members, at_once=True)
    lease = RedisLease(settings.redis_url, settings.redis_prefix, args.replica, settings.lease_seconds)
    auth = AuthRuntime(cfg, tokens, store, follow_events=False)  # the broker process records its own acts
    drain = ha.Drain()
    role = LeaseView(args.replica, lease.holder_now)
    app = api_app(cfg, service, store, gateway, auth, drain, role, lease.holder_now)
    server = api_server(app, cfg, tls_cert=args.tls_cert, tls_key=args.tls_key, server_class=_DrainingServer)
    assert isinstance(server, _DrainingServer)
    server.drain = drain
    if args.shard:
        ring = HashRing(args.shard)
        freshness.SHARDS.source = poller_liveness.shard_source(store, ring.owner, ring.nodes)
    sock = socket.socket(fileno=args.fd)
    _exit_with_parent(server)
    auth.start()
    if args.ready_fd is not None:
        _say_ready(server, args.ready_fd)
    composition.settle_startup_heap()
    try:
        server.run(sockets=[sock])
    finally:
        auth.stop()
        service.dispatcher.close()
        gateway.close()
        lease.close()
        store.close()
        telemetry.shutdown_tracing()


def _say_ready(server: _DrainingServer, fd: int) -> None:
    """Write "1" to `fd` once the server accepts connections (the broker process waits for it); then the
    event loop's beats follow on it (_DrainingServer.on_tick)."""

    def wait() -> None:
        stop = threading.Event()
        while not server.started and not server.should_exit:
            stop.wait(0.02)
        if not server.started:
            os.close(fd)
            return
        os.write(fd, b"1")
        os.set_blocking(fd, False)  # a beat never waits for the broker process to read
        server.beat_fd = fd

    threading.Thread(target=wait, name="gpufed-api-ready", daemon=True).start()


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format=telemetry.LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        telemetry.install_log_filter(handler)
    run(_arguments(argv))


if __name__ == "__main__":
    main()
