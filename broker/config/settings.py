"""Configuration: pydantic models of clusters.yaml and of the broker's settings.

Owns reading and validating what an operator declares. Every error is a ConfigError whose message
names the file, the cluster and the field, e.g.

    clusters.yaml: cluster 'onprem-b' (clusters[1]): kubeconfig: file not found: /etc/gpufed/b.kubeconfig

Relative kubeconfig paths are resolved against the directory of the config file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from broker.config import redis_settings
from broker.config.burst import BurstConfig
from broker.config.gpu_health import GpuHealthConfig, MetricsConfig
from broker.config.hub import HubConfig
from broker.config.notify import TenantNotifyConfig
from broker.core import safe_yaml
from broker.core.errors import ConfigError
from broker.core.model import TENANT_PLACEHOLDER, ClusterTraits, Tier
from broker.queue import queueing
from broker.scheduler import preemption
from broker.scheduler.placement import PlacementPolicy
from broker.scheduler.plugins import registry
from broker.tenancy import auth
from broker.tenancy.auth_config import AuditConfig, OidcConfig

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class KueueConfig(_Strict):
    local_queue: str = Field(alias="localQueue", min_length=1)
    # The ClusterQueue a LocalQueue the broker creates in a tenant namespace points at (default: the
    # LocalQueue's name).
    cluster_queue: str | None = Field(default=None, alias="clusterQueue", min_length=1)


def _check_tenant_namespace(pattern: str | None) -> str | None:
    """A namespace pattern names the tenant once and makes a DNS label of any tenant name."""
    if pattern is None:
        return None
    if pattern.count(TENANT_PLACEHOLDER) != 1:
        raise ValueError(f"{pattern!r}: a tenant namespace pattern holds {TENANT_PLACEHOLDER} exactly once")
    if not re.match(_DNS_LABEL, pattern.replace(TENANT_PLACEHOLDER, "t")) or len(pattern) > 40:
        raise ValueError(
            f"{pattern!r}: with the tenant in place it must be a DNS label (a-z, 0-9, '-'); "
            "keep it under 40 characters so a 23-character tenant still fits in 63"
        )
    return pattern


class SchedulersConfig(_Strict):
    topology_aware: str | None = Field(default=None, alias="topologyAware")
    gang: str | None = None


class ClusterConfig(_Strict):
    """One member cluster: how to reach it and what the operator declares about it."""

    name: str = Field(pattern=_DNS_LABEL)
    kubeconfig: Path
    context: str | None = None
    tier: Literal["on-prem", "cloud"] = "on-prem"
    region: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    namespace: str = Field(default="default", pattern=_DNS_LABEL)
    price_per_gpu_hour: dict[str, float] = Field(default_factory=dict, alias="pricePerGpuHour")
    kueue: KueueConfig | None = None
    schedulers: SchedulersConfig = Field(default_factory=SchedulersConfig)
    spot: bool = False
    # auto: whole GPUs asked as the nodes publish them (docs/dra.md); device-plugin: nvidia.com/gpu; dra: a
    # ResourceClaimTemplate of DeviceClass gpu.nvidia.com (an override; MIG on DRA always mig.nvidia.com)
    gpu_allocation: Literal["auto", "device-plugin", "dra"] = Field(default="auto", alias="gpuAllocation")
    # the NVIDIA DRA driver's ComputeDomains run here: a job in an NVLink clique gets one (docs/topology.md)
    compute_domains: bool = Field(default=False, alias="computeDomains")
    # Kubernetes 1.35's gang Workload API (scheduling.k8s.io/v1alpha1) is served: gangs get a Workload
    # and their pods a workloadRef, instead of a coscheduling PodGroup (docs/topology.md)
    workload_api: bool = Field(default=False, alias="workloadApi")
    # Tenant namespaces (docs/tenancy.md): unset here, settings.tenantNamespace / createNamespaces apply.
    tenant_namespace: str | None = Field(default=None, alias="tenantNamespace")
    create_namespaces: bool | None = Field(default=None, alias="createNamespaces")
    metrics: MetricsConfig | None = None  # the member's Prometheus (docs/health.md); else the pod proxy
    gpu_health: GpuHealthConfig = Field(default_factory=GpuHealthConfig, alias="gpuHealth")

    @field_validator("tenant_namespace")
    @classmethod
    def _tenant_namespace(cls, v: str | None) -> str | None:
        return _check_tenant_namespace(v)

    @field_validator("price_per_gpu_hour")
    @classmethod
    def _prices_not_negative(cls, v: dict[str, float]) -> dict[str, float]:
        for product, price in v.items():
            if price < 0:
                raise ValueError(f"price for {product} must be >= 0, got {price}")
        return v

    def traits(self) -> ClusterTraits:
        return ClusterTraits(
            name=self.name,
            tier=Tier(self.tier),
            region=self.region,
            labels=dict(self.labels),
            price_per_gpu_hour=dict(self.price_per_gpu_hour),
            kueue_local_queue=self.kueue.local_queue if self.kueue else None,
            topology_scheduler=self.schedulers.topology_aware,
            gang_scheduler=self.schedulers.gang,
            spot=self.spot,
            namespace=self.namespace,
            gpu_allocation=self.gpu_allocation,
            compute_domains=self.compute_domains,
            workload_api=self.workload_api,
            tenant_namespace=self.tenant_namespace,
            create_namespaces=bool(self.create_namespaces),
            kueue_cluster_queue=(self.kueue.cluster_queue or self.kueue.local_queue) if self.kueue else None,
        )


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class PluginConfig(_Strict):
    """One plugin's override: on or off, its weight (scores), its args (camelCase, as the registry says)."""

    enabled: bool | None = None
    weight: int | None = Field(default=None, ge=0, le=100)
    args: dict[str, Any] = Field(default_factory=dict)


