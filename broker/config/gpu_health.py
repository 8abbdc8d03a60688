"""Per-cluster GPU health settings in clusters.yaml (docs/health.md): where health comes from, the rules.

    clusters:
    - name: onprem-a
      kubeconfig: a.kubeconfig
      metrics:                               # optional: read dcgm-exporter through the member's Prometheus
        prometheusUrl: https://prom.example:9090
        match: 'cluster="onprem-a"'          # optional: where one Prometheus holds several clusters
        bearerTokenFile: prom.token          # or bearerToken; like a kubeconfig's token / tokenFile
        caFile: prom-ca.crt                  # or insecureSkipTlsVerify: true
      gpuHealth:                             # every field optional; these are the defaults
        enabled: true
        intervalSeconds: 10
        recoverAfterSeconds: 300             # healthy this long before a GPU counts again
        nodeReleaseAfterSeconds: 3600        # a quarantined node, after its last fault
        breaker: {share: 0.2, windowSeconds: 3600}
        ignoredXids: []                      # more application XIDs than the device plugin's
        dcgmExporter: {enabled: true, namespace: gpu-operator, labelSelector: app=nvidia-dcgm-exporter,
                       port: 9400, path: /metrics}
        nodeConditions: [{type: GpuXidError, status: "True"}, ...]
        nodeTaints: [...]

Without `metrics`, dcgm-exporter is read through the API server's pod proxy with the kubeconfig's
credentials. Relative file paths are resolved against the config file's directory (resolved()).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from broker.health.quarantine import HealthPolicy

__all__ = [
    "DEFAULT_CONDITIONS",
    "DEFAULT_TAINTS",
    "BreakerConfig",
    "ConditionRule",
    "DcgmExporterConfig",
    "GpuHealthConfig",
    "MetricsConfig",
    "from_json",
    "to_json",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class MetricsConfig(_Strict):
    """The member's Prometheus (any server speaking Prometheus's HTTP API /api/v1/query)."""

    prometheus_url: str = Field(alias="prometheusUrl", min_length=1)
    bearer_token: SecretStr | None = Field(default=None, alias="bearerToken")
    bearer_token_file: Path | None = Field(default=None, alias="bearerTokenFile")
    ca_file: Path | None = Field(default=None, alias="caFile")
    insecure_skip_tls_verify: bool = Field(default=False, alias="insecureSkipTlsVerify")
    timeout_seconds: float = Field(default=5.0, alias="timeoutSeconds", gt=0, le=60)
    # label matchers added to the query where one Prometheus holds several clusters' series (Thanos, a
    # shared server): e.g. 'cluster="onprem-a"'
    match: str = Field(default="", max_length=500)

    @field_validator("prometheus_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"{v!r}: an http:// or https:// URL is required")
        return v.rstrip("/")

    @model_validator(mode="after")
    def _one_of_each(self) -> MetricsConfig:
        if self.bearer_token is not None and self.bearer_token_file is not None:
            raise ValueError("bearerToken and bearerTokenFile: give one, not both")
        if self.ca_file is not None and self.insecure_skip_tls_verify:
            raise ValueError("caFile and insecureSkipTlsVerify: give one, not both")
        return self

    def resolved(self, base_dir: Path) -> MetricsConfig:
        def absolute(p: Path | None) -> Path | None:
            return None if p is None else (p if p.is_absolute() else base_dir / p).resolve()

        return self.model_copy(
            update={"bearer_token_file": absolute(self.bearer_token_file), "ca_file": absolute(self.ca_file)}
        )


class DcgmExporterConfig(_Strict):
    """The exporter pods, reached through the API server's pod proxy (as the GPU operator deploys them)."""

    enabled: bool = True
    namespace: str = Field(default="gpu-operator", min_length=1)
    label_selector: str = Field(default="app=nvidia-dcgm-exporter", alias="labelSelector", min_length=1)
    port: int | str = 9400  # number or port name
    path: str = "/metrics"

    @field_validator("path")
    @classmethod
    def _absolute(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError(f"{v!r}: a path starts with /")
        return v


class ConditionRule(_Strict):
    """A node condition a health agent sets: the node's GPUs are unhealthy while it has this status."""

    type: str = Field(min_length=1)
    status: Literal["True", "False", "Unknown"] = "True"


class BreakerConfig(_Strict):
    share: float = Field(default=0.2, gt=0, le=1)  # of the cluster's GPUs, quarantined inside the window
    window_seconds: float = Field(default=3600.0, alias="windowSeconds", gt=0, le=7 * 86400)


# NVSentinel's GPU health monitors report as node conditions named after their checks; the EKS node
# monitoring agent reports AcceleratedHardwareReady False. Operators add their own (NPD custom rules).
DEFAULT_CONDITIONS: tuple[ConditionRule, ...] = (
    ConditionRule(type="GpuXidError"),
    ConditionRule(type="SysLogsXIDError"),
    ConditionRule(type="GpuMemWatch"),
    ConditionRule(type="GpuNvlinkWatch"),
    ConditionRule(type="GpuPcieWatch"),
    ConditionRule(type="GpuThermalWatch"),
    ConditionRule(type="AcceleratedHardwareReady", status="False"),
)
# Taints health agents put on nodes with broken GPUs (any value, effect NoSchedule or NoExecute).
DEFAULT_TAINTS: tuple[str, ...] = ("nvidia.com/gpu-error", "AcceleratedHardwareReady")


class GpuHealthConfig(_Strict):
    enabled: bool = True
    interval_seconds: float = Field(default=10.0, alias="intervalSeconds", ge=0.5, le=3600)
    recover_after_seconds: float = Field(default=300.0, alias="recoverAfterSeconds", ge=0, le=7 * 86400)
    node_release_after_seconds: float = Field(
        default=3600.0, alias="nodeReleaseAfterSeconds", ge=0, le=30 * 86400
    )
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    ignored_xids: tuple[int, ...] = Field(default=(), alias="ignoredXids")
    dcgm_exporter: DcgmExporterConfig = Field(default_factory=DcgmExporterConfig, alias="dcgmExporter")
    node_conditions: tuple[ConditionRule, ...] = Field(default=DEFAULT_CONDITIONS, alias="nodeConditions")
    node_taints: tuple[str, ...] = Field(default=DEFAULT_TAINTS, alias="nodeTaints")

    @field_validator("ignored_xids")
    @classmethod
    def _xid_codes(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        for i, code in enumerate(v):
            if not 1 <= code <= 1000:
                raise ValueError(f"[{i}]: {code} is not an XID code (1..1000)")
        return v

    def policy(self) -> HealthPolicy:
        return HealthPolicy(
            recover_after_seconds=self.recover_after_seconds,
            breaker_share=self.breaker.share,
            breaker_window_seconds=self.breaker.window_seconds,
            node_release_after_seconds=self.node_release_after_seconds,
        )


def to_json(cfg: GpuHealthConfig, metrics: MetricsConfig | None) -> str:
    """The cluster's health settings as the pollers receive them (PollerSpec.health; the token inline,
    as the pollers need it: prefer bearerTokenFile, which travels as a path)."""
    doc: dict[str, object] = {"gpuHealth": cfg.model_dump(by_alias=True, mode="json")}
    if metrics is not None:
        m = metrics.model_dump(by_alias=True, mode="json", exclude_none=True)
        if metrics.bearer_token is not None:
            m["bearerToken"] = metrics.bearer_token.get_secret_value()
        doc["metrics"] = m
    return json.dumps(doc, sort_keys=True)


def from_json(text: str) -> tuple[GpuHealthConfig, MetricsConfig | None]:
    """Back from to_json ("" is the defaults, no Prometheus)."""
    if not text:
        return GpuHealthConfig(), None
    doc = json.loads(text)
    metrics = doc.get("metrics")
    return GpuHealthConfig.model_validate(doc["gpuHealth"]), MetricsConfig.model_validate(
        metrics
    ) if metrics else None
