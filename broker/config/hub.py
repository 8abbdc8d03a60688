"""The `hub:` section of clusters.yaml: kubectl-native submission through a hub cluster (docs/hub.md).

Owns `HubConfig`: the hub's kubeconfig and context, the namespaces watched (all when unset), the mapping
of hub namespaces to tenants (a namespace not in it is the tenant of its own name), and how often the
hub's APIs are looked up again (a kind it does not serve yet) and the broker's hub jobs are compared with
the hub's objects (a delete missed while the broker was down). Validated by pydantic; errors name the
field (clusters.yaml: hub.tenantMapping.Team_A: ...).
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["HubConfig"]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class HubConfig(BaseModel):
    """hub: where users `kubectl apply` workloads with spec.managedBy: gpufed.io/broker."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    kubeconfig: Path
    context: str | None = None
    namespaces: list[str] | None = None  # None: every namespace of the hub
    tenant_mapping: dict[str, str] = Field(default_factory=dict, alias="tenantMapping")
    discovery_seconds: float = Field(default=60.0, alias="discoverySeconds", gt=0, le=3600)
    reconcile_seconds: float = Field(default=60.0, alias="reconcileSeconds", gt=0, le=3600)

    @field_validator("namespaces")
    @classmethod
    def _namespaces(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("leave it out to watch every namespace, or name at least one")
        for i, name in enumerate(v):
            if not _DNS_LABEL.match(name):
                raise ValueError(f"[{i}] {name!r}: a namespace name is a DNS label (a-z, 0-9, '-')")
        if len(set(v)) != len(v):
            raise ValueError("a namespace is named twice")
        return v

    @field_validator("tenant_mapping")
    @classmethod
    def _mapping(cls, v: dict[str, str]) -> dict[str, str]:
        for namespace, tenant in v.items():
            if not _DNS_LABEL.match(namespace):
                raise ValueError(f"{namespace!r}: a hub namespace name is a DNS label (a-z, 0-9, '-')")
            if not _DNS_LABEL.match(tenant):
                raise ValueError(f"{namespace}: {tenant!r}: a tenant name is a DNS label (a-z, 0-9, '-')")
        return v