def _check_plugins(kind: registry.Kind, plugins: dict[str, PluginConfig]) -> dict[str, PluginConfig]:
    """Every name is a registered plugin of that kind and every arg one of its knobs, of the right type."""
    for name, cfg in plugins.items():
        spec = registry.spec(kind, name)
        if spec is None:
            known = ", ".join(s.name for s in (registry.FILTERS if kind == "filter" else registry.SCORES))
            raise ValueError(f"{name}: unknown {kind} plugin (known: {known})")
        if kind == "filter" and cfg.weight is not None:
            raise ValueError(f"{name}.weight: filters take no weight")
        by_camel = {_camel(a): a for a in spec.args}
        for key in cfg.args:
            if key not in by_camel:
                allowed = ", ".join(by_camel) or "none"
                raise ValueError(f"{name}.args.{key}: unknown arg (args: {allowed})")
        try:
            TypeAdapter(spec.factory).validate_python({by_camel[k]: v for k, v in cfg.args.items()})
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(_camel(str(p)) for p in err["loc"])
            raise ValueError(f"{name}.args.{where}: {err['msg']}") from None
    return plugins


class PlacementConfig(_Strict):
    """settings.placement: which level-1 plugins run, their weights and args (docs/placement.md)."""

    prefer_onprem: bool = Field(default=True, alias="preferOnPrem")
    filters: dict[str, PluginConfig] = Field(default_factory=dict)
    scores: dict[str, PluginConfig] = Field(default_factory=dict)

    @field_validator("filters")
    @classmethod
    def _known_filters(cls, v: dict[str, PluginConfig]) -> dict[str, PluginConfig]:
        return _check_plugins("filter", v)

    @field_validator("scores")
    @classmethod
    def _known_scores(cls, v: dict[str, PluginConfig]) -> dict[str, PluginConfig]:
        return _check_plugins("score", v)

    def policy(self, staleness_limit_s: float) -> PlacementPolicy:
        """The PlacementPolicy: the registry's chains with these overrides. The health filter's
        staleness limit is `staleness_limit_s` (settings.staleAfterSeconds) unless its args set one."""

        def settings(kind: registry.Kind, name: str, cfg: PluginConfig) -> registry.PluginSettings:
            spec = registry.spec(kind, name)
            assert spec is not None  # checked by the validators
            args = {_snake(k): v for k, v in cfg.args.items()}
            made = TypeAdapter(spec.factory).validate_python(args)  # the values as validated (5 -> 5.0)
            return registry.PluginSettings(
                enabled=cfg.enabled, weight=cfg.weight, args={a: getattr(made, a) for a in args}
            )

        filters = {name: settings("filter", name, cfg) for name, cfg in self.filters.items()}
        health = filters.get("health", registry.PluginSettings())
        if "staleness_limit_seconds" not in health.args:
            filters["health"] = registry.PluginSettings(
                enabled=health.enabled,
                args={**health.args, "staleness_limit_seconds": staleness_limit_s},
            )
        return PlacementPolicy(
            filters=registry.build_filters(filters),
            scores=registry.build_scores({n: settings("score", n, c) for n, c in self.scores.items()}),
            prefer_onprem=self.prefer_onprem,
        )


