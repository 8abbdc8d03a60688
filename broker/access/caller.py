"""The authenticated caller of an HTTP request: `caller(request, authorization) -> Principal`, or
`AuthError` (401: no or unknown token; 403: the role may not do this).

The app's credentials are in `app.state.tokens` (a broker.access.credentials.Credentials, replaced while
the broker runs; None under --insecure-no-auth, when every caller is an admin). The principal found is
also left on `request.state.principal` for the audit log. Every HTTP surface resolves its caller here
(the /v1 routes, the HA status route), so no package reaches into another's request handling.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Header, Request
from fastapi.concurrency import run_in_threadpool

from broker.access.credentials import Credentials
from broker.tenancy.auth import ANONYMOUS_ADMIN, Principal
from broker.tenancy.oidc_claims import Refusal

__all__ = ["AuthError", "caller"]


class AuthError(Exception):
    """401 (no or unknown token) or 403 (the role may not do this), answered as a Kubernetes Status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


async def caller(request: Request, authorization: Annotated[str | None, Header()] = None) -> Principal:
    """The authenticated caller of a /v1 request. Async: a static token's lookup is cheaper than the hop
    to a worker thread; an OIDC token, which may need the issuer's keys fetched, takes that hop."""
    credentials: Credentials | None = request.app.state.tokens
    if credentials is None:
        request.state.principal = ANONYMOUS_ADMIN
        return ANONYMOUS_ADMIN
    if not authorization:
        raise AuthError(401, "no bearer token: send Authorization: Bearer <token>")
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthError(401, "the Authorization header must be: Bearer <token>")
    if credentials.slow(token):
        found = await run_in_threadpool(credentials.authenticate, token)
    else:
        found = credentials.authenticate(token)
    if isinstance(found, Refusal):
        raise AuthError(found.code, found.reason)
    request.state.principal = found
    return found
