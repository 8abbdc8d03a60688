"""From the verified claims of an OIDC ID token to a gpufed caller, or the reason it is refused. Pure.

Owns `OidcPolicy` (the `auth.oidc` settings the mapping needs) and `principal_from_claims`:

    subject   the claim `usernameClaim` (default `sub`); missing, empty, longer than MAX_SUBJECT, holding
              control characters or starting with a reserved prefix (`system:`, the broker's own subjects
              in the audit trail): refused (401)
    groups    the claim `groupsClaim` (default `groups`): a list of strings, or one string, compared exactly
              with the configured names. A full group path is the group it names: "/ml-team" (a top-level
              group, as Keycloak sends it) is "ml-team", but "/org/ml-team" only matches "/org/ml-team"
              (anyone who can make a subgroup must not become a configured group). Longer than MAX_GROUP,
              or more than MAX_GROUPS of them: refused (401)
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

__all__ = [
    "MAX_GROUP",
    "MAX_GROUPS",
    "MAX_SUBJECT",
    "RESERVED_PREFIXES",
    "OidcPolicy",
    "Refusal",
    "principal_from_claims",
]

# the broker's own subjects in the audit trail ("system:gpufed", "system:hub", "system:config-reload")
RESERVED_PREFIXES = ("system:",)
MAX_SUBJECT = 256
MAX_GROUP = 256
MAX_GROUPS = 256


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


def _groups(value: Any) -> list[str] | Refusal:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or isinstance(value, bytes):
        return []
    if len(value) > MAX_GROUPS:
        return Refusal(401, f"the token carries {len(value)} groups (at most {MAX_GROUPS})")
    names: list[str] = []
    for g in value:
        if not isinstance(g, str) or not g:
            continue
        if len(g) > MAX_GROUP:
            return Refusal(
                401, f"the token carries a group name of {len(g)} characters (at most {MAX_GROUP})"
            )
        names.append(g)
        if g.startswith("/") and g.count("/") == 1:  # a top-level group as a full path: "/ml-team"
            names.append(g[1:])
    return names


def _first(mapping: Mapping[str, Any], groups: Sequence[str]) -> Any:
    carried = set(groups)
    return next((value for group, value in mapping.items() if group in carried), None)


def _subject_refusal(subject: Any, claim: str) -> Refusal | None:
    if not isinstance(subject, str) or not subject:
        return Refusal(401, f"the token has no {claim!r} claim (auth.oidc.usernameClaim)")
    if len(subject) > MAX_SUBJECT:
        return Refusal(
            401, f"the token's {claim!r} claim is {len(subject)} characters long (at most {MAX_SUBJECT})"
        )
    if not subject.isprintable():
        return Refusal(401, f"the token's {claim!r} claim holds control characters")
    reserved = next((p for p in RESERVED_PREFIXES if subject.lower().startswith(p)), None)
    if reserved is not None:
        return Refusal(
            401, f"the token's {claim!r} claim starts with {reserved!r}, reserved for the broker itself"
        )
    return None


def principal_from_claims(claims: Mapping[str, Any], policy: OidcPolicy) -> Principal | Refusal:
    """The caller a verified token stands for, or why it may not call."""
    subject = claims.get(policy.username_claim)
    refused = _subject_refusal(subject, policy.username_claim)
    if refused is not None:
        return refused
    assert isinstance(subject, str)
    groups = _groups(claims.get(policy.groups_claim))
    if isinstance(groups, Refusal):
        return groups
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
