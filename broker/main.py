"""Composition root: the one broker module that wires adapters into ports.

build_service(cfg)            BrokerService over RedisStateStore + WatchingGateway (a KubeGateway whose Job
                              status reads come from one Job informer per cluster) + SystemClock
running_broker(cfg, host, port)  a context manager: Ray pollers, Job informers, control loop, HTTP API, and
                              the ClusterProfile sync when configured; all stopped on exit
serve(config_path, host, port)   `gpufed serve`: the same, until SIGINT/SIGTERM; REDIS_URL overrides the
                              config file's settings.redisUrl, GPUFED_TOKENS_FILE its auth.tokensFile. Both
                              refuse to start without a tokens file unless insecure_no_auth
                              (`gpufed serve --insecure-no-auth`).
probe(xml, fmt)               `gpufed probe`
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from adapters import nvml
from adapters.clusterprofile import ClusterProfileHub, ClusterProfileSync, load_provider_file
from adapters.job_informer import WatchingGateway
from adapters.kube_rest import KubeRest
from adapters.ray_actors import PollerFleet, PollerSpec
from adapters.redis_store import RedisStateStore
from adapters.system_clock import SystemClock
from broker import clusterprofile, telemetry
from broker.api import create_app
from broker.auth import TokenTable
from broker.config import AuthConfig, FleetConfig, load_fleet_config, load_tokens
from broker.control_loop import ControlLoop
from broker.dispatch import ConcurrentDispatcher
from broker.errors import ConfigError, StoreError
from broker.health import HealthThresholds
from broker.model import ClusterSummary, ClusterTraits
from broker.service import BrokerService, ServiceSettings

log = logging.getLogger(__name__)


@dataclass
class Broker:
    service: BrokerService
    store: RedisStateStore
    gateway: WatchingGateway
    loop: ControlLoop
    pollers: PollerFleet
    profiles: ClusterProfileSync | None = None

    def store_cleanup(self) -> int:
        """Delete every key under this broker's prefix (the demo uses a throwaway prefix)."""
        client = self.store.client
        keys = list(client.scan_iter(match=f"{self.store.prefix}:*", count=1000))
        return int(client.delete(*keys)) if keys else 0


def build_service(cfg: FleetConfig) -> tuple[BrokerService, RedisStateStore, WatchingGateway]:
    """The service and its adapters, not started: the gateway's Job informers start with start()."""
    settings = cfg.settings
    store = RedisStateStore(settings.redis_url, prefix=settings.redis_prefix)
    gateway = WatchingGateway.watching(
        {c.name: (c.kubeconfig, c.context) for c in cfg.clusters},
        {c.name: c.namespace for c in cfg.clusters},
    )
    policy = settings.placement_policy()
    service = BrokerService(
        store,
        gateway,
        SystemClock(),
        cfg.traits(),
        policy,
        ServiceSettings(
            reservation_ttl_seconds=settings.reservation_ttl_seconds,
            cluster_lost_seconds=settings.cluster_lost_seconds,
            queue=settings.queue_policy(),
        ),
        dispatcher=ConcurrentDispatcher(settings.dispatch_per_cluster),
    )
    return service, store, gateway


def poller_specs(cfg: FleetConfig) -> list[PollerSpec]:
    return [
        PollerSpec(name=c.name, kubeconfig=str(c.kubeconfig), context=c.context, traits=c.traits())
        for c in cfg.clusters
    ]


class StartupError(RuntimeError):
    """The broker cannot start; the message is one line naming the cause."""


def check_startup(cfg: FleetConfig, host: str, port: int) -> None:
    """What would otherwise fail deep inside a start, checked first: Redis answers, the port is free."""
    url = cfg.settings.redis_url
    shown = url.split("@")[-1]  # never print a password
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
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except OSError as e:
        raise StartupError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def token_table(cfg: FleetConfig, insecure_no_auth: bool) -> TokenTable | None:
    """The API's tokens (auth.tokensFile), or None for an explicit --insecure-no-auth; neither is an error."""
    if cfg.auth is not None:
        if insecure_no_auth:
            raise ConfigError("auth.tokensFile is set and --insecure-no-auth was given: choose one")
        return load_tokens(cfg.auth.tokens_file)
    if insecure_no_auth:
        log.warning("serving WITHOUT authentication (--insecure-no-auth): every caller is an admin")
        return None
    raise ConfigError(
        "no authentication configured: set auth.tokensFile in the config (docs/tenancy.md), "
        "or pass --insecure-no-auth for local play"
    )


def health_thresholds(cfg: FleetConfig) -> HealthThresholds:
    """The pollers' health machine, with settings.clusterLostSeconds."""
    return HealthThresholds(lost_seconds=cfg.settings.cluster_lost_seconds)