def _snake(camel: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in camel)


class TenantConfig(_Strict):
    """settings.tenants.<name>: fair-share weight and fleet-wide quotas (docs/tenancy.md)."""

    weight: float = Field(default=1.0, gt=0, le=1000)
    # key -> units: a GPU product ("H100-80GB") or a MIG profile ("mig-1g.10gb")
    quotas: dict[str, int] = Field(default_factory=dict)
    notify: TenantNotifyConfig | None = None  # webhook and signing secret (broker.config.notify)

    @field_validator("quotas")
    @classmethod
    def _quotas_not_negative(cls, v: dict[str, int]) -> dict[str, int]:
        for key, units in v.items():
            if units < 0:
                raise ValueError(f"{key}: a quota must be >= 0, got {units}")
            if not key or key == queueing.ALL_GPUS:
                raise ValueError(f"{key!r}: a quota names a GPU product or mig-<profile>")
        return v


class PreemptionConfig(_Strict):
    """settings.preemption: jobs of these priority classes that fit nowhere may evict lower-priority
    running jobs (docs/tenancy.md), at most so many per tenant and fleet-wide per window."""

    priority_classes: list[str] = Field(default_factory=list, alias="priorityClasses")
    max_per_tenant: int = Field(default=4, alias="maxPerTenant", ge=0, le=10_000)
    max_global: int = Field(default=10, alias="maxGlobal", ge=0, le=100_000)
    window_seconds: float = Field(default=600.0, alias="windowSeconds", gt=0, le=86_400)

    def policy(self) -> preemption.PreemptionPolicy:
        return preemption.PreemptionPolicy(
            classes=frozenset(self.priority_classes),
            max_per_tenant=self.max_per_tenant,
            max_global=self.max_global,
            window_seconds=self.window_seconds,
        )


