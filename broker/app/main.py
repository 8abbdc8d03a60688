"""Composition root: the one broker module that wires adapters into ports.

build_service(cfg)            BrokerService over RedisStateStore + WatchingGateway (a KubeGateway whose Job
                              status reads come from one Job informer per cluster) + SystemClock
running_broker(cfg, host, port)  a context manager: Ray pollers, Job informers, the leader elector (the
                              control loop and the gateway's member informers run while this replica
                              holds the lease), HTTP API, and the ClusterProfile sync when configured;
                              all stopped on exit
serve(config_path, host, port)   `gpufed serve`: the same, until SIGINT/SIGTERM, which drains (503 +
                              Retry-After for writes, the pass finishes, the lease is released, Ray
                              stops); a reaper process makes sure no process it started outlives it;
                              REDIS_URL overrides the config file's settings.redisUrl,
                              GPUFED_TOKENS_FILE its auth.tokensFile. Both refuse to start without a
                              tokens file unless insecure_no_auth (`gpufed serve --insecure-no-auth`).

Two services share the process: the API's (plain store; submits refused while the store is rebuilt)
and the leader's (its store sends the lease's fencing token with every control-loop write).
probe(xml, fmt)               `gpufed probe`
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from adapters import nvml, poller_liveness, ray_shared, redis_connect, redis_durability
from adapters.clusterprofile import ClusterProfileSync, load_provider_file
from adapters.job_informer import WatchingGateway
from adapters.member_watch import MemberWatchingGateway
from adapters.ray_actors import PollerFleet
from adapters.ray_shared import SharedPollerFleet
from adapters.reaper import Reaper
from adapters.redis_burst import RedisBurstLedger
from adapters.redis_lease import RedisLease
from adapters.redis_recovery_gate import IdempotencyKeys, RecoveryGate
from adapters.redis_retention import RetentionLoop
from adapters.redis_store import RedisStateStore
from adapters.shard_ring import HashRing, PollerSpec
from adapters.system_clock import SystemClock
from broker import telemetry
from broker.app import cpu_priority
from broker.app.api_wiring import api_app, api_server
from broker.app.api_workers import ApiProcessArgs, ApiWorkers, listening_socket
from broker.app.auth import AuthRuntime, token_table, with_tokens_file
from broker.app.hub_wiring import HubRuntime, start_hub
from broker.app.members import FleetMembers, followed_namespace, start_cluster_profiles, start_config_reload
from broker.app.notifications import build_notifier
from broker.burst.gate import BurstGate
from broker.config import gpu_health
from broker.config.reload import ConfigWatcher
from broker.config.service_settings import service_settings
from broker.config.settings import FleetConfig, load_fleet_config
from broker.config.sizing import poller_shards_for
from broker.controller.change_feed import ChangeFeed
from broker.controller.control_loop import ControlLoop
from broker.controller.dispatch import ConcurrentDispatcher
from broker.controller.service import BrokerService
from broker.core.errors import ConfigError, StoreError
from broker.core.model import JobState
from broker.core.ports import Clock
from broker.ha import drain as ha
from broker.ha.duplicates import DuplicateKeys
from broker.ha.leadership import Leadership, take_over
from broker.ha.recovery import StoreRecovery
from broker.health.machine import HealthThresholds
from broker.telemetry import freshness

log = logging.getLogger(__name__)


@dataclass
class Broker:
    service: BrokerService
    store: RedisStateStore
    gateway: WatchingGateway
    loop: ControlLoop
    pollers: PollerFleet
    leadership: Leadership
    drain: ha.Drain
    leader_service: BrokerService
    profiles: ClusterProfileSync | None = None
    members: FleetMembers | None = None
    reloader: ConfigWatcher | None = None
    auth: AuthRuntime | None = None  # credentials (reloaded while running) and the audit trail
    hub: HubRuntime | None = None  # kubectl-native submission through a hub (docs/hub.md)

    clean_store: bool = False  # delete this broker's keys once it has stopped (store_cleanup)

    def store_cleanup(self) -> None:
        """Delete every key under this broker's prefix once it has stopped (the demo uses a throwaway
        prefix): after the pollers, whose summaries a delete made while they run would read as a silent
        shard to their supervisor, and before the store closes."""
        self.clean_store = True


def _delete_prefix(store: RedisStateStore) -> None:
    client = store.client
    keys = list(client.scan_iter(match=f"{store.prefix}:*", count=1000))
    if keys:
        client.delete(*keys)


def build_service(
    cfg: FleetConfig,
    store: RedisStateStore | None = None,
    gateway: WatchingGateway | None = None,
    clock: Clock | None = None,
) -> tuple[BrokerService, RedisStateStore, WatchingGateway]:
    """The service and its adapters, not started: the gateway's Job informers start with start().
    A given store or gateway is used instead of a new one (the leader's service shares the gateway);
    a given clock instead of the wall clock (benchmarks/burst_replay.py: kubesim's simulated clock)."""
    settings = cfg.settings
    store = store or RedisStateStore(settings.redis_url, prefix=settings.redis_prefix)
    gateway = gateway or MemberWatchingGateway.watching(
        {c.name: (c.kubeconfig, c.context) for c in cfg.clusters},
        {c.name: followed_namespace(c) for c in cfg.clusters},
    )
    policy = settings.placement_policy()
    service = BrokerService(
        store,
        gateway,
        clock or SystemClock(),
        cfg.traits(),
        policy,
        service_settings(settings),
        dispatcher=ConcurrentDispatcher(settings.dispatch_per_cluster, in_flight=settings.dispatch_in_flight),
        burst=BurstGate(RedisBurstLedger(store.client, store.prefix), settings.burst.settings()),
    )
    return service, store, gateway


def api_state_store(cfg: FleetConfig) -> RedisStateStore:
    """The store the API's service writes through: settings.redisDurability (WAIT for a replica per
    acknowledged write), refusing writes while the records are rebuilt, job names unique per tenant."""
    settings = cfg.settings
    return redis_durability.state_store(
        settings.redis_url,
        settings.redis_durability,
        settings.redis_wait_timeout_ms,
        prefix=settings.redis_prefix,
        require_marker=True,
        unique_names=True,
        idempotency_ttl_seconds=settings.idempotency_key_ttl_seconds,
    )


def poller_specs(cfg: FleetConfig) -> list[PollerSpec]:
    return [
        PollerSpec(
            c.name, str(c.kubeconfig), c.context, c.traits(), gpu_health.to_json(c.gpu_health, c.metrics)
        )
        for c in cfg.clusters
    ]


def poller_fleet(cfg: FleetConfig, replica: str) -> PollerFleet:
    """The pollers: this replica's own on an embedded Ray, or, with RAY_ADDRESS or settings.rayAddress,
    the deployment's detached shards on that Ray cluster (adapters.ray_shared)."""
    settings = cfg.settings
    specs, url, prefix = poller_specs(cfg), settings.redis_url, settings.redis_prefix
    shards, interval, health = (
        poller_shards_for(len(cfg.clusters), settings.poller_shards),  # unset: sized by the fleet
        settings.summary_interval_seconds,
        health_thresholds(cfg),
    )
    address = ray_shared.ray_address(settings.ray_address, os.environ)
    if address is None:
        return PollerFleet(specs, url, prefix, shards, interval, health)
    return SharedPollerFleet(specs, url, prefix, address, replica, shards, interval, health)


class StartupError(RuntimeError):
    """The broker cannot start; the message is one line naming the cause."""


def check_startup(cfg: FleetConfig, host: str, port: int) -> None:
    """What would otherwise fail deep inside a start, checked first: Redis answers, the Ray token is
    there when joining a Ray cluster with token authentication, the port is free."""
    url = cfg.settings.redis_url
    shown = redis_connect.redact(url)  # never print a password
    try:
        store = RedisStateStore(url, prefix=cfg.settings.redis_prefix)
    except (ValueError, OSError) as e:
        raise StartupError(f"redisUrl {shown!r}: {e}") from None
    try:
        if not store.ping():
            raise StartupError(f"redisUrl {shown!r}: Redis does not answer")
    except StoreError as e:
        raise StartupError(f"redisUrl {shown!r}: {e}") from None
    finally:
        store.close()
    if ray_shared.ray_address(cfg.settings.ray_address, os.environ) is not None:
        problem = ray_shared.check_token_environment(os.environ)
        if problem is not None:
            raise StartupError(f"joining the Ray cluster: {problem}")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except OSError as e:
        raise StartupError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def health_thresholds(cfg: FleetConfig) -> HealthThresholds:
    """The pollers' health machine and probe interval, from settings.clusterLostSeconds and
    settings.probeIntervalSeconds."""
    return HealthThresholds.for_lost(cfg.settings.cluster_lost_seconds, cfg.settings.probe_interval_seconds)


# The collector's thresholds while serving (Python's: 700, 10, 10). A young collection every 10,000
# allocations, not every 700: the work in flight (a pass's decisions, a batch of submits) is scanned
# again at each one. A full collection at most every 100 of the middle generation's, not every 10: the
# leader holds every active job's record, and each full collection scans all of them, holding Python's
# lock for tens of milliseconds at 8,000 jobs. Cyclic garbage is still collected, only later.
GC_THRESHOLDS = (10_000, 10, 100)


def settle_startup_heap() -> None:
    """Leave what start-up built (modules, config, the app, clients) out of the garbage collections made
    while serving. Under load a full collection otherwise rescans all of it and stalls every request in
    flight: the p99 of POST /v1/jobs at 32 clients is 16-22 ms with it, 48-50 ms without
    (benchmarks/placement.py submit, docs/benchmarks.md)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


@contextlib.contextmanager
def running_broker(
    cfg: FleetConfig,
    host: str = "127.0.0.1",
    port: int = 8080,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    insecure_no_auth: bool = False,
    clock: Clock | None = None,
    reload_from: tuple[Path, Callable[[], FleetConfig]] | None = None,
    serve_api: bool = True,
) -> Iterator[Broker]:
    """Everything a broker process runs, started in order and stopped in reverse order. With tls_cert
    and tls_key, the API serves HTTPS. Refuses to start without auth.tokensFile unless
    `insecure_no_auth`. `clock`: the services' clock (default the wall clock; the pollers' heartbeats
    stay on the wall clock). `reload_from`: clusters.yaml's path and how to load it, to apply changes to
    its clusters while running (settings.configReloadSeconds). `serve_api` False: no HTTP API in this
    process (`gpufed serve` with settings.apiProcesses runs it in processes of its own)."""
    tokens = token_table(cfg, insecure_no_auth)
    if cfg.cluster_profiles is not None:
        load_provider_file(cfg.cluster_profiles.provider_file)  # a bad file stops us before anything runs
    settings = cfg.settings
    service, store, gateway = build_service(
        cfg,
        store=api_state_store(cfg),
        clock=clock,
    )
    holder = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    lease = RedisLease(settings.redis_url, settings.redis_prefix, holder, settings.lease_seconds)
    electors: list[Leadership] = []  # the elector, once built: the leader store's token source
    leader_store = RedisStateStore(
        settings.redis_url,
        prefix=settings.redis_prefix,
        fencing_token=lambda: electors[0].current_token() if electors else None,
        idempotency_ttl_seconds=settings.idempotency_key_ttl_seconds,  # keys restored by a rebuild
    )
    leader_service, _, _ = build_service(cfg, store=leader_store, gateway=gateway, clock=clock)
    leader_service.watch_changes()  # Job statuses by informer event, not by a read per job per pass
    records = leader_service.records
    recovery = StoreRecovery(
        leader_store,
        gateway,
        leader_service.clock,
        lambda: leader_service.traits,
        settings.redis_prefix,
        tenants=settings.tenants,  # their namespaces are listed too (docs/tenancy.md)
        queued=lambda: (
            records.in_states((JobState.QUEUED, JobState.PENDING), ordered=False) if records.built else None
        ),
        rebuilt=records.invalidate,
        pending=RecoveryGate(leader_store.client, settings.redis_prefix).set,
        lost=leader_store.fenced,  # a cluster declared lost no longer holds keys back ...
        duplicates=DuplicateKeys(  # ... and its original job, back, wins over a re-sent key's
            leader_store,
            IdempotencyKeys(leader_store.client, settings.redis_prefix),
            leader_service.cancel,
            leader_service.clock,
        ).reconcile,
    )
    feed = ChangeFeed(leader_store, records, leader_service.work)  # wakes the loop on others' writes
    notifier = build_notifier(cfg, leader_store)  # webhooks of job transitions, the leader's (docs/batch.md)
    telemetry.configure_tracing()  # exporters per OTEL_TRACES_EXPORTER (none when unset)
    pollers = poller_fleet(cfg, holder)
    ring = HashRing(pollers.shard_names)
    leader_service.shard_of = ring.owner  # a whole shard's silence is its own, not its clusters'
    loop = ControlLoop(
        leader_service,
        settings.schedule_interval_seconds,
        settings.sweep_interval_seconds,
        first_steps=[("recover_store", recovery.check)],
    )

    def elected() -> None:
        gateway.start()  # the member informers (Jobs, pods, events): one set per deployment, the leader's
        try:
            released, resumed = take_over(leader_service)
            if released or resumed:
                log.info(
                    "took over: %d stale reservation(s) released, %d create(s) resumed", released, resumed
                )
        except StoreError as exc:  # the loop runs anyway: reservations expire, a lost Job is requeued
            log.warning("taking over the previous leader's half-done steps failed: %s", exc)
        finally:
            loop.start()
            feed.start()
            notifier.start()
            if isinstance(pollers, SharedPollerFleet):
                pollers.lead()  # only the lease holder reconciles the deployment's shards

    def deposed() -> None:
        if isinstance(pollers, SharedPollerFleet):
            pollers.unlead()
        loop.stop()
        feed.stop()
        notifier.stop()
        gateway.suspend()  # a follower's reads of a Job are requests, on demand
        records.invalidate()  # another leader writes now: read everything again when elected again

    leadership = Leadership(
        lease, on_elected=elected, on_deposed=deposed, renew_seconds=settings.lease_renew_seconds
    )
    electors.append(leadership)
    drain = ha.Drain()
    auth = AuthRuntime(cfg, tokens, store)
    app = api_app(cfg, service, store, gateway, auth, drain, leadership, lease.holder_now)
    server = api_server(app, cfg, host, port, tls_cert, tls_key)
    thread = threading.Thread(target=server.run, name="gpufed-api", daemon=True)  # unless serve_api is False
    pollers.start()
    profiles: ClusterProfileSync | None = None
    reloader: ConfigWatcher | None = None
    running: Broker | None = None
    workdir = Path(tempfile.mkdtemp(prefix="gpufed-clusterprofiles-"))
    members = FleetMembers(cfg, [leader_service, service], store, gateway, pollers)
    hub: HubRuntime | None = None
    retention = RetentionLoop(store, settings.finished_job_retention_seconds)  # any replica may purge
    try:
        auth.start()
        retention.start()
        profiles = start_cluster_profiles(cfg, members, store, workdir)
        if reload_from is not None:
            reloader = start_config_reload(cfg, members, *reload_from, auth=auth)
        hub = start_hub(cfg, service, gateway, leadership, auth.writer.record)  # acts while leading
        leadership.start()
        deadline = time.monotonic() + 10
        if serve_api:
            thread.start()
            while not server.started and thread.is_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if not server.started:
                raise RuntimeError(f"the HTTP API did not start on {host}:{port}")
        _await_records(store, deadline=time.monotonic() + 30)
        settle_startup_heap()
        freshness.SHARDS.source = poller_liveness.shard_source(store, ring.owner, ring.nodes)
        running = Broker(
            service,
            store,
            gateway,
            loop,
            pollers,
            leadership,
            drain,
            leader_service,
            profiles,
            members,
            reloader,
            auth,
            hub,
        )
        yield running
    finally:
        gc.unfreeze()  # what start-up built may be collected again once this broker stops
        freshness.SHARDS.source = None
        drain.begin()
        leadership.stop(release=True)  # the pass in progress finishes; a follower takes over at once
        loop.stop()
        notifier.stop()
        server.should_exit = True
        if thread.ident is not None:  # started
            thread.join(timeout=10)
        if hub is not None:
            hub.stop()
        if reloader is not None:
            reloader.stop()
        retention.stop()
        auth.stop()
        if profiles is not None:
            profiles.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        leader_service.dispatcher.close()
        service.dispatcher.close()
        pollers.stop()
        gateway.close()
        lease.close()
        leader_store.close()
        if running is not None and running.clean_store:
            _delete_prefix(store)
        store.close()
        telemetry.shutdown_tracing()


def with_environment(cfg: FleetConfig, env: Mapping[str, str]) -> FleetConfig:
    """The settings the Helm chart passes as environment variables, over the config file's: REDIS_URL
    (with its password), GPUFED_LEASE_SECONDS, GPUFED_LEASE_RENEW_SECONDS, the slow-client deadlines
    GPUFED_REQUEST_HEADERS_SECONDS, GPUFED_REQUEST_BODY_SECONDS, GPUFED_API_PROCESSES and
    GPUFED_CONTROLLER_NICE. (GPUFED_LEADER_ELECTION
    needs nothing: every broker elects; a single replica is always the leader.)"""
    raw: dict[str, object] = cfg.settings.model_dump(by_alias=True)
    for var, key in (
        ("REDIS_URL", "redisUrl"),
        ("GPUFED_LEASE_SECONDS", "leaseSeconds"),
        ("GPUFED_LEASE_RENEW_SECONDS", "leaseRenewSeconds"),
        ("GPUFED_REQUEST_HEADERS_SECONDS", "requestHeadersSeconds"),
        ("GPUFED_REQUEST_BODY_SECONDS", "requestBodySeconds"),
        ("GPUFED_API_PROCESSES", "apiProcesses"),
        ("GPUFED_CONTROLLER_NICE", "controllerNice"),
    ):
        if env.get(var):
            raw[key] = env[var]
    try:
        settings = type(cfg.settings).model_validate(raw)
    except ValidationError as exc:
        # Only the messages: pydantic's text quotes the input, and REDIS_URL may carry a password.
        msgs = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"settings from the environment: {msgs}") from None
    return cfg.model_copy(update={"settings": settings})


def _await_records(store: RedisStateStore, deadline: float) -> None:
    """Wait (bounded) until the leader has initialised or rebuilt the store, so submits are taken."""
    while time.monotonic() < deadline:
        with contextlib.suppress(StoreError):
            if store.run_marker() is not None:
                return
        time.sleep(0.05)
    log.warning("the state store is not initialised yet: submits are refused (503) until the leader does it")


def configured(config_path: Path, env: Mapping[str, str]) -> FleetConfig:
    """clusters.yaml as `gpufed serve` runs it: with the environment's settings and tokens file
    (GPUFED_TOKENS_FILE: the Helm chart mounts the tokens Secret there)."""
    cfg = with_environment(load_fleet_config(config_path), env)
    tokens_file = env.get("GPUFED_TOKENS_FILE")
    return with_tokens_file(cfg, tokens_file) if tokens_file else cfg


def serve(
    config_path: Path,
    host: str,
    port: int,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    insecure_no_auth: bool = False,
) -> None:
    """`gpufed serve`: run until interrupted. Startup problems raise StartupError or ConfigError (one
    line each)."""
    logging.basicConfig(level=logging.INFO, format=telemetry.LOG_FORMAT)
    for handler in logging.getLogger().handlers:
        telemetry.install_log_filter(handler)  # every line carries the trace id of the job it is about

    def load() -> FleetConfig:
        return configured(config_path, os.environ)

    cfg = load()
    for flag, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key)):
        if path is not None and not path.is_file():
            raise StartupError(f"{flag}: no such file: {path}")
    if (tls_cert is None) != (tls_key is None):
        raise StartupError("--tls-cert and --tls-key go together")
    check_startup(cfg, host, port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    token_table(cfg, insecure_no_auth, warn=False)  # refuse before anything starts
    scheme = "https" if tls_cert else "http"
    reaper = Reaper()  # whatever ends this process, no process it started (Ray's) outlives it
    processes = cfg.settings.api_processes
    workers: ApiWorkers | None = None
    try:
        with running_broker(
            cfg,
            host,
            port,
            tls_cert,
            tls_key,
            insecure_no_auth=insecure_no_auth,
            reload_from=(config_path, load),
            serve_api=processes == 0,
        ) as broker:
            # ray.init installs its own SIGTERM handler (exit 15 with a stack dump): take it back
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            if processes:
                args = ApiProcessArgs(
                    config_path,
                    broker.leadership.holder,
                    Path(tempfile.mkdtemp(prefix="gpufed-api-")) / "members.pickle",
                    broker.pollers.shard_names,
                    tls_cert,
                    tls_key,
                    insecure_no_auth,
                )
                workers = start_api_processes(processes, args, host, port, broker)
                nice = cfg.settings.controller_nice
                if nice and workers.spawner_tid is not None:
                    cpu_priority.lower_threads(nice, keep={workers.spawner_tid})
                    log.info("the broker process runs at niceness %d, its API processes as started", nice)
            log.info(
                "gpufed broker on %s://%s:%d with %d member clusters", scheme, host, port, len(cfg.clusters)
            )
            with contextlib.suppress(KeyboardInterrupt):
                while not stop.wait(0.5):
                    pass
            log.info("draining: refusing new work, finishing the pass, handing the lease over")
            _exit_after(cfg.settings.drain_timeout_seconds, reaper)  # the whole shutdown is bounded
            broker.drain.begin()
            if workers is not None:
                workers.stop()  # their requests in flight finish; writes get 503 meanwhile
            _bounded(broker.leadership.stop, cfg.settings.drain_timeout_seconds)
    finally:
        if workers is not None:
            workers.stop()
        reaper.close()
    log.info("gpufed broker stopped")


def start_api_processes(count: int, args: ApiProcessArgs, host: str, port: int, broker: Broker) -> ApiWorkers:
    """settings.apiProcesses: the HTTP API in `count` processes of its own on host:port; restarted when
    the member clusters change (they read them at start)."""
    workers = ApiWorkers(count, args)
    members = broker.members.traits() if broker.members is not None else dict(broker.service.traits)
    workers.start(listening_socket(host, port), members)
    if broker.members is not None:
        broker.members.on_change = workers.members_changed
    if broker.auth is not None:
        broker.auth.followers = workers.auth_changed  # a changed auth section reaches them too
    log.info("the HTTP API runs in %d process(es) of its own", count)
    return workers


def _exit_after(seconds: float, reaper: Reaper) -> None:
    """A shutdown that outlives the drain timeout (a member cluster or Ray that does not answer) ends
    anyway: the threads' stacks go to the log, the reaper ends Ray's processes, and the exit code is 0
    (the lease is released or expires, every step is resumable)."""

    def watchdog() -> None:
        time.sleep(seconds)
        log.warning("shutdown did not finish within %.0f s; exiting now. Threads:", seconds)
        faulthandler.dump_traceback(all_threads=True)
        reaper.close()
        os._exit(0)

    threading.Thread(target=watchdog, name="gpufed-shutdown-watchdog", daemon=True).start()


def _bounded(fn: Callable[[], None], seconds: float) -> None:
    """Run fn on a thread for at most `seconds` (a drain must not outlive its timeout)."""
    worker = threading.Thread(target=fn, name="gpufed-drain", daemon=True)
    worker.start()
    worker.join(timeout=seconds)
    if worker.is_alive():
        log.warning("the drain did not finish within %.0f s; stopping anyway", seconds)


def probe(nvidia_smi_xml: Path | None, fmt: str) -> str:
    """`gpufed probe`: this host's GPUs as NodeFacts and GFD-style labels."""
    return nvml.render(nvml.probe(nvidia_smi_xml), fmt)
