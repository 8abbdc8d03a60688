"""OIDC tokens checked and mapped to a caller, as tables: the signature, issuer, audience and lifetime
(PyJWT, through broker.tenancy.oidc) and the claims -> subject, tenant and role mapping
(broker.tenancy.oidc_claims). Keys are made by the test; the issuer's key set is read straight from it
here (the HTTP fetch, its cache and rotation are tests/integration/test_oidc_audit.py's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jwt
import pytest

from broker.tenancy.auth import Principal, Role
from broker.tenancy.oidc import ALGORITHMS, OidcAuthenticator
from broker.tenancy.oidc_claims import OidcPolicy, Refusal, principal_from_claims
from tests.oidc_issuer import AUDIENCE, LocalIssuer

ISSUER = LocalIssuer(url="https://idp.example/realms/gpu")
FOREIGN = LocalIssuer(kid="k1", url=ISSUER.url)  # same kid and issuer, another key
OTHER_KID = LocalIssuer(kid="k9", url=ISSUER.url)

POLICY = OidcPolicy(
    issuer=ISSUER.url,
    audience=AUDIENCE,
    tenants_from_groups={"ml-team": "ml", "vision-team": "vision"},
    roles_from_groups={"gpufed-admins": Role.ADMIN, "auditors": Role.VIEWER},
)


class IssuerKeySet:
    """The issuer's published keys by kid (what adapters.oidc_keys fetches)."""

    def __init__(self, issuer: LocalIssuer) -> None:
        self._keys = {k.key_id: k for k in jwt.PyJWKSet.from_dict(issuer.jwks()).keys}

    def signing_key(self, kid: str | None) -> jwt.PyJWK | None:
        return self._keys.get(kid)


AUTH = OidcAuthenticator(POLICY, IssuerKeySet(ISSUER), leeway_seconds=30)


@pytest.mark.parametrize(
    ("mint", "expected"),
    [
        pytest.param(lambda: ISSUER.token(sub="ana"), Principal("ana", "ml", Role.USER), id="valid"),
        pytest.param(lambda: ISSUER.token(exp_in=-120), Refusal(401, "the token has expired"), id="expired"),
        pytest.param(
            lambda: ISSUER.token(exp_in=-10),
            Principal("ana", "ml", Role.USER),
            id="just expired, within the skew",
        ),
        pytest.param(
            lambda: ISSUER.token(nbf_in=600),
            Refusal(401, "the token is not valid yet (nbf/iat in the future)"),
            id="not yet valid",
        ),
        pytest.param(
            lambda: ISSUER.token(aud="another-app"),
            Refusal(401, "the token is not meant for this broker (audience is not 'gpufed')"),
            id="wrong audience",
        ),
        pytest.param(
            lambda: ISSUER.token(iss="https://evil.example/realms/gpu"),
            Refusal(401, f"the token was not issued by {ISSUER.url}"),
            id="wrong issuer",
        ),
        pytest.param(
            OTHER_KID.token,
            Refusal(401, "the token is signed by a key the issuer does not publish (kid 'k9')"),
            id="unknown key",
        ),
        pytest.param(
            FOREIGN.token,
            Refusal(401, "the token's signature does not verify"),
            id="foreign key, known kid",
        ),
        pytest.param(
            lambda: ISSUER.token(groups=["interns"]),
            Refusal(
                403,
                "ana: none of the token's groups (interns) maps to a tenant (claim 'groups', "
                "auth.oidc.tenantsFromGroups)",
            ),
            id="no mapping",
        ),
        pytest.param(
            lambda: ISSUER.token(groups=["vision-team", "auditors", "ml-team"]),
            Principal("ana", "ml", Role.VIEWER),
            id="several groups: the first listed in the mapping wins",
        ),
        pytest.param(
            lambda: ISSUER.token(groups=["ml-team", "gpufed-admins", "auditors"]),
            Principal("ana", "ml", Role.ADMIN),
            id="several role groups: the first listed wins",
        ),
    ],
)
def test_tokens_are_checked_and_mapped(mint: Callable[[], str], expected: Principal | Refusal) -> None:
    """Each token is made when its case runs: lifetimes are relative to now."""
    assert AUTH.authenticate(mint()) == expected