class Settings(_Strict):
    """Broker-wide settings, all with defaults that suit a small fleet."""

    redis_url: str = Field(default="redis://127.0.0.1:6379/0", alias="redisUrl")
    redis_prefix: str = Field(default="gpufed", alias="redisPrefix", pattern=r"^[A-Za-z0-9_.-]+$")  # no ":"
    # Redis Sentinel (docs/operations.md): `redisUrl: redis+sentinel://...`, or the block `redis:` (turned
    # into that URL at load). `redisDurability: replica`: a submit is acknowledged only once one replica
    # holds it (WAIT 1 redisWaitTimeoutMs, one per group-committed batch).
    redis_durability: Literal["none", "replica"] = Field(default="none", alias="redisDurability")
    redis_wait_timeout_ms: int = Field(default=1000, alias="redisWaitTimeoutMs", ge=1, le=60_000)
    stale_after_seconds: float = Field(default=30.0, alias="staleAfterSeconds", gt=0)
    reservation_ttl_seconds: float = Field(default=120.0, alias="reservationTtlSeconds", gt=0)
    # A finished Job is deleted from its member this long after it ended (ttlSecondsAfterFinished).
    finished_job_ttl_seconds: int = Field(default=3600, alias="finishedJobTtlSeconds", ge=0, strict=True)
    finished_job_retention_seconds: float = Field(default=604800, alias="finishedJobRetentionSeconds", gt=0)
    idempotency_key_ttl_seconds: float = Field(default=86400, alias="idempotencyKeyTtlSeconds", gt=0)
    # A cluster with no successful call for this long is lost (the pollers' broker.health.machine calls it
    # unreachable): its jobs fail over (docs/reliability.md).
    cluster_lost_seconds: float = Field(default=10.0, alias="clusterLostSeconds", gt=0)
    # How often each poller probes each member's API server (GET /version); unset: clusterLostSeconds / 5,
    # at most 10 s (2 s at the default). At most clusterLostSeconds / 3. Probes are about half of an idle
    # poller shard's CPU: a large fleet raises clusterLostSeconds and so probes less (docs/operations.md).
    probe_interval_seconds: float | None = Field(default=None, alias="probeIntervalSeconds", gt=0)
    # Most of a large fleet lost at once (this share of the clusters, in a fleet of at least
    # massLossMinClusters): failover pauses until fewer are lost (docs/reliability.md, "Mass loss").
    mass_loss_fraction: float = Field(default=0.55, alias="massLossFraction", gt=0, le=1)
    mass_loss_min_clusters: int = Field(default=10, alias="massLossMinClusters", ge=1)
    schedule_interval_seconds: float = Field(default=0.5, alias="scheduleIntervalSeconds", gt=0)
    # Member trouble (docs/health.md): pods unschedulable, or not created (an admission refusal), this long:
    # the attempt is withdrawn and the cluster avoided by that job for memberAvoidSeconds; an image that
    # cannot be pulled this long: FAILED (or withdrawn, with the job's onImagePullFailure: requeue).
    member_pending_seconds: float = Field(default=120.0, alias="memberPendingSeconds", gt=0)
    image_pull_fail_seconds: float = Field(default=300.0, alias="imagePullFailSeconds", gt=0)
    member_avoid_seconds: float = Field(default=600.0, alias="memberAvoidSeconds", ge=0)
    # Unset: one shard per 125 clusters (broker.config.sizing, docs/operations.md "Sizing").
    poller_shards: int | None = Field(default=None, alias="pollerShards", ge=1, le=64)
    # A Ray cluster to join (RAY_ADDRESS overrides it): the poller shards become the deployment's
    # detached actors there (adapters/ray_shared.py, docs/operations.md); unset: an embedded local Ray.
    ray_address: str | None = Field(default=None, alias="rayAddress", min_length=1)
    summary_interval_seconds: float = Field(default=0.2, alias="summaryIntervalSeconds", gt=0)
    sweep_interval_seconds: float = Field(default=30.0, alias="sweepIntervalSeconds", gt=0)
    # How often `gpufed serve` looks at clusters.yaml for changes to its clusters (0: never; docs/health.md).
    config_reload_seconds: float = Field(default=5.0, alias="configReloadSeconds", ge=0)
    # Job creates in flight at once on one member cluster (creates on different clusters run in parallel).
    dispatch_per_cluster: int = Field(default=4, alias="dispatchPerCluster", ge=1, le=64)
    # Job creates and deletes in flight at once across every member (docs/operations.md, 1,000 members).
    dispatch_in_flight: int = Field(default=64, alias="dispatchInFlight", ge=1, le=4096)
    # Leader lease (docs/reliability.md): only its holder runs the control loop; renewed every third of it,
    # so a killed leader is replaced within leaseSeconds.
    lease_seconds: float = Field(default=10.0, alias="leaseSeconds", gt=0, le=300)
    # How often the leader renews (default leaseSeconds / 3); must leave room inside the lease.
    lease_renew_seconds: float | None = Field(default=None, alias="leaseRenewSeconds", gt=0)
    # SIGTERM: how long the broker may take to finish its pass, hand the lease over and stop Ray.
    drain_timeout_seconds: float = Field(default=30.0, alias="drainTimeoutSeconds", gt=0)
    # Request bodies over this many bytes get 413 before they are parsed (broker.api.limits).
    max_request_bytes: int = Field(default=1 << 20, alias="maxRequestBytes", ge=1024, le=64 << 20)
    # Slow clients (broker.api.timeouts): a connection whose request headers are not all in this long
    # after it opened, or whose body is not all in this long after its headers, is closed.
    request_headers_seconds: float = Field(default=10.0, alias="requestHeadersSeconds", gt=0, le=600)
    request_body_seconds: float = Field(default=60.0, alias="requestBodySeconds", gt=0, le=3600)
    # The HTTP API in processes of its own beside the broker's (docs/operations.md "API processes"): 0
    # serves it in the broker's process; N >= 1 starts N that share the port, so a submit or a list never
    # waits for the control loop's thread (one Python thread runs at a time in a process).
    api_processes: int = Field(default=0, alias="apiProcesses", ge=0, le=32)
    # With apiProcesses >= 1: the niceness of the broker process's threads (control loop, dispatch,
    # informers), its API processes keeping the one `gpufed serve` started with, so on a machine short of
    # CPU, submits and reads are answered first and placement catches up after a burst (broker.app.
    # cpu_priority; docs/operations.md "API processes"). 0 leaves every process as started.
    controller_nice: int = Field(default=0, alias="controllerNice", ge=0, le=19)
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    # The global queue (docs/tenancy.md): priority class name -> value (higher first), and per tenant
    # its fair-share weight and quotas.
    priority_classes: dict[str, int] = Field(default_factory=dict, alias="priorityClasses")
    tenants: dict[str, TenantConfig] = Field(default_factory=dict)
    # Wait-or-burst, tenant budgets and cloud pools (docs/burst.md).
    burst: BurstConfig = Field(default_factory=BurstConfig)
    # Tenancy in the member clusters (docs/tenancy.md): each tenant's jobs run in this namespace of every
    # cluster ("gpufed-{tenant}"; a cluster's own tenantNamespace overrides it); unset: the cluster's
    # `namespace` for everyone. With createNamespaces the broker creates a missing one on first use.
    tenant_namespace: str | None = Field(default=None, alias="tenantNamespace")
    create_namespaces: bool = Field(default=False, alias="createNamespaces")
    preemption: PreemptionConfig | None = None
    # The audit trail (docs/tenancy.md): retention in Redis and an optional JSON-lines file.
    audit: AuditConfig = Field(default_factory=AuditConfig)

    @field_validator("tenant_namespace")
    @classmethod
    def _tenant_namespace(cls, v: str | None) -> str | None:
        return _check_tenant_namespace(v)

    @model_validator(mode="before")
    @classmethod
    def _redis_block(cls, raw: Any) -> Any:
        return redis_settings.block_to_url(raw)

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, v: str) -> str:
        if redis_settings.is_sentinel_url(v):
            redis_settings.parse_sentinel_url(v)  # errors name the part, never the password
        return v

    @field_validator("tenants")
    @classmethod
    def _tenant_names(cls, v: dict[str, TenantConfig]) -> dict[str, TenantConfig]:
        for name in v:
            if not re.match(_DNS_LABEL, name):
                raise ValueError(f"{name!r}: a tenant name is a DNS label")
        return v

    def queue_policy(self) -> queueing.QueuePolicy:
        return queueing.QueuePolicy(
            priorities=dict(self.priority_classes),
            tenants={
                n: queueing.TenantPolicy(weight=t.weight, quotas=dict(t.quotas))
                for n, t in self.tenants.items()
            },
        )

    @model_validator(mode="after")
    def _preempting_classes_are_declared(self) -> Settings:
        if self.preemption is not None:
            for i, name in enumerate(self.preemption.priority_classes):
                if name not in self.priority_classes:
                    raise ValueError(
                        f"preemption.priorityClasses[{i}]: {name!r} is not in priorityClasses "
                        f"(declared: {', '.join(sorted(self.priority_classes)) or 'none'})"
                    )
        return self

    @model_validator(mode="after")
    def _renew_inside_the_lease(self) -> Settings:
        if self.lease_renew_seconds is not None and self.lease_renew_seconds >= 0.9 * self.lease_seconds:
            raise ValueError(
                f"leaseRenewSeconds: {self.lease_renew_seconds:g} must be under 0.9 x leaseSeconds "
                f"({0.9 * self.lease_seconds:g}): the lease would expire between renewals"
            )
        return self

    @model_validator(mode="after")
    def _probes_inside_the_loss(self) -> Settings:
        probe = self.probe_interval_seconds
        if probe is not None and probe > self.cluster_lost_seconds / 3:
            raise ValueError(
                f"probeIntervalSeconds: {probe:g} must be at most clusterLostSeconds / 3 "
                f"({self.cluster_lost_seconds / 3:g}): a member would be lost on one or two failed probes"
            )
        return self

    def placement_policy(self) -> PlacementPolicy:
        """Level 1's policy: the plugin registry with settings.placement applied."""
        return self.placement.policy(self.stale_after_seconds)