def start_cluster_profiles(
    cfg: FleetConfig,
    service: BrokerService,
    store: RedisStateStore,
    gateway: WatchingGateway,
    pollers: PollerFleet,
    workdir: Path,
) -> ClusterProfileSync | None:
    """Members from ClusterProfiles on the hub (cfg.clusterProfiles): each added profile gets a gateway
    client, a poller and traits (placeable from then on); a deleted one is drained: no new placements,
    its poller and summary go, and the jobs already there are still followed to their end."""
    cpc = cfg.cluster_profiles
    if cpc is None:
        return None
    static = {c.name for c in cfg.clusters}
    members = dict(service.traits)  # the sync thread's view; the service takes copies (set_traits)
    providers = load_provider_file(cpc.provider_file)
    hub = ClusterProfileHub(
        KubeRest.from_kubeconfig("hub", cpc.hub_kubeconfig, cpc.context),
        cpc.namespace,
        clusterprofile.label_selector(cpc.cluster_manager, cpc.clusterset),
    )

    def on_add(member: clusterprofile.ProfileMember, kubeconfig: Path) -> None:
        if member.name in static:
            log.warning("clusterprofile %s: a cluster of that name is in clusters.yaml; ignored", member.name)
            return
        traits = ClusterTraits(
            name=member.name,
            region=member.region,
            labels=dict(member.labels),
            namespace=cpc.member_namespace,
            dra=cpc.gpu_allocation == "dra",
        )
        # its Jobs followed by watch like the declared clusters' (reads are GETs until that syncs)
        gateway.add_cluster(KubeRest.from_kubeconfig(member.name, kubeconfig, None), cpc.member_namespace)
        pollers.add_cluster(PollerSpec(member.name, str(kubeconfig), None, traits))
        members[member.name] = traits
        service.set_traits(members)  # the control loop's next pass places on it

    def on_remove(name: str) -> None:
        if name in static:
            return
        members.pop(name, None)
        service.set_traits(members)  # no new placement lands there from the next pass on
        pollers.remove_cluster(name)
        store.delete_summary(name)

    def summary_of(name: str) -> ClusterSummary | None:
        # every member with a profile gets its capacity published, clusters.yaml ones included
        return store.get_summary(name)

    sync = ClusterProfileSync(
        hub,
        providers,
        workdir,
        on_add,
        on_remove,
        summary_of if cpc.publish else None,
        poll_seconds=cpc.poll_seconds,
        publish_seconds=cpc.publish_seconds,
    )
    sync.start()
    return sync


@contextlib.contextmanager
def running_broker(
    cfg: FleetConfig,
    host: str = "127.0.0.1",
    port: int = 8080,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    insecure_no_auth: bool = False,
) -> Iterator[Broker]:
    """Everything a broker process runs, started in order and stopped in reverse order. With tls_cert
    and tls_key, the API serves HTTPS. Refuses to start without auth.tokensFile unless
    `insecure_no_auth`."""
    tokens = token_table(cfg, insecure_no_auth)
    if cfg.cluster_profiles is not None:
        load_provider_file(cfg.cluster_profiles.provider_file)  # a bad file stops us before anything runs
    service, store, gateway = build_service(cfg)
    telemetry.configure_tracing()  # exporters per OTEL_TRACES_EXPORTER (none when unset)
    pollers = PollerFleet(
        poller_specs(cfg),
        redis_url=cfg.settings.redis_url,
        prefix=cfg.settings.redis_prefix,
        shards=cfg.settings.poller_shards,
        summary_interval_seconds=cfg.settings.summary_interval_seconds,
        health=health_thresholds(cfg),
    )
    loop = ControlLoop(service, cfg.settings.schedule_interval_seconds, cfg.settings.sweep_interval_seconds)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(
                service,
                service.clock,
                max_body_bytes=cfg.settings.max_request_bytes,
                logs=gateway,
                tokens=tokens,
            ),
            host=host,
            port=port,
            log_level="warning",
            lifespan="off",
            ssl_certfile=str(tls_cert) if tls_cert else None,
            ssl_keyfile=str(tls_key) if tls_key else None,
        )
    )
    thread = threading.Thread(target=server.run, name="gpufed-api", daemon=True)
    pollers.start()
    profiles: ClusterProfileSync | None = None
    workdir = Path(tempfile.mkdtemp(prefix="gpufed-clusterprofiles-"))
    try:
        gateway.start()
        profiles = start_cluster_profiles(cfg, service, store, gateway, pollers, workdir)
        loop.start()
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not server.started:
            raise RuntimeError(f"the HTTP API did not start on {host}:{port}")
        yield Broker(service, store, gateway, loop, pollers, profiles)
    finally:
        server.should_exit = True
        if thread.ident is not None:  # started
            thread.join(timeout=10)
        if profiles is not None:
            profiles.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        loop.stop()
        service.dispatcher.close()
        pollers.stop()
        gateway.close()
        store.close()
        telemetry.shutdown_tracing()


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
    cfg = load_fleet_config(config_path)
    redis_url = os.environ.get("REDIS_URL")  # the Helm chart passes the URL with its password here
    if redis_url:
        cfg = cfg.model_copy(update={"settings": cfg.settings.model_copy(update={"redis_url": redis_url})})
    for flag, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key)):
        if path is not None and not path.is_file():
            raise StartupError(f"{flag}: no such file: {path}")
    if (tls_cert is None) != (tls_key is None):
        raise StartupError("--tls-cert and --tls-key go together")
    check_startup(cfg, host, port)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    tokens_file = os.environ.get("GPUFED_TOKENS_FILE")  # the Helm chart mounts the tokens Secret here
    if tokens_file:
        cfg = cfg.model_copy(update={"auth": AuthConfig.model_validate({"tokensFile": tokens_file})})
    token_table(cfg, insecure_no_auth)  # refuse before anything starts
    scheme = "https" if tls_cert else "http"
    with running_broker(cfg, host, port, tls_cert, tls_key, insecure_no_auth=insecure_no_auth):
        log.info("gpufed broker on %s://%s:%d with %d member clusters", scheme, host, port, len(cfg.clusters))
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()


def probe(nvidia_smi_xml: Path | None, fmt: str) -> str:
    """`gpufed probe`: this host's GPUs as NodeFacts and GFD-style labels."""
    return nvml.render(nvml.probe(nvidia_smi_xml), fmt)