def test_unsigned_and_hmac_tokens_are_refused_whatever_they_claim() -> None:
    claims = {
        "iss": ISSUER.url,
        "aud": AUDIENCE,
        "sub": "mallory",
        "groups": ["ml-team"],
        "exp": 2**40,
        "iat": 1,
    }
    unsigned = jwt.encode(claims, key="", algorithm="none")
    assert AUTH.authenticate(unsigned) == Refusal(
        401, f"token signing algorithm 'none' is not accepted (accepted: {', '.join(ALGORITHMS)})"
    )
    # an HMAC token whose secret is the issuer's public key (the classic key-confusion attack)
    public = ISSUER.jwks()["keys"][0]["n"]
    hmac = jwt.encode(claims, key=public, algorithm="HS256", headers={"kid": "k1"})
    refused = AUTH.authenticate(hmac)
    assert isinstance(refused, Refusal) and refused.code == 401
    assert AUTH.authenticate("not.a.jwt") == Refusal(401, "not a valid JWT")


@pytest.mark.parametrize(
    ("claims", "policy", "expected"),
    [
        pytest.param(
            {"preferred_username": "ana@example.com", "sub": "f81d4fae", "groups": ["/org/ml-team"]},
            OidcPolicy(
                ISSUER.url,
                AUDIENCE,
                username_claim="preferred_username",
                tenants_from_groups={"/org/ml-team": "ml"},
            ),
            Principal("ana@example.com", "ml", Role.USER),
            id="usernameClaim and a Keycloak group path, configured as a path",
        ),
        pytest.param(
            {"sub": "ana", "groups": ["/ml-team"]},
            POLICY,
            Principal("ana", "ml", Role.USER),
            id="a top-level group as a full path is that group",
        ),
        pytest.param(
            {"sub": "eve", "groups": ["/evil/ml-team"]},
            POLICY,
            Refusal(
                403,
                "eve: none of the token's groups (/evil/ml-team) maps to a tenant "
                "(claim 'groups', auth.oidc.tenantsFromGroups)",
            ),
            id="a nested group is not the top-level group of the same last name",
        ),
        pytest.param(
            {"sub": "eve", "groups": ["ml-team", "/evil/gpufed-admins"]},
            POLICY,
            Principal("eve", "ml", Role.USER),
            id="a subgroup named like the admin group is not admin",
        ),
        pytest.param(
            {"sub": "system:gpufed", "groups": ["ml-team"]},
            POLICY,
            Refusal(401, "the token's 'sub' claim starts with 'system:', reserved for the broker itself"),
            id="reserved subject prefix",
        ),
        pytest.param(
            {"sub": "System:hub", "groups": ["ml-team"]},
            POLICY,
            Refusal(401, "the token's 'sub' claim starts with 'system:', reserved for the broker itself"),
            id="reserved prefix in another case",
        ),
        pytest.param(
            {"sub": "a" * 10_000, "groups": ["ml-team"]},
            POLICY,
            Refusal(401, "the token's 'sub' claim is 10000 characters long (at most 256)"),
            id="subject too long",
        ),
        pytest.param(
            {"sub": "ana\nfake log line", "groups": ["ml-team"]},
            POLICY,
            Refusal(401, "the token's 'sub' claim holds control characters"),
            id="subject with a newline",
        ),
        pytest.param(
            {"sub": "ana", "groups": ["ml-team", "g" * 300]},
            POLICY,
            Refusal(401, "the token carries a group name of 300 characters (at most 256)"),
            id="group name too long",
        ),
        pytest.param(
            {"sub": "ana", "groups": [f"g{i}" for i in range(300)]},
            POLICY,
            Refusal(401, "the token carries 300 groups (at most 256)"),
            id="too many groups",
        ),
        pytest.param(
            {"sub": "bo", "roles": "vision-team"},
            OidcPolicy(
                ISSUER.url, AUDIENCE, groups_claim="roles", tenants_from_groups={"vision-team": "vision"}
            ),
            Principal("bo", "vision", Role.USER),
            id="groupsClaim holding one string",
        ),
        pytest.param(
            {"sub": "bo", "groups": ["ml-team"]},
            OidcPolicy(ISSUER.url, AUDIENCE, tenants_from_groups={"ml-team": "ml"}, default_role=Role.VIEWER),
            Principal("bo", "ml", Role.VIEWER),
            id="defaultRole",
        ),
        pytest.param(
            {"groups": ["ml-team"]},
            POLICY,
            Refusal(401, "the token has no 'sub' claim (auth.oidc.usernameClaim)"),
            id="no subject",
        ),
        pytest.param(
            {"sub": "bo"},
            POLICY,
            Refusal(
                403,
                "bo: none of the token's groups (none) maps to a tenant (claim 'groups', auth.oidc.tenantsFromGroups)",
            ),
            id="no groups claim",
        ),
    ],
)
def test_claims_map_to_a_caller(
    claims: dict[str, Any], policy: OidcPolicy, expected: Principal | Refusal
) -> None:
    assert principal_from_claims(claims, policy) == expected
