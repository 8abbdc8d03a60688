"""An OIDC issuer for tests: RSA keys made here with `cryptography`, ID tokens signed with PyJWT, and the
discovery document and JWKS served over HTTP on 127.0.0.1 (what Keycloak or Dex serve, reduced to the two
documents a relying party reads).

    issuer = LocalIssuer()                 one RS256 key, kid "k1"; `issuer.url` once served
    issuer.token(sub="ana", groups=["ml-team"], exp_in=300, aud=..., iss=..., kid=..., nbf_in=...)
    issuer.rotate("k2")                    a new key published (the old one dropped unless keep=True)
    foreign = LocalIssuer(); foreign.token(...)   signed by a key this issuer never published
    with issuer.serving(): ...             HTTP on a free loopback port; `requests` counts JWKS fetches
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from tests.conftest import free_port

AUDIENCE = "gpufed"


class LocalIssuer:
    def __init__(self, kid: str = "k1", url: str = "http://127.0.0.1:0") -> None:
        self.url = url
        self._keys: dict[str, rsa.RSAPrivateKey] = {}
        self.current = kid
        self._keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.jwks_requests = 0

    def rotate(self, kid: str, keep: bool = False) -> None:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._keys = {**(self._keys if keep else {}), kid: key}
        self.current = kid

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, key in self._keys.items():
            jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
            keys.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        return {"keys": keys}

    def token(
        self,
        sub: str = "ana",
        groups: Sequence[str] = ("ml-team",),
        exp_in: float = 300,
        nbf_in: float | None = None,
        aud: str = AUDIENCE,
        iss: str | None = None,
        kid: str | None = None,
        **claims: Any,
    ) -> str:
        now = time.time()
        body: dict[str, Any] = {
            "iss": iss if iss is not None else self.url,
            "aud": aud,
            "sub": sub,
            "groups": list(groups),
            "iat": int(now),
            "exp": int(now + exp_in),
            **claims,
        }
        if nbf_in is not None:
            body["nbf"] = int(now + nbf_in)
        use = kid or self.current
        return jwt.encode(body, self._keys[use], algorithm="RS256", headers={"kid": use})

    @contextlib.contextmanager
    def serving(self) -> Iterator[LocalIssuer]:
        issuer = self
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    doc: dict[str, Any] = {
                        "issuer": issuer.url,
                        "jwks_uri": f"{issuer.url}/protocol/openid-connect/certs",
                        "id_token_signing_alg_values_supported": ["RS256"],
                    }
                elif self.path == "/protocol/openid-connect/certs":
                    issuer.jwks_requests += 1
                    doc = issuer.jwks()
                else:
                    self.send_error(404)
                    return
                payload = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)
