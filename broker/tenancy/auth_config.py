"""The settings of single sign-on and of the audit trail, as pydantic models (broker.config style: every
error names the field). Read by broker.config: `auth.oidc` and `settings.audit` (docs/tenancy.md).

    auth:
      tokensFile: tokens.yaml           # optional once oidc is set
      oidc:
        issuerUrl: https://keycloak.example/realms/gpu   # https (http only for a loopback issuer)
        audience: gpufed                # the token's aud must hold it (the client id)
        usernameClaim: preferred_username   # default sub
        groupsClaim: groups             # default groups
        tenantsFromGroups: {ml-team: ml, vision-team: vision}   # first listed group the token has wins
        rolesFromGroups: {gpufed-admins: admin, auditors: viewer}
        defaultRole: user               # a token in no role group
        clockSkewSeconds: 30            # leeway on exp, nbf, iat
        keysRefetchSeconds: 10          # an unknown kid refetches the JWKS at most this often
    settings:
      audit:
        logFile: /var/log/gpufed/audit.jsonl   # also a JSON-lines file (optional)
        retentionDays: 30               # Redis keeps records this long ...
        maxRecords: 200000              # ... and at most this many
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from broker.tenancy.auth import Role
from broker.tenancy.oidc_claims import OidcPolicy

__all__ = ["AuditConfig", "OidcConfig"]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class OidcConfig(_Strict):
    issuer_url: str = Field(alias="issuerUrl", min_length=1)
    audience: str = Field(min_length=1)
    groups_claim: str = Field(default="groups", alias="groupsClaim", min_length=1)
    username_claim: str = Field(default="sub", alias="usernameClaim", min_length=1)
    tenants_from_groups: dict[str, str] = Field(alias="tenantsFromGroups", min_length=1)
    roles_from_groups: dict[str, Literal["user", "admin", "viewer"]] = Field(
        default_factory=dict, alias="rolesFromGroups"
    )
    default_role: Literal["user", "viewer"] = Field(default="user", alias="defaultRole")
    clock_skew_seconds: float = Field(default=30.0, alias="clockSkewSeconds", ge=0, le=300)
    keys_refetch_seconds: float = Field(default=10.0, alias="keysRefetchSeconds", ge=0.1, le=3600)

    @field_validator("issuer_url")
    @classmethod
    def _issuer(cls, v: str) -> str:
        url = urlsplit(v)
        if url.scheme == "https" and url.hostname:
            return v
        if url.scheme == "http" and url.hostname in _LOOPBACK:
            return v
        raise ValueError(f"{v!r}: the issuer's https:// URL (http:// only for an issuer on this host)")

    @field_validator("tenants_from_groups")
    @classmethod
    def _tenants(cls, v: dict[str, str]) -> dict[str, str]:
        for group, tenant in v.items():
            if not group:
                raise ValueError("a group name is required")
            if not _DNS_LABEL.match(tenant):
                raise ValueError(f"{group}: {tenant!r} is not a tenant name (a DNS label)")
        return v

    def policy(self) -> OidcPolicy:
        return OidcPolicy(
            issuer=self.issuer_url,
            audience=self.audience,
            groups_claim=self.groups_claim,
            username_claim=self.username_claim,
            tenants_from_groups=dict(self.tenants_from_groups),
            roles_from_groups={g: Role(r) for g, r in self.roles_from_groups.items()},
            default_role=Role(self.default_role),
        )


class AuditConfig(_Strict):
    log_file: Path | None = Field(default=None, alias="logFile")
    retention_days: float = Field(default=30.0, alias="retentionDays", gt=0, le=3650)
    max_records: int = Field(default=200_000, alias="maxRecords", ge=1000, le=50_000_000)
