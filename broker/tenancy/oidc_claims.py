"""From the verified claims of an OIDC ID token to a gpufed caller, or the reason it is refused. Pure.

Owns `OidcPolicy` (the `auth.oidc` settings the mapping needs) and `principal_from_claims`:

    subject   the claim `usernameClaim` (default `sub`); missing or empty: refused (401)
    groups    the claim `groupsClaim` (default `groups`): a list of strings, or one string; Keycloak's full
              group paths ("/ml-team") match "ml-team" too
    tenant    the first group of `tenantsFromGroups`, in the order the operator listed them, that the token
              carries; none: refused (403, naming the token's groups)
    role      likewise the first group of `rolesFromGroups` the token carries; none: `defaultRole` (user)

Signature, issuer, audience and lifetime are checked before this, by broker.tenancy.oidc (PyJWT).
`Refusal` is how any credential check says no: the HTTP code (401 or 403) and a reason for the caller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from broker.tenancy.auth import Principal, Role

__all__ = ["OidcPolicy", "Refusal", "principal_from_claims"]


@dataclass(frozen=True)
class Refusal:
    """A credential that is not accepted: 401 (not who it says, or not usable) or 403 (no tenant)."""

    code: int
    reason: str


@dataclass(frozen=True)
class OidcPolicy:
    issuer: str
    audience: str
    groups_claim: str = "groups"
    username_claim: str = "sub"
    # group -> tenant and group -> role, in the operator's order: the first group the token carries wins
    tenants_from_groups: Mapping[str, str] = field(default_factory=dict)
    roles_from_groups: Mapping[str, Role] = field(default_factory=dict)
    default_role: Role = Role.USER


def _groups(value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or isinstance(value, bytes):
        return []
    names: list[str] = []
    for g in value:
        if isinstance(g, str) and g:
            names.append(g)
            if g.startswith("/"):  # a Keycloak full group path: "/ml-team" or "/org/ml-team"
                names.append(g.rsplit("/", 1)[-1])
    return names


def _first(mapping: Mapping[str, Any], groups: Sequence[str]) -> Any:
    carried = set(groups)
    return next((value for group, value in mapping.items() if group in carried), None)


def principal_from_claims(claims: Mapping[str, Any], policy: OidcPolicy) -> Principal | Refusal:
    """The caller a verified token stands for, or why it may not call."""
    subject = claims.get(policy.username_claim)
    if not isinstance(subject, str) or not subject:
        return Refusal(401, f"the token has no {policy.username_claim!r} claim (auth.oidc.usernameClaim)")
    groups = _groups(claims.get(policy.groups_claim))
    tenant = _first(policy.tenants_from_groups, groups)
    if tenant is None:
        shown = ", ".join(sorted(set(groups))[:10]) or "none"
        return Refusal(
            403,
            f"{subject}: none of the token's groups ({shown}) maps to a tenant "
            f"(claim {policy.groups_claim!r}, auth.oidc.tenantsFromGroups)",
        )
    role = _first(policy.roles_from_groups, groups)
    return Principal(subject, str(tenant), role if role is not None else policy.default_role)
