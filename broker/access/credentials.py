"""The credentials the API checks now: the static tokens table and the OIDC authenticator, replaced as
one while the broker runs (a changed tokens file, a changed `auth` section; broker.app.auth).

Owns `Credentials.authenticate(token) -> Principal | Refusal`: the static table first (a digest lookup),
then, when OIDC is configured and the token is a JWT, the OIDC check. `slow(token)` says whether the check
may fetch keys from the issuer (the API then runs it off the event loop). A token the table does not
hold and that is no verifiable JWT is "unknown or revoked" (401).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from broker.tenancy.auth import Principal, TokenTable
from broker.tenancy.oidc import OidcAuthenticator, looks_like_jwt
from broker.tenancy.oidc_claims import Refusal

__all__ = ["UNKNOWN_TOKEN", "Credentials"]

UNKNOWN_TOKEN = Refusal(401, "unknown or revoked token")


@dataclass(frozen=True)
class _Set:
    static: TokenTable | None
    oidc: OidcAuthenticator | None


class Credentials:
    def __init__(self, static: TokenTable | None = None, oidc: OidcAuthenticator | None = None) -> None:
        self._set = _Set(static, oidc)
        self._lock = threading.Lock()

    def replace(self, static: TokenTable | None, oidc: OidcAuthenticator | None) -> None:
        """From the next request on, these (a request in flight finishes with the set it started with)."""
        with self._lock:
            self._set = _Set(static, oidc)

    def replace_static(self, static: TokenTable | None) -> None:
        with self._lock:
            self._set = _Set(static, self._set.oidc)

    @property
    def static(self) -> TokenTable | None:
        return self._set.static

    @property
    def oidc(self) -> OidcAuthenticator | None:
        return self._set.oidc

    def __len__(self) -> int:
        return len(self._set.static) if self._set.static is not None else 0

    def slow(self, token: str) -> bool:
        current = self._set
        return current.oidc is not None and looks_like_jwt(token)

    def authenticate(self, token: str) -> Principal | Refusal:
        current = self._set
        if current.static is not None:
            found = current.static.authenticate(token)
            if found is not None:
                return found
        if current.oidc is not None and looks_like_jwt(token):
            return current.oidc.authenticate(token)
        return UNKNOWN_TOKEN