class AuthConfig(_Strict):
    """auth: who may call the API (docs/tenancy.md): static tokens, OIDC single sign-on, or both. A relative
    path is resolved against the config file. Both are read again while the broker runs (broker.app.auth)."""

    tokens_file: Path | None = Field(default=None, alias="tokensFile")
    oidc: OidcConfig | None = None

    @model_validator(mode="after")
    def _some_credential(self) -> AuthConfig:
        if self.tokens_file is None and self.oidc is None:
            raise ValueError("tokensFile or oidc: at least one is required")
        return self


class ClusterProfilesConfig(_Strict):
    """Members discovered from ClusterProfile objects in a hub cluster (docs/clusterprofile.md)."""

    hub_kubeconfig: Path = Field(alias="hubKubeconfig")
    context: str | None = None
    namespace: str = Field(default="default", pattern=_DNS_LABEL)  # where the profiles live on the hub
    cluster_manager: str | None = Field(default=None, alias="clusterManager")  # x-k8s.io/cluster-manager
    clusterset: str | None = Field(default=None, alias="clusterSet")  # multicluster.x-k8s.io/clusterset
    # KEP-5339 provider file: {"providers": [{"name": <access provider>, "execConfig": {...}}]}
    provider_file: Path = Field(alias="providerFile")
    poll_seconds: float = Field(default=2.0, alias="pollSeconds", gt=0)
    publish: bool = True  # write the GPU capacity summary into each member's status.properties
    publish_seconds: float = Field(default=10.0, alias="publishSeconds", gt=0)
    member_namespace: str = Field(default="default", alias="memberNamespace", pattern=_DNS_LABEL)
    gpu_allocation: Literal["auto", "device-plugin", "dra"] = Field(default="auto", alias="gpuAllocation")


