"""OIDC bearer tokens: the signature, issuer, audience and lifetime checked by PyJWT, then the claims
mapped to a caller (broker.tenancy.oidc_claims).

Owns `OidcAuthenticator.authenticate(token) -> Principal | Refusal` and `KeySource`, the port it gets
the issuer's signing keys through (adapters.oidc_keys fetches discovery and JWKS, caches them and
refetches once, rate-limited, when a token names a key it does not know). Every failure is a Refusal
with a reason the caller can act on (expired, not yet valid, wrong audience, wrong issuer, unknown key,
bad signature); nothing here ever repeats the token.

Accepted algorithms are asymmetric only (RS*, PS*, ES*, EdDSA): never `none`, never an HMAC secret
that a public JWKS key could be confused with. `exp`, `iat`, `iss`, `aud` are required; `exp`, `nbf`
and `iat` get `leeway_seconds` of clock skew.
"""

from __future__ import annotations

import logging
from typing import Protocol

import jwt

from broker.tenancy.auth import Principal
from broker.tenancy.oidc_claims import OidcPolicy, Refusal, principal_from_claims

__all__ = ["ALGORITHMS", "KeySource", "OidcAuthenticator", "looks_like_jwt"]

log = logging.getLogger(__name__)

ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class KeySource(Protocol):
    def signing_key(self, kid: str | None) -> jwt.PyJWK | None:
        """The issuer's key with this kid (None: the only key), refetched once if unknown; None if the
        issuer does not have it (or cannot be reached)."""
        ...


def looks_like_jwt(token: str) -> bool:
    """A compact JWS: three base64url parts, the header a JSON object ("eyJ")."""
    return token.count(".") == 2 and token.startswith("eyJ")


class OidcAuthenticator:
    def __init__(self, policy: OidcPolicy, keys: KeySource, leeway_seconds: float = 30.0) -> None:
        self.policy = policy
        self._keys = keys
        self._leeway = leeway_seconds

    def authenticate(self, token: str) -> Principal | Refusal:
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return Refusal(401, "not a valid JWT")
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            return Refusal(
                401, f"token signing algorithm {alg!r} is not accepted (accepted: {', '.join(ALGORITHMS)})"
            )
        kid = header.get("kid")
        key = self._keys.signing_key(kid if isinstance(kid, str) else None)
        if key is None:
            return Refusal(401, f"the token is signed by a key the issuer does not publish (kid {kid!r})")
        try:
            claims = jwt.decode(
                token,
                key=key.key,
                algorithms=[alg],
                audience=self.policy.audience,
                issuer=self.policy.issuer,
                leeway=self._leeway,
                options={"require": ["exp", "iat", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            return Refusal(401, "the token has expired")
        except jwt.ImmatureSignatureError:
            return Refusal(401, "the token is not valid yet (nbf/iat in the future)")
        except jwt.InvalidAudienceError:
            return Refusal(
                401, f"the token is not meant for this broker (audience is not {self.policy.audience!r})"
            )
        except jwt.InvalidIssuerError:
            return Refusal(401, f"the token was not issued by {self.policy.issuer}")
        except jwt.InvalidSignatureError:
            return Refusal(401, "the token's signature does not verify")
        except jwt.MissingRequiredClaimError as e:
            return Refusal(401, f"the token has no {e.claim!r} claim")
        except jwt.PyJWTError as e:
            return Refusal(401, f"invalid token: {type(e).__name__}")
        return principal_from_claims(claims, self.policy)
