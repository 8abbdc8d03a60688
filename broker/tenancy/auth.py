"""Who is calling: bearer tokens mapped to a tenant and a role, and what each role may do.

Owns parsing the tokens file (docs/tenancy.md), holding the tokens hashed (SHA-256; the plain text is
never kept), authenticating a bearer token, and the role rules:

    user     submits, reads and cancels the jobs of its own tenant; reads fleet and clusters
    admin    everything, every tenant's jobs
    viewer   reads fleet, clusters and the queue (every tenant's jobs), changes nothing

The tokens file is YAML, a list of {name, tenant, role, token}; token is plain or "sha256:<64 hex>".
A Kubernetes static token file (CSV: token,user,uid,"group1,group2") is read too when the path ends in
.csv: the tenant and role come from the groups "gpufed:tenant:<tenant>" and "gpufed:role:<role>".
Pure: the caller reads the file; no I/O here.
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "ANONYMOUS_ADMIN",
    "Principal",
    "Role",
    "TokenTable",
    "TokensError",
    "parse_static_token_csv",
    "parse_tokens",
]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SHA256 = re.compile(r"^sha256:([0-9a-fA-F]{64})$")
MIN_TOKEN_LENGTH = 16


class TokensError(ValueError):
    """A bad tokens file; the message names the entry and the field."""


class Role(StrEnum):
    USER = "user"
    ADMIN = "admin"
    VIEWER = "viewer"


@dataclass(frozen=True)
class Principal:
    name: str
    tenant: str
    role: Role

    @property
    def can_submit(self) -> bool:
        return self.role in (Role.USER, Role.ADMIN)

    @property
    def sees_all_tenants(self) -> bool:
        return self.role in (Role.ADMIN, Role.VIEWER)

    def may_read(self, tenant: str) -> bool:
        return self.sees_all_tenants or tenant == self.tenant

    def may_cancel(self, tenant: str) -> bool:
        return self.role is Role.ADMIN or (self.role is Role.USER and tenant == self.tenant)


# What --insecure-no-auth runs as: every request is an admin of the tenant "default".
ANONYMOUS_ADMIN = Principal("anonymous", "default", Role.ADMIN)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenTable:
    """Tokens by their SHA-256 digest; the plain tokens are not kept."""

    def __init__(self, by_digest: Mapping[str, Principal]) -> None:
        self._by_digest = dict(by_digest)

    def __len__(self) -> int:
        return len(self._by_digest)

    def authenticate(self, token: str) -> Principal | None:
        # Looked up by the digest of what was sent: how long a lookup takes can tell a caller about
        # SHA-256 digests only, never about a token, so a dict is as safe as a constant-time scan.
        return self._by_digest.get(digest(token))


def _entry_digest(token: Any, where: str) -> str:
    if not isinstance(token, str) or not token:
        raise TokensError(f"{where}: token: required, a string")
    m = _SHA256.match(token)
    if m:
        return m.group(1).lower()
    if token.startswith("sha256:"):
        raise TokensError(f"{where}: token: sha256: must be followed by 64 hex digits")
    if len(token) < MIN_TOKEN_LENGTH:
        raise TokensError(f"{where}: token: at least {MIN_TOKEN_LENGTH} characters")
    return digest(token)


def _principal(name: Any, tenant: Any, role: Any, where: str) -> Principal:
    if not isinstance(name, str) or not name:
        raise TokensError(f"{where}: name: required, a string")
    if not isinstance(tenant, str) or not _DNS_LABEL.match(tenant):
        raise TokensError(f"{where}: tenant: required, a DNS label (lowercase letters, digits, '-')")
    try:
        parsed = Role(role)
    except ValueError:
        raise TokensError(f"{where}: role: one of user, admin, viewer (got {role!r})") from None
    return Principal(name, tenant, parsed)


def _table(entries: list[tuple[str, Principal, str]]) -> TokenTable:
    by_digest: dict[str, Principal] = {}
    for d, principal, where in entries:
        if d in by_digest:
            raise TokensError(f"{where}: token: the same token as {by_digest[d].name!r}")
        by_digest[d] = principal
    return TokenTable(by_digest)


def parse_tokens(raw: Any, source: str) -> TokenTable:
    """The YAML tokens file, already parsed: a list of {name, tenant, role, token}."""
    if not isinstance(raw, list) or not raw:
        raise TokensError(f"{source}: expected a non-empty list of {{name, tenant, role, token}}")
    entries: list[tuple[str, Principal, str]] = []
    for i, item in enumerate(raw):
        where = f"{source}: [{i}]"
        if not isinstance(item, Mapping):
            raise TokensError(f"{where}: expected a mapping with name, tenant, role, token")
        extra = sorted(set(item) - {"name", "tenant", "role", "token"})
        if extra:
            raise TokensError(f"{where}: {extra[0]}: unknown field (fields: name, tenant, role, token)")
        where = f"{source}: [{i}] ({item.get('name', '?')})"
        principal = _principal(item.get("name"), item.get("tenant"), item.get("role"), where)
        entries.append((_entry_digest(item.get("token"), where), principal, where))
    return _table(entries)


def parse_static_token_csv(text: str, source: str) -> TokenTable:
    """A Kubernetes static token file: token,user,uid[,"group1,group2"] per line."""
    entries: list[tuple[str, Principal, str]] = []
    for n, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or not "".join(row).strip():
            continue
        where = f"{source}: line {n}"
        if len(row) < 3:
            raise TokensError(f'{where}: expected token,user,uid[,"groups"]')
        token, user = row[0].strip(), row[1].strip()
        groups = [g.strip() for g in row[3].split(",")] if len(row) > 3 else []
        tenant = next(
            (g.removeprefix("gpufed:tenant:") for g in groups if g.startswith("gpufed:tenant:")), None
        )
        role = next((g.removeprefix("gpufed:role:") for g in groups if g.startswith("gpufed:role:")), None)
        if tenant is None:
            raise TokensError(f"{where}: groups: needs a group gpufed:tenant:<tenant>")
        if role is None:
            raise TokensError(f"{where}: groups: needs a group gpufed:role:<user|admin|viewer>")
        principal = _principal(user, tenant, role, f"{where} ({user})")
        entries.append((_entry_digest(token, f"{where} ({user})"), principal, f"{where} ({user})"))
    if not entries:
        raise TokensError(f"{source}: no tokens")
    return _table(entries)
