"""The OIDC issuer's signing keys: discovery and JWKS fetched over HTTPS with httpx, cached, rotated.

Owns `IssuerKeys` (broker.tenancy.oidc.KeySource):

- discovery: GET <issuerUrl>/.well-known/openid-configuration; its `issuer` must be the configured one
  (OpenID Connect Discovery 1.0, section 4.3) and its `jwks_uri` is where the keys are;
- the key set is kept by kid (signature keys only: `use` absent or "sig") and fetched again
  * when a token names a kid the set lacks: at most once per `min_refetch_seconds`, never per request,
    and only one fetch at a time (callers meanwhile wait for it and use its result);
  * when the set is older than `max_age_seconds` (keys the issuer dropped are forgotten);
- an issuer that cannot be reached keeps the keys already known; a token needing a key nobody has
  fetched is refused (the caller says why), and the failure is logged once per fetch.

`clock` is injectable for tests of the rate limit (default time.monotonic).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import jwt

__all__ = ["IssuerError", "IssuerKeys"]

log = logging.getLogger(__name__)


class IssuerError(Exception):
    """The issuer's discovery document or key set could not be read; the message says which and why."""


class IssuerKeys:
    def __init__(
        self,
        issuer_url: str,
        min_refetch_seconds: float = 10.0,
        max_age_seconds: float = 3600.0,
        timeout_seconds: float = 5.0,
        verify: Any = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer_url = issuer_url
        self._min_refetch, self._max_age = min_refetch_seconds, max_age_seconds
        self._http = httpx.Client(timeout=timeout_seconds, verify=verify, follow_redirects=False)
        self._clock = clock
        self._keys: dict[str | None, jwt.PyJWK] = {}
        self._fetched_at: float | None = None  # last attempt, successful or not
        self._loaded_at: float | None = None  # last successful load
        self._lock = threading.Lock()
        self.fetches = 0

    def close(self) -> None:
        self._http.close()

    def _get_json(self, url: str, what: str) -> dict[str, Any]:
        try:
            r = self._http.get(url, headers={"Accept": "application/json"})
            r.raise_for_status()
            doc = r.json()
        except (httpx.HTTPError, ValueError) as e:
            raise IssuerError(f"{what} {url}: {e}") from None
        if not isinstance(doc, dict):
            raise IssuerError(f"{what} {url}: not a JSON object")
        return doc

    def fetch(self) -> None:
        """Discovery, then the key set; IssuerError says what failed."""
        self.fetches += 1
        base = self.issuer_url.rstrip("/")
        discovery = self._get_json(f"{base}/.well-known/openid-configuration", "OIDC discovery")
        if str(discovery.get("issuer", "")).rstrip("/") != base:
            raise IssuerError(
                f"OIDC discovery: the issuer says it is {discovery.get('issuer')!r}, not {self.issuer_url!r} "
                "(auth.oidc.issuerUrl must be the issuer's exact URL)"
            )
        jwks_uri = discovery.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not jwks_uri.startswith(("https://", "http://")):
            raise IssuerError("OIDC discovery: no jwks_uri")
        doc = self._get_json(jwks_uri, "JWKS")
        raw = [k for k in doc.get("keys") or [] if isinstance(k, dict) and k.get("use", "sig") == "sig"]
        try:
            keys = jwt.PyJWKSet(raw).keys
        except jwt.PyJWTError as e:
            raise IssuerError(f"JWKS {jwks_uri}: {e}") from None
        self._keys = {k.key_id: k for k in keys}
        self._loaded_at = self._clock()

    def _refresh(self, reason: str) -> None:
        now = self._clock()
        if self._fetched_at is not None and now - self._fetched_at < self._min_refetch:
            return  # fetched a moment ago: an unknown kid now is not one the issuer has
        self._fetched_at = now
        try:
            self.fetch()
            log.info("OIDC keys of %s fetched (%s): %d key(s)", self.issuer_url, reason, len(self._keys))
        except IssuerError as e:
            log.warning(
                "OIDC keys of %s not fetched (%s): %s; keeping %d known",
                self.issuer_url,
                reason,
                e,
                len(self._keys),
            )

    def _find(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None:
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    def signing_key(self, kid: str | None) -> jwt.PyJWK | None:
        with self._lock:
            if self._loaded_at is None or self._clock() - self._loaded_at > self._max_age:
                self._refresh("first use" if self._loaded_at is None else "periodic")
            key = self._find(kid)
            if key is None:
                self._refresh(f"unknown kid {kid!r}")
                key = self._find(kid)
            return key