class FleetConfig(_Strict):
    clusters: list[ClusterConfig] = Field(default_factory=list)
    cluster_profiles: ClusterProfilesConfig | None = Field(default=None, alias="clusterProfiles")
    hub: HubConfig | None = None  # kubectl-native submission through a hub cluster (docs/hub.md)
    settings: Settings = Field(default_factory=Settings)
    auth: AuthConfig | None = None

    @model_validator(mode="after")
    def _some_members(self) -> FleetConfig:
        if not self.clusters and self.cluster_profiles is None:
            raise ValueError(
                "clusters: at least one cluster, or clusterProfiles to discover them, is required"
            )
        return self

    def cluster(self, name: str) -> ClusterConfig:
        for c in self.clusters:
            if c.name == name:
                return c
        raise KeyError(name)

    def traits(self) -> dict[str, ClusterTraits]:
        return {c.name: c.traits() for c in self.clusters}


def _describe(raw: Any, loc: tuple[int | str, ...]) -> str:
    """'cluster 'onprem-b' (clusters[1]): kubeconfig' from a pydantic error location."""
    if len(loc) >= 2 and loc[0] == "clusters" and isinstance(loc[1], int):
        name = "?"
        clusters = raw.get("clusters") if isinstance(raw, Mapping) else None
        if isinstance(clusters, list) and loc[1] < len(clusters) and isinstance(clusters[loc[1]], Mapping):
            name = str(clusters[loc[1]].get("name", "?"))
        field = ".".join(str(p) for p in loc[2:]) or "(the entry)"
        return f"cluster '{name}' (clusters[{loc[1]}]): {field}"
    return ".".join(str(p) for p in loc) or "(top level)"


def parse_fleet_config(raw: Any, source: str, base_dir: Path) -> FleetConfig:
    """Validate an already-parsed YAML document. `source` names it in errors."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: expected a mapping with a 'clusters' list at the top level")
    try:
        cfg = FleetConfig.model_validate(raw)
    except ValidationError as exc:
        lines = [
            f"{source}: {_describe(raw, tuple(e['loc']))}: {e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        ]
        raise ConfigError("\n".join(lines)) from None
    seen: set[str] = set()
    resolved: list[ClusterConfig] = []
    for i, c in enumerate(cfg.clusters):
        where = f"{source}: cluster '{c.name}' (clusters[{i}])"
        if c.name in seen:
            raise ConfigError(f"{where}: name: duplicate cluster name")
        seen.add(c.name)
        path = c.kubeconfig if c.kubeconfig.is_absolute() else (base_dir / c.kubeconfig)
        resolved.append(
            c.model_copy(
                update={
                    "kubeconfig": path.resolve(),
                    "metrics": c.metrics.resolved(base_dir) if c.metrics else None,
                    "tenant_namespace": c.tenant_namespace or cfg.settings.tenant_namespace,
                    "create_namespaces": (
                        cfg.settings.create_namespaces if c.create_namespaces is None else c.create_namespaces
                    ),
                }
            )
        )
    update: dict[str, Any] = {"clusters": resolved}
    if cfg.auth is not None and cfg.auth.tokens_file is not None:
        tokens = cfg.auth.tokens_file
        tokens = tokens if tokens.is_absolute() else base_dir / tokens
        update["auth"] = cfg.auth.model_copy(update={"tokens_file": tokens.resolve()})
    cp = cfg.cluster_profiles
    if cp is not None:

        def absolute(p: Path) -> Path:
            return (p if p.is_absolute() else base_dir / p).resolve()

        update["cluster_profiles"] = cp.model_copy(
            update={
                "hub_kubeconfig": absolute(cp.hub_kubeconfig),
                "provider_file": absolute(cp.provider_file),
            }
        )
    if cfg.hub is not None and not cfg.hub.kubeconfig.is_absolute():
        update["hub"] = cfg.hub.model_copy(update={"kubeconfig": (base_dir / cfg.hub.kubeconfig).resolve()})
    return cfg.model_copy(update=update)


# A tokens file is small; a bigger one is refused before it is parsed.
MAX_TOKENS_FILE_BYTES = 1 << 20


def load_tokens(path: Path) -> auth.TokenTable:
    """The tokens file (YAML list, or a Kubernetes static token CSV when it ends in .csv), hashed."""
    try:
        size = path.stat().st_size
        if size > MAX_TOKENS_FILE_BYTES:
            raise ConfigError(f"auth.tokensFile: {path}: larger than {MAX_TOKENS_FILE_BYTES} bytes")
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"auth.tokensFile: {path}: cannot read: {exc.strerror}") from None
    try:
        if path.suffix == ".csv":
            return auth.parse_static_token_csv(text, f"auth.tokensFile {path}")
        try:
            raw = safe_yaml.load(text, str(path))
        except safe_yaml.YamlError as exc:
            raise ConfigError(f"auth.tokensFile: {path}: not valid YAML: {exc}") from None
        return auth.parse_tokens(raw, f"auth.tokensFile {path}")
    except auth.TokensError as exc:
        raise ConfigError(str(exc)) from None


def load_fleet_config(path: Path, check_kubeconfigs: bool = True) -> FleetConfig:
    """Read and validate clusters.yaml. With check_kubeconfigs, every kubeconfig must exist and name its context."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        raw = safe_yaml.load(text, str(path))
    except safe_yaml.YamlError as exc:
        raise ConfigError(str(exc)) from None
    cfg = parse_fleet_config(raw, str(path), path.parent)
    if check_kubeconfigs:
        for i, c in enumerate(cfg.clusters):
            check_kubeconfig(c, f"{path}: cluster '{c.name}' (clusters[{i}])")
        cp = cfg.cluster_profiles
        if cp is not None:
            for field, file in (("hubKubeconfig", cp.hub_kubeconfig), ("providerFile", cp.provider_file)):
                if not file.is_file():
                    raise ConfigError(f"{path}: clusterProfiles.{field}: file not found: {file}")
        if cfg.hub is not None and not cfg.hub.kubeconfig.is_file():
            raise ConfigError(f"{path}: hub.kubeconfig: file not found: {cfg.hub.kubeconfig}")
    return cfg


def check_kubeconfig(cluster: ClusterConfig, where: str) -> None:
    """The kubeconfig exists, parses, and has the context (or a current-context)."""
    try:
        doc = safe_yaml.load(cluster.kubeconfig.read_bytes(), str(cluster.kubeconfig))
    except OSError:
        raise ConfigError(f"{where}: kubeconfig: file not found: {cluster.kubeconfig}") from None
    except safe_yaml.YamlError:
        raise ConfigError(f"{where}: kubeconfig: not valid YAML: {cluster.kubeconfig}") from None
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: kubeconfig: not a kubeconfig document: {cluster.kubeconfig}")
    contexts = {c.get("name") for c in doc.get("contexts") or [] if isinstance(c, Mapping)}
    wanted = cluster.context or doc.get("current-context")
    if not wanted:
        raise ConfigError(f"{where}: context: not set and the kubeconfig has no current-context")
    if wanted not in contexts:
        raise ConfigError(
            f"{where}: context: '{wanted}' not in {cluster.kubeconfig} (has: {', '.join(sorted(map(str, contexts)))})"
        )
